// gemm_bench: the CPU backend's matrix products (backends/cpu/gemm.h, called directly: the
// figure is the kernels', without a step around them) on a large square product and on the
// shapes the samples' models multiply, per precision, instruction-set path and thread count,
// each as a fraction of the peak this run measures for the instruction the path multiplies with
// (benchmarks/peak.h).
//   peak_gflops       — the multiply-add loop's rate (`instruction`, `threads`)
//   gemm_gflops       — 2 · m · n · k / time, the best of several timed rounds; `of_peak` is the
//                       fraction of the matching peak_gflops
//   gemm_thread_scaling — the 1024³ product on every thread / on one (`precision`, `isa`)
// With --cold, each call reads another copy of the operands from a set larger than the last-level
// cache (`operands` "cold"), as a training step's products find activations written long before;
// otherwise the operands stay in the caches between calls (`operands` "warm").
// JSON lines on stdout (see benchmarks/README.md).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/isa.h"
#include "benchmarks/peak.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;
using cpu::CpuIsa;
using cpu::GemmPrecision;

/// One product: op(a) [m, k] · op(b) [k, n], the operands stored transposed as the models'
/// products store them.
struct Shape3 {
  std::string name;
  int64_t m, n, k;
  bool transpose_a, transpose_b;
};

// GPT (train_gpt's default: 32 × 128 tokens, width 128, 4 heads): each linear layer's forward
// (x · Wᵀ), input gradient (dy · W) and weight gradient (dyᵀ · x), and one head's attention
// products; the MNIST CNN's per-image im2col products (conv_bench's shapes) and its conv2 weight
// gradient (rows of receptive fields over the batch); the MLP's first layer (batch 128).
const std::vector<Shape3> kShapes = {
    {"square_1024", 1024, 1024, 1024, false, false},
    {"gpt_qkv", 4096, 384, 128, false, true},
    {"gpt_qkv_input_grad", 4096, 128, 384, false, false},
    {"gpt_qkv_weight_grad", 384, 128, 4096, true, false},
    {"gpt_fc", 4096, 512, 128, false, true},
    {"gpt_fc_input_grad", 4096, 128, 512, false, false},
    {"gpt_fc_weight_grad", 512, 128, 4096, true, false},
    {"gpt_proj", 4096, 128, 512, false, true},
    {"gpt_proj_input_grad", 4096, 512, 128, false, false},
    {"gpt_proj_weight_grad", 128, 512, 4096, true, false},
    {"gpt_attention_scores", 128, 128, 32, false, true},
    {"gpt_attention_values", 128, 32, 128, false, false},
    {"cnn_conv1", 32, 784, 9, false, false},
    {"cnn_conv2", 64, 196, 288, false, false},
    {"cnn_conv2_input_grad", 288, 196, 64, false, false},
    {"cnn_conv2_weight_grad", 288, 64, 12544, false, true},
    {"mlp_fc1", 128, 512, 784, false, true},
};

/// The instruction a path multiplies with in `precision`.
PeakInstruction instruction_of(CpuIsa isa, GemmPrecision precision) {
  if (isa == CpuIsa::kAvx2) return PeakInstruction::kFma256;
  if (isa == CpuIsa::kAvx512Bf16 && precision == GemmPrecision::kBf16) {
    return PeakInstruction::kDpbf16;
  }
  return PeakInstruction::kFma512;
}

/// Operands and output of a product, f32 or bf16, with random values.
struct Buffers {
  std::vector<float> a, b, out;
  std::vector<cpu::Bf16> a16, b16, out16;
};

Buffers make_buffers(const Shape3& s) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  Buffers x;
  x.a.resize(static_cast<std::size_t>(s.m * s.k));
  x.b.resize(static_cast<std::size_t>(s.k * s.n));
  x.out.resize(static_cast<std::size_t>(s.m * s.n));
  for (float& v : x.a) v = u(rng);
  for (float& v : x.b) v = u(rng);
  for (float v : x.a) x.a16.push_back(cpu::narrow(v));
  for (float v : x.b) x.b16.push_back(cpu::narrow(v));
  x.out16.resize(x.out.size());
  return x;
}

