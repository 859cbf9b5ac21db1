// backends/cpu: the instruction-set choice (isa.h).
#include "axle/backends/cpu/isa.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>

namespace axle::cpu {
namespace {

constexpr std::array<std::pair<CpuIsa, std::string_view>, 4> kNames{{
    {CpuIsa::kGeneric, "generic"},
    {CpuIsa::kAvx2, "avx2"},
    {CpuIsa::kAvx512, "avx512"},
    {CpuIsa::kAvx512Bf16, "avx512_bf16"},
}};

CpuIsa detect() noexcept {
#if defined(__x86_64__) && defined(AXLE_HAVE_AVX512_KERNELS)
  // libgcc's checks include the operating system's support for the wider registers (xgetbv).
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return CpuIsa::kAvx512Bf16;
  if (avx512) return CpuIsa::kAvx512;
#endif
#if defined(__AVX2__) && defined(__FMA__)
  return CpuIsa::kAvx2;  // the build's baseline: every processor that runs it has them
#else
  return CpuIsa::kGeneric;
#endif
}

std::atomic<CpuIsa>& current() noexcept {
  static std::atomic<CpuIsa> isa{detected_cpu_isa()};
  return isa;
}

}  // namespace

std::string_view cpu_isa_name(CpuIsa isa) noexcept {
  for (const auto& [value, name] : kNames) {
    if (value == isa) return name;
  }
  return "unknown";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) noexcept {
  for (const auto& [value, n] : kNames) {
    if (n == name) return value;
  }
  return std::nullopt;
}

CpuIsa detected_cpu_isa() noexcept {
  static const CpuIsa detected = detect();
  return detected;
}

CpuIsa cpu_isa() noexcept { return current().load(std::memory_order_relaxed); }

void set_cpu_isa(CpuIsa isa) {
  if (isa > detected_cpu_isa()) {
    throw std::invalid_argument(
        fmt::format("the CPU kernels cannot use {}: this processor (or "
                    "build) supports at most {}",
                    cpu_isa_name(isa), cpu_isa_name(detected_cpu_isa())));
  }
  current().store(isa, std::memory_order_relaxed);
}

void set_cpu_isa(std::string_view name, std::string_view setting) {
  if (name.empty() || name == "auto") return set_cpu_isa(detected_cpu_isa());
  const std::optional<CpuIsa> isa = parse_cpu_isa(name);
  if (!isa) {
    throw std::invalid_argument(
        fmt::format("{}={}: not an instruction set; use auto, generic, avx2, avx512 or avx512_bf16",
                    setting, name));
  }
  try {
    set_cpu_isa(*isa);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}={}: {}", setting, name, e.what()));
  }
}

}  // namespace axle::cpu
