// conv_bench: the CPU backend's kConv2d kernel (and kConvTranspose2d) called directly on the shapes
// of the MNIST CNN's training step (forward, and the input and weight gradients as autograd writes
// them, batch 64) and of ResNet's convolutions (224×224 inputs, batch 8).
//   conv_ms    — median time of one call
//   conv_gflops — 2 · multiply-adds / time
//   conv_cpu_ms — median processor time of one call (all threads): with one thread, the figure
//                 another process's load on the machine moves least
// Each case is named (`case`) and carries its shapes; `threads` is the compute pool's size
// (--threads, default 2). JSON lines on stdout (see benchmarks/README.md).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <time.h>

#include <chrono>
#include <cstdlib>
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

struct ConvCase {
  std::string name;
  Shape x, w;
  int64_t stride = 1, pad = 0, dilation = 1, groups = 1;
  // kConvTranspose2d instead (w [C, O / groups, kh, kw]), with this output padding.
  bool transposed = false;
  int64_t output_padding = 0;
};

int64_t out_size(int64_t size, int64_t k, const ConvCase& c) {
  if (c.transposed) {
    return (size - 1) * c.stride - 2 * c.pad + c.dilation * (k - 1) + c.output_padding + 1;
  }
  return (size + 2 * c.pad - c.dilation * (k - 1) - 1) / c.stride + 1;
}

// 64-byte-aligned floats, as the backend's buffers are.
struct Floats {
  explicit Floats(int64_t n)
      : data(static_cast<float*>(
            std::aligned_alloc(64, (static_cast<std::size_t>(n) * 4 + 63) / 64 * 64 + 64))) {}
  ~Floats() { std::free(data); }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  float* data;
};

void run_case(const ConvCase& c, cpu::ComputePool& pool, double min_seconds, bool quick) {
  const Shape out_shape{c.x[0], c.transposed ? c.w[1] * c.groups : c.w[0],
                        out_size(c.x[2], c.w[2], c), out_size(c.x[3], c.w[3], c)};
  const Kernel kernel = c.transposed ? Kernel::kConvTranspose2d : Kernel::kConv2d;
  const BufferDesc xd{DType::kFloat32, c.x}, wd{DType::kFloat32, c.w},
      od{DType::kFloat32, out_shape};
  Floats x(c.x.numel()), w(c.w.numel()), out(out_shape.numel());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < c.x.numel(); ++i) x.data[i] = u(rng);
  for (int64_t i = 0; i < c.w.numel(); ++i) w.data[i] = u(rng);
  const std::vector<cpu::ConstView> inputs{{x.data, &xd}, {w.data, &wd}};
  const KernelCall call{
      kernel, {}, 0, {c.stride, c.stride, c.pad, c.pad, c.dilation, c.dilation, c.groups}, {}};
  const cpu::KernelArgs args{call, inputs, {out.data, &od}, pool};
  const cpu::KernelFn conv = cpu::kernel_table()[static_cast<std::size_t>(kernel)];
  conv(args);  // warm-up: scratch, caches
  std::vector<double> times, cpu_times;
  const auto start = Clock::now();
  while (times.size() < 5 ||
         (!quick && std::chrono::duration<double>(Clock::now() - start).count() < min_seconds)) {
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_ms();
    conv(args);
    cpu_times.push_back(process_cpu_ms() - cpu0);
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double ms = quantile(times, 0.5);
  // Each output (each input, transposed) meets one weight per tap of its group.
  const double flops = 2.0 * static_cast<double>(c.transposed ? c.x.numel() : out_shape.numel()) *
                       static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
  const std::map<std::string, Param> params{
      {"case", c.name},
      {"x", c.x.to_string()},
      {"w", c.w.to_string()},
      {"attrs", fmt::format("stride={} pad={} dilation={} groups={}", c.stride, c.pad, c.dilation,
                            c.groups)},
      {"threads", int64_t{pool.threads()}}};
  emit("conv", "conv_ms", ms, "ms", params);
  emit("conv", "conv_gflops", flops / ms * 1e-6, "GFLOP/s", params);
  emit("conv", "conv_cpu_ms", quantile(cpu_times, 0.5), "ms", params);
}