cpu::Gemm make_gemm(const Shape3& s, Buffers& x, GemmPrecision precision) {
  const bool bf16 = precision == GemmPrecision::kBf16;
  cpu::Gemm g;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.a = {bf16 ? static_cast<const void*>(x.a16.data()) : x.a.data(), s.transpose_a ? s.m : s.k,
         s.transpose_a, bf16};
  g.b = {bf16 ? static_cast<const void*>(x.b16.data()) : x.b.data(), s.transpose_b ? s.k : s.n,
         s.transpose_b, bf16};
  g.out = bf16 ? static_cast<void*>(x.out16.data()) : x.out.data();
  g.ldc = s.n;
  g.out_bf16 = bf16;
  g.precision = precision;
  return g;
}

/// Copies of a product's operands that together pass this many bytes, for --cold: more than the
/// last-level cache of the processors this runs on (32 MiB on a Zen 5's CCD).
constexpr std::size_t kColdBytes = std::size_t{96} << 20;

/// How many copies of `s`'s operands --cold cycles through (1 when warm).
std::size_t copies_of(const Shape3& s, bool cold) {
  if (!cold) return 1;
  const auto bytes = static_cast<std::size_t>(s.m * s.k + s.k * s.n) * sizeof(float);
  return std::max<std::size_t>(2, (kColdBytes + bytes - 1) / bytes);
}

/// GFLOP/s of the product: the best of `rounds` rounds, each repeating it for about 20 ms,
/// calls taking the products of `gemms` (copies of one product's operands) in turn.
double time_product(const std::vector<cpu::Gemm>& gemms, cpu::ComputePool& pool, int rounds) {
  const cpu::Gemm& g = gemms.front();
  const double flops = 2.0 * static_cast<double>(g.m * g.n * g.k);
  std::size_t next = 0;
  auto call = [&] {
    cpu::gemm(gemms[next], &pool);
    next = (next + 1) % gemms.size();
  };
  call();  // warm: packing buffers (and caches, when there is one copy)
  const auto probe = Clock::now();
  call();
  const double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - probe).count());
  const int repeats = std::max(1, static_cast<int>(0.02 / once));
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < repeats; ++i) call();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, flops * repeats / seconds * 1e-9);
  }
  return best;
}

// The instruction-set paths `names` asks for (every one the processor has when empty), or none
// after printing why one cannot be run.
std::optional<std::vector<cpu::CpuIsa>> chosen_paths(const std::vector<std::string>& names) {
  std::vector<cpu::CpuIsa> paths;
  if (names.empty()) {
    for (cpu::CpuIsa isa : {cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512, cpu::CpuIsa::kAvx512Bf16}) {
      if (isa <= cpu::detected_cpu_isa()) paths.push_back(isa);
    }
    return paths;
  }
  for (const std::string& name : names) {
    const auto isa = cpu::parse_cpu_isa(name);
    if (!isa) {
      fmt::print(stderr, "gemm_bench: --isa {}: not an instruction set\n", name);
      return std::nullopt;
    }
    if (*isa > cpu::detected_cpu_isa()) {
      fmt::print(stderr, "gemm_bench: --isa {}: this processor has at most {}\n", name,
                 cpu::cpu_isa_name(cpu::detected_cpu_isa()));
      return std::nullopt;
    }
    paths.push_back(*isa);
  }
  return paths;
}

using Peaks = std::map<std::pair<PeakInstruction, int>, double>;

// The peaks, for every instruction and thread count this run uses.
Peaks measure_peaks(const std::vector<int>& thread_counts, bool quick) {
  Peaks peaks;
  for (PeakInstruction instruction :
       {PeakInstruction::kFma256, PeakInstruction::kFma512, PeakInstruction::kDpbf16}) {
    if (!peak_instruction_supported(instruction)) continue;
    for (int threads : thread_counts) {
      const double gflops = measure_peak_gflops(instruction, threads, quick ? 0.1 : 0.3);
      peaks[{instruction, threads}] = gflops;
      emit("gemm", "peak_gflops", gflops, "GFLOP/s",
           {{"instruction", std::string(peak_instruction_name(instruction))},
            {"threads", int64_t{threads}}});
    }
  }
  return peaks;
}

