// benchmarks: the processor's arithmetic peak, measured rather than quoted. A loop of 24
// independent accumulators issues one instruction kind back to back (no loads), on one thread
// or on several at once, so a benchmark can state its own figures as fractions of what this
// processor did in the same run.
#pragma once

#include <string_view>

namespace axle::bench {

/// The multiply-add instructions whose rate bounds the product kernels.
enum class PeakInstruction {
  kFma256,  ///< vfmadd231ps on 8 floats (AVX2): 16 flops
  kFma512,  ///< vfmadd231ps on 16 floats (AVX-512): 32 flops
  kDpbf16,  ///< vdpbf16ps on 32 bf16 pairs (AVX512_BF16): 64 flops
};

[[nodiscard]] std::string_view peak_instruction_name(PeakInstruction instruction) noexcept;

/// Whether this processor runs `instruction`.
[[nodiscard]] bool peak_instruction_supported(PeakInstruction instruction) noexcept;

/// GFLOP/s of `instruction` summed over `threads` threads running the loop at once, the best of
/// a few rounds of about `seconds` each.
[[nodiscard]] double measure_peak_gflops(PeakInstruction instruction, int threads,
                                         double seconds = 0.2);

}  // namespace axle::bench
