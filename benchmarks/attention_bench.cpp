// attention_bench: the CPU backend's kScaledDotProductAttention kernel and its backward called
// directly on the GPT sample's heads (train_gpt's default: batch 32, 4 heads, 128 positions,
// head width 32, causal), f32 (or bf16 operands with f32 results, --dtype bf16).
//   attention_ms     — median time of one call (`pass`: forward or backward)
//   attention_cpu_ms — median processor time of one call (all threads): with one thread, the
//                      figure another process's load on the machine moves least
// `threads` is the compute pool's size (--threads, default 2); --pass forward or backward times
// one pass only. --layout heads (the default) gives each operand its own [batch, heads, L, E]
// buffer; --layout projection reads q, k and v in place from one [batch, L, 3 heads E] projection
// and the output gradient from [batch, L, heads E], and writes dq, dk and dv into one [batch, L,
// 3 heads E] gradient of the operands' dtype, as the GPT's step does. JSON lines on stdout (see
// benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <time.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/kernel.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

/// Writes more than the last-level cache holds, so that what a kernel reads next comes from
/// memory (--cold).
void evict_caches() {
  static std::vector<char> flood(std::size_t{96} << 20);
  static char value = 0;
  std::memset(flood.data(), ++value, flood.size());
}

void time_calls(const char* pass, const cpu::KernelFn& kernel, const cpu::KernelArgs& args,
                const std::map<std::string, Param>& shape, double min_seconds, bool quick,
                bool cold) {
  kernel(args);  // warm-up: scratch, caches
  std::vector<double> times, cpu_times;
  const auto start = Clock::now();
  while (times.size() < 5 ||
         (!quick && std::chrono::duration<double>(Clock::now() - start).count() < min_seconds)) {
    if (cold) evict_caches();
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_ms();
    kernel(args);
    cpu_times.push_back(process_cpu_ms() - cpu0);
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::map<std::string, Param> params = shape;
  params["pass"] = std::string(pass);
  params["operands"] = std::string(cold ? "cold" : "warm");
  emit("attention", "attention_ms", quantile(times, 0.5), "ms", params);
  emit("attention", "attention_cpu_ms", quantile(cpu_times, 0.5), "ms", params);
}

// The kernels' ints for q, k and v read in place from one [batch, L, 3 heads E] projection and
// the output gradient from [batch, L, heads E]; the backward's gradients written likewise.
struct ProjectionViews {
  std::vector<int64_t> forward, backward;
};

ProjectionViews projection_views(int64_t heads, int64_t L, int64_t E) {
  const int64_t width = 3 * heads * E;
  auto view = [&](int64_t offset, int64_t row) {
    return std::vector<int64_t>{L, E, offset, L * row, E, row};
  };
  ProjectionViews views;
  views.forward = {1, 0, kAttentionViewQ | kAttentionViewK | kAttentionViewV};
  for (int64_t part = 0; part < 3; ++part) {
    const std::vector<int64_t> v = view(part * heads * E, width);
    views.forward.insert(views.forward.end(), v.begin(), v.end());
  }
  views.backward = views.forward;
  views.backward[2] |= kAttentionViewGrad | kAttentionViewOutput;
  const std::vector<int64_t> grad = view(0, heads * E);
  views.backward.insert(views.backward.end(), grad.begin(), grad.end());
  for (int64_t part = 0; part < 3; ++part) {
    views.backward.insert(views.backward.end(), {part * heads * E, L * width, E, width});
  }
  return views;
}

void run(cpu::ComputePool& pool, bool quick, bool cold, bool bf16, bool projection,
         const std::vector<std::string>& passes) {
  auto chosen = [&](const char* pass) {
    return std::find(passes.begin(), passes.end(), pass) != passes.end();
  };
  const int64_t batch = 32, heads = 4, L = 128, E = 32;
  const Shape qkv = projection ? Shape{batch, L, 3 * heads * E} : Shape{batch, heads, L, E};
  const DType operands = bf16 ? DType::kBFloat16 : DType::kFloat32;
  // bf16 operands give f32 results, as under bf16 autocast (and bf16 gradients in a projection,
  // as in the GPT's step).
  const BufferDesc in{operands, qkv}, fwd{DType::kFloat32, Shape{batch, heads, L, E + 1}},
      grads = projection ? BufferDesc{operands, qkv}
                         : BufferDesc{DType::kFloat32, Shape{batch, heads, 3 * L, E}},
      grad_in = projection ? BufferDesc{operands, Shape{batch, L, heads * E}} : in;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  std::vector<float> q = random(qkv.numel()), k = random(qkv.numel()), v = random(qkv.numel()),
                     g = random(qkv.numel());
  if (bf16) {
    // bf16 values packed into the front of each f32 array (the kernel reads 2-byte elements).
    for (std::vector<float>* x : {&q, &k, &v, &g}) {
      std::vector<uint16_t> halves(x->size());
      for (std::size_t i = 0; i < x->size(); ++i) {
        halves[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>((*x)[i]) >> 16);
      }
      std::memcpy(x->data(), halves.data(), halves.size() * sizeof(uint16_t));
    }
  }
  std::vector<float> out(static_cast<std::size_t>(fwd.shape.numel()));
  std::vector<float> back(static_cast<std::size_t>(grads.shape.numel()));
  const double scale = 1 / std::sqrt(static_cast<double>(E));
  const ProjectionViews views = projection ? projection_views(heads, L, E) : ProjectionViews{};
  const KernelCall forward_call{Kernel::kScaledDotProductAttention,
                                {},
                                0,
                                projection ? views.forward : std::vector<int64_t>{1, 0},
                                {scale}};
  const KernelCall backward_call{Kernel::kScaledDotProductAttentionBackward,
                                 {},
                                 0,
                                 projection ? views.backward : std::vector<int64_t>{1, 0},
                                 {scale}};
  // In a projection q, k and v are one buffer (q's), read at three offsets.
  const float* k_data = projection ? q.data() : k.data();
  const float* v_data = projection ? q.data() : v.data();
  const std::vector<cpu::ConstView> forward_in{{q.data(), &in}, {k_data, &in}, {v_data, &in}};
  const std::vector<cpu::ConstView> backward_in{
      {q.data(), &in}, {k_data, &in}, {v_data, &in}, {out.data(), &fwd}, {g.data(), &grad_in}};
  const auto& table = cpu::kernel_table();
  const std::map<std::string, Param> shape{
      {"qkv", qkv.to_string()},
      {"layout", std::string(projection ? "projection" : "heads")},
      {"causal", int64_t{1}},
      {"threads", int64_t{pool.threads()}},
      {"dtype", std::string(bf16 ? "bf16" : "f32")}};
  if (chosen("forward")) {
    time_calls("forward", table[static_cast<std::size_t>(Kernel::kScaledDotProductAttention)],
               cpu::KernelArgs{forward_call, forward_in, {out.data(), &fwd}, pool}, shape, 0.5,
               quick, cold);
  }
  if (chosen("backward")) {
    time_calls("backward",
               table[static_cast<std::size_t>(Kernel::kScaledDotProductAttentionBackward)],
               cpu::KernelArgs{backward_call, backward_in, {back.data(), &grads}, pool}, shape, 0.5,
               quick, cold);
  }
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  CLI::App app{"attention_bench: the CPU attention kernels on the GPT sample's heads"};
  bool quick = false;
  int threads = 2;
  app.add_flag("--quick", quick, "five calls per pass");
  bool cold = false;
  app.add_flag("--cold", cold,
               "write 96 MiB before each timed call, so the operands come from memory as in a "
               "training step");
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1, 64));
  std::vector<std::string> dtypes{"f32"};
  app.add_option("--dtype", dtypes, "operand dtypes: f32, bf16 (f32 results) or both")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->delimiter(',');
  std::vector<std::string> passes{"forward", "backward"};
  app.add_option("--pass", passes, "passes to time: forward, backward or both")
      ->check(CLI::IsMember({"forward", "backward"}))
      ->delimiter(',');
  std::string layout = "heads";
  app.add_option("--layout", layout,
                 "heads: an [batch, heads, L, E] buffer per operand; projection: q, k and v read "
                 "in place from one [batch, L, 3 heads E] buffer, as the GPT's step does")
      ->check(CLI::IsMember({"heads", "projection"}));
  CLI11_PARSE(app, argc, argv);
  axle::cpu::ComputePool pool(threads);
  for (const std::string& dtype : dtypes) {
    axle::bench::run(pool, quick, cold, dtype == "bf16", layout == "projection", passes);
  }
  return 0;
}