// Every shape (of `only`, when given) on `isa` in `precision_name`, at each thread count, against
// the peak of the instruction it runs on; and how the square product scales with the threads.
void run_products(cpu::CpuIsa isa, const std::string& precision_name,
                  const std::vector<int>& thread_counts, const std::vector<std::string>& only,
                  const Peaks& peaks, int rounds, bool cold) {
  const cpu::GemmPrecision precision =
      precision_name == "bf16" ? cpu::GemmPrecision::kBf16 : cpu::GemmPrecision::kF32;
  cpu::set_cpu_isa(isa);
  const PeakInstruction instruction = instruction_of(isa, precision);
  std::map<int, double> square;
  for (int threads : thread_counts) {
    cpu::ComputePool pool(threads);
    for (const Shape3& s : kShapes) {
      if (!only.empty() && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
      std::vector<Buffers> buffers(copies_of(s, cold), make_buffers(s));
      std::vector<cpu::Gemm> gemms;
      for (Buffers& copy : buffers) gemms.push_back(make_gemm(s, copy, precision));
      const double gflops = time_product(gemms, pool, rounds);
      if (s.name == "square_1024") square[threads] = gflops;
      const auto peak = peaks.find({instruction, threads});
      const double of_peak = peak != peaks.end() && peak->second > 0 ? gflops / peak->second : 0.0;
      emit("gemm", "gemm_gflops", gflops, "GFLOP/s",
           {{"case", s.name},
            {"m", s.m},
            {"n", s.n},
            {"k", s.k},
            {"transpose_a", s.transpose_a},
            {"transpose_b", s.transpose_b},
            {"precision", precision_name},
            {"isa", std::string(cpu::cpu_isa_name(isa))},
            {"threads", int64_t{threads}},
            {"operands", std::string(cold ? "cold" : "warm")},
            {"of_peak", of_peak}});
    }
  }
  if (square.count(1) && square.size() > 1) {
    const int most = square.rbegin()->first;
    emit("gemm", "gemm_thread_scaling", square[most] / square[1], "x",
         {{"case", std::string("square_1024")},
          {"precision", precision_name},
          {"isa", std::string(cpu::cpu_isa_name(isa))},
          {"threads", int64_t{most}}});
  }
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  CLI::App app{"gemm_bench: the CPU matrix products against the processor's measured peak"};
  bool quick = false, cold = false;
  std::vector<std::string> only, isas, precisions{"f32", "bf16"};
  std::vector<int> thread_counts;
  app.add_flag("--quick", quick, "fewer timed rounds");
  app.add_flag("--cold", cold,
               "each call reads another copy of the operands, from a set larger than the "
               "last-level cache");
  std::vector<std::string> shape_names;
  for (const Shape3& s : kShapes) shape_names.push_back(s.name);
  app.add_option("--only", only, "run only the shapes of these names (e.g. square_1024,gpt_qkv)")
      ->check(CLI::IsMember(shape_names))
      ->delimiter(',');
  app.add_option("--isa", isas,
                 "instruction-set paths (avx2, avx512, avx512_bf16; default: each this "
                 "processor has)")
      ->delimiter(',');
  app.add_option("--precision", precisions, "f32, bf16 or both")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->delimiter(',');
  app.add_option("--threads", thread_counts, "thread counts (default: 1 and every core)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (thread_counts.empty())
    thread_counts = cores > 1 ? std::vector<int>{1, cores} : std::vector<int>{1};
  const std::optional<std::vector<cpu::CpuIsa>> paths = chosen_paths(isas);
  if (!paths) return 2;
  const Peaks peaks = measure_peaks(thread_counts, quick);
  for (const std::string& precision : precisions) {
    for (cpu::CpuIsa isa : *paths) {
      // In f32 the avx512_bf16 path is the avx512 one.
      if (precision == "f32" && isa == cpu::CpuIsa::kAvx512Bf16 &&
          std::find(paths->begin(), paths->end(), cpu::CpuIsa::kAvx512) != paths->end()) {
        continue;
      }
      run_products(isa, precision, thread_counts, only, peaks, quick ? 3 : 7, cold);
    }
  }
  cpu::set_cpu_isa(cpu::detected_cpu_isa());
  return 0;
}
