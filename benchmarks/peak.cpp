// benchmarks: the arithmetic peak loops (peak.h). The loops are inline assembly, so the
// instructions measured are exactly the ones named, whatever the compiler would make of
// intrinsics; the AVX-512 ones run only where cpuid reports them.
#include "benchmarks/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

// AVX-512's loops: twenty-four accumulators, each updated once per round, enough independent
// chains to cover the latency of two pipes. Twelve were not, for vdpbf16ps on Zen 5: its loop ran
// about 8% below the rate a product's 28-accumulator tiles reach.
// AVX2 has sixteen registers: its loop updates twelve twice a round (FMA's latency of 4 cycles
// on two pipes needs only eight).
#define AXLE_TWELVE(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define AXLE_TWENTY_FOUR(X) \
  AXLE_TWELVE(X) X(12) X(13) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25)

// `iterations` rounds of 24 instructions; returns the flops done.
// clang-format off
#define AXLE_CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                      "xmm9", "xmm10", "xmm11", "xmm14", "xmm15"
#define AXLE_CLOBBERS_512 AXLE_CLOBBERS, "xmm12", "xmm13", "xmm16", "xmm17", "xmm18", "xmm19", \
                          "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25"
#define AXLE_FMA256(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n\t"
#define AXLE_FMA512(r) "vfmadd231ps %%zmm14, %%zmm15, %%zmm" #r "\n\t"
#define AXLE_DPBF16(r) "vdpbf16ps %%zmm14, %%zmm15, %%zmm" #r "\n\t"
#if defined(__x86_64__)
// The AVX-512 loops name zmm16 and up, which the compiler lets an asm clobber only in code
// compiled for AVX-512.
__attribute__((target("avx512f"))) double run_fma512(int64_t iterations) {
  for (int64_t i = 0; i < iterations; ++i) {
    __asm__ volatile("vpxord %%zmm14, %%zmm14, %%zmm14\n\t"
                     "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
                     AXLE_TWENTY_FOUR(AXLE_FMA512)
                     ::: AXLE_CLOBBERS_512);
  }
  return static_cast<double>(iterations) * 24 * 32;
}

__attribute__((target("avx512f,avx512bf16"))) double run_dpbf16(int64_t iterations) {
  for (int64_t i = 0; i < iterations; ++i) {
    __asm__ volatile("vpxord %%zmm14, %%zmm14, %%zmm14\n\t"
                     "vpxord %%zmm15, %%zmm15, %%zmm15\n\t"
                     AXLE_TWENTY_FOUR(AXLE_DPBF16)
                     ::: AXLE_CLOBBERS_512);
  }
  return static_cast<double>(iterations) * 24 * 64;
}
#endif

double run_loop(PeakInstruction instruction, int64_t iterations) {
#if defined(__x86_64__)
  switch (instruction) {
    case PeakInstruction::kFma256:
      for (int64_t i = 0; i < iterations; ++i) {
        __asm__ volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n\t"
                         "vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
                         AXLE_TWELVE(AXLE_FMA256) AXLE_TWELVE(AXLE_FMA256)
                         ::: AXLE_CLOBBERS);
      }
      return static_cast<double>(iterations) * 24 * 16;
    case PeakInstruction::kFma512:
      return run_fma512(iterations);
    case PeakInstruction::kDpbf16:
      return run_dpbf16(iterations);
  }
#endif
  return 0;
}
#undef AXLE_DPBF16
#undef AXLE_FMA512
#undef AXLE_FMA256
#undef AXLE_CLOBBERS_512
#undef AXLE_CLOBBERS
// clang-format on

#undef AXLE_TWENTY_FOUR
#undef AXLE_TWELVE

// GFLOP/s of one thread's loop over about `seconds`, started when `go` turns true.
double timed_loop(PeakInstruction instruction, double seconds, const std::atomic<bool>& go) {
  while (!go.load(std::memory_order_acquire)) {
  }
  constexpr int64_t kChunk = 20000;
  double flops = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    flops += run_loop(instruction, kChunk);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return flops / elapsed * 1e-9;
}

}  // namespace

std::string_view peak_instruction_name(PeakInstruction instruction) noexcept {
  switch (instruction) {
    case PeakInstruction::kFma256:
      return "vfmadd231ps_ymm";
    case PeakInstruction::kFma512:
      return "vfmadd231ps_zmm";
    case PeakInstruction::kDpbf16:
      return "vdpbf16ps_zmm";
  }
  return "unknown";
}

bool peak_instruction_supported(PeakInstruction instruction) noexcept {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (instruction) {
    case PeakInstruction::kFma256:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PeakInstruction::kFma512:
      return __builtin_cpu_supports("avx512f");
    case PeakInstruction::kDpbf16:
      return __builtin_cpu_supports("avx512bf16");
  }
#endif
  return false;
}

double measure_peak_gflops(PeakInstruction instruction, int threads, double seconds) {
  if (!peak_instruction_supported(instruction)) return 0;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> go{false};
    std::vector<double> rates(static_cast<std::size_t>(threads));
    std::vector<std::thread> workers;
    for (int t = 1; t < threads; ++t) {
      workers.emplace_back(
          [&, t] { rates[static_cast<std::size_t>(t)] = timed_loop(instruction, seconds, go); });
    }
    go.store(true, std::memory_order_release);
    rates[0] = timed_loop(instruction, seconds, go);
    for (std::thread& w : workers) w.join();
    double total = 0;
    for (double r : rates) total += r;
    best = std::max(best, total);
  }
  return best;
}

}  // namespace axle::bench
