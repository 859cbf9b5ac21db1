// attention_bench: the CPU backend's kScaledDotProductAttention kernel and its backward called
// directly on the GPT sample's heads (train_gpt's default: batch 32, 4 heads, 128 positions,
// head width 32, causal), f32 (or bf16 operands with f32 results, --dtype bf16).
//   attention_ms     — median time of one call (`pass`: forward or backward)
//   attention_cpu_ms — median processor time of one call (all threads): with one thread, the
//                      figure another process's load on the machine moves least
// `threads` is the compute pool's size (--threads, default 2); --pass forward or backward times
// one pass only. JSON lines on stdout (see
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

void time_calls(const char* pass, const cpu::KernelFn& kernel, const cpu::KernelArgs& args,
                const std::map<std::string, Param>& shape, double min_seconds, bool quick) {
  kernel(args);  // warm-up: scratch, caches
  std::vector<double> times, cpu_times;
  const auto start = Clock::now();
  while (times.size() < 5 ||
         (!quick && std::chrono::duration<double>(Clock::now() - start).count() < min_seconds)) {
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_ms();
    kernel(args);
    cpu_times.push_back(process_cpu_ms() - cpu0);
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::map<std::string, Param> params = shape;
  params["pass"] = std::string(pass);
  emit("attention", "attention_ms", quantile(times, 0.5), "ms", params);
  emit("attention", "attention_cpu_ms", quantile(cpu_times, 0.5), "ms", params);
}

void run(cpu::ComputePool& pool, bool quick, bool bf16, const std::vector<std::string>& passes) {
  auto chosen = [&](const char* pass) {
    return std::find(passes.begin(), passes.end(), pass) != passes.end();
  };
  const int64_t batch = 32, heads = 4, L = 128, E = 32;
  const Shape qkv{batch, heads, L, E};
  // bf16 operands give f32 results, as under bf16 autocast.
  const BufferDesc in{bf16 ? DType::kBFloat16 : DType::kFloat32, qkv},
      fwd{DType::kFloat32, Shape{batch, heads, L, E + 1}},
      grads{DType::kFloat32, Shape{batch, heads, 3 * L, E}};
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
  const KernelCall forward_call{Kernel::kScaledDotProductAttention, {}, 0, {1, 0}, {scale}};
  const KernelCall backward_call{
      Kernel::kScaledDotProductAttentionBackward, {}, 0, {1, 0}, {scale}};
  const std::vector<cpu::ConstView> forward_in{{q.data(), &in}, {k.data(), &in}, {v.data(), &in}};
  const std::vector<cpu::ConstView> backward_in{
      {q.data(), &in}, {k.data(), &in}, {v.data(), &in}, {out.data(), &fwd}, {g.data(), &in}};
  const auto& table = cpu::kernel_table();
  const std::map<std::string, Param> shape{{"qkv", qkv.to_string()},
                                           {"causal", int64_t{1}},
                                           {"threads", int64_t{pool.threads()}},
                                           {"dtype", std::string(bf16 ? "bf16" : "f32")}};
  if (chosen("forward")) {
    time_calls("forward", table[static_cast<std::size_t>(Kernel::kScaledDotProductAttention)],
               cpu::KernelArgs{forward_call, forward_in, {out.data(), &fwd}, pool}, shape, 0.5,
               quick);
  }
  if (chosen("backward")) {
    time_calls("backward",
               table[static_cast<std::size_t>(Kernel::kScaledDotProductAttentionBackward)],
               cpu::KernelArgs{backward_call, backward_in, {back.data(), &grads}, pool}, shape, 0.5,
               quick);
  }
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  CLI::App app{"attention_bench: the CPU attention kernels on the GPT sample's heads"};
  bool quick = false;
  int threads = 2;
  app.add_flag("--quick", quick, "five calls per pass");
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1, 64));
  std::vector<std::string> dtypes{"f32"};
  app.add_option("--dtype", dtypes, "operand dtypes: f32, bf16 (f32 results) or both")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->delimiter(',');
  std::vector<std::string> passes{"forward", "backward"};
  app.add_option("--pass", passes, "passes to time: forward, backward or both")
      ->check(CLI::IsMember({"forward", "backward"}))
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  axle::cpu::ComputePool pool(threads);
  for (const std::string& dtype : dtypes) axle::bench::run(pool, quick, dtype == "bf16", passes);
  return 0;
}
