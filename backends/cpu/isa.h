// backends/cpu: which instruction set the CPU kernels run on. The default build targets x86-64-v3
// (AVX2 and FMA); kernels for wider instruction sets are compiled apart (gemm_avx512.cpp) and
// chosen once from what cpuid reports, so one binary runs on every x86-64-v3 processor and uses
// AVX-512 and AVX512_BF16 where the processor has them. A lower path can be forced
// (AXLE_CPU_ISA), which the kernel tests do to run every path the machine has.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace axle::cpu {

/// The instruction sets the CPU kernels have paths for, each a superset of the one before.
enum class CpuIsa : uint8_t {
  kGeneric,     ///< portable C++ and Eigen only (a build for another architecture)
  kAvx2,        ///< 256-bit vectors with FMA
  kAvx512,      ///< 512-bit vectors (avx512f, bw, vl, dq)
  kAvx512Bf16,  ///< and vdpbf16ps: bf16 products summed in f32
};

/// The name a setting uses for `isa`: generic, avx2, avx512, avx512_bf16.
[[nodiscard]] std::string_view cpu_isa_name(CpuIsa isa) noexcept;
/// The instruction set named `name` (as cpu_isa_name gives), or nullopt.
[[nodiscard]] std::optional<CpuIsa> parse_cpu_isa(std::string_view name) noexcept;

/// The widest instruction set this processor and its operating system support (cpuid, xgetbv),
/// among those this build has kernels for.
[[nodiscard]] CpuIsa detected_cpu_isa() noexcept;

/// The instruction set the kernels use now: detected_cpu_isa() unless lowered by set_cpu_isa.
[[nodiscard]] CpuIsa cpu_isa() noexcept;

/// Makes the kernels of every CPU device in the process use `isa` from their next call. Throws
/// std::invalid_argument naming both when `isa` is above detected_cpu_isa().
void set_cpu_isa(CpuIsa isa);

/// Parses `name` ("auto" or "" for detected_cpu_isa()) and sets it; throws std::invalid_argument
/// naming `setting` for an unknown name or one this processor lacks.
void set_cpu_isa(std::string_view name, std::string_view setting);

}  // namespace axle::cpu