std::vector<ConvCase> cases(const std::string& set) {
  std::vector<ConvCase> all;
  if (set == "all" || set == "cnn") {
    // samples/mnist_models.h's MnistCnn at batch 64; the gradients as graph/autograd/conv_grad.cpp
    // writes them (the weight's: the batch as channels, the output gradient as kernel).
    all.push_back({"cnn_conv1", {64, 1, 28, 28}, {32, 1, 3, 3}, 1, 1});
    all.push_back({"cnn_conv2", {64, 32, 14, 14}, {64, 32, 3, 3}, 1, 1});
    all.push_back({"cnn_conv2_input_grad", {64, 64, 14, 14}, {32, 64, 3, 3}, 1, 1});
    all.push_back({"cnn_conv2_weight_grad", {32, 64, 14, 14}, {64, 64, 14, 14}, 1, 1});
    all.push_back({"cnn_conv1_weight_grad", {1, 64, 28, 28}, {32, 64, 28, 28}, 1, 1});
  }
  if (set == "all" || set == "resnet") {
    // ResNet-18/50's convolution forms on 224×224 inputs, batch 8.
    all.push_back({"resnet_stem_7x7_s2", {8, 3, 224, 224}, {64, 3, 7, 7}, 2, 3});
    all.push_back({"resnet_3x3_s1_56", {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1});
    all.push_back({"resnet_3x3_s2_56", {8, 64, 56, 56}, {128, 64, 3, 3}, 2, 1});
    all.push_back({"resnet_3x3_s1_28", {8, 128, 28, 28}, {128, 128, 3, 3}, 1, 1});
    all.push_back({"resnet_3x3_s1_14", {8, 256, 14, 14}, {256, 256, 3, 3}, 1, 1});
    all.push_back({"resnet_3x3_s1_7", {8, 512, 7, 7}, {512, 512, 3, 3}, 1, 1});
    all.push_back({"resnet_1x1_56", {8, 256, 56, 56}, {64, 256, 1, 1}});
    all.push_back({"resnet_1x1_s2_56", {8, 64, 56, 56}, {128, 64, 1, 1}, 2});
    all.push_back({"resnet_3x3_s1_56_input_grad", {8, 64, 56, 56}, {64, 64, 3, 3}, 1, 1});
    all.push_back({"resnet_3x3_s1_56_weight_grad", {64, 8, 56, 56}, {64, 8, 56, 56}, 1, 1});
    all.push_back({"resnet_3x3_s1_7_weight_grad", {512, 8, 7, 7}, {512, 8, 7, 7}, 1, 1});
    // Input gradients as conv_transpose2d: a stride-2 layer's (the form autograd writes), and
    // the unit-stride 56x56 one's, to set beside resnet_3x3_s1_56_input_grad.
    all.push_back(
        {"resnet_3x3_s2_56_input_grad", {8, 128, 28, 28}, {128, 64, 3, 3}, 2, 1, 1, 1, true, 1});
    all.push_back(
        {"resnet_3x3_s2_28_input_grad", {8, 256, 14, 14}, {256, 128, 3, 3}, 2, 1, 1, 1, true, 1});
    all.push_back(
        {"resnet_3x3_s2_14_input_grad", {8, 512, 7, 7}, {512, 256, 3, 3}, 2, 1, 1, 1, true, 1});
    all.push_back({"resnet_3x3_s1_56_input_grad_transposed",
                   {8, 64, 56, 56},
                   {64, 64, 3, 3},
                   1,
                   1,
                   1,
                   1,
                   true});
  }
  return all;
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  CLI::App app{"conv_bench: the CPU conv2d kernel on the MNIST CNN's and ResNet's shapes"};
  bool quick = false;
  int threads = 2;
  std::string set = "all";
  std::vector<std::string> only;
  app.add_flag("--quick", quick, "five calls per case");
  app.add_option("--threads", threads, "compute threads")->check(CLI::Range(1, 64));
  app.add_option("--set", set, "cases: cnn, resnet or all")
      ->check(CLI::IsMember({"cnn", "resnet", "all"}));
  app.add_option("--only", only, "run only the cases of these names");
  CLI11_PARSE(app, argc, argv);
  axle::cpu::ComputePool pool(threads);
  for (const auto& c : axle::bench::cases(set)) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
    axle::bench::run_case(c, pool, 0.5, quick);
  }
  return 0;
}
