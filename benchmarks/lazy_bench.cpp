// lazy_bench: the lazy core's costs.
//   trace_ns_per_op       — tracing one small elementwise op (10,000-op traces)
//   mark_step_cached_us   — mark_step of a cached graph of N nodes (host side only)
//   compile_ms            — building, optimising and lowering a graph of N nodes
//   gemm_ratio_vs_eigen   — 1024x1024 f32 GEMM: Eigen-direct time / axle time
//   fusion_speedup        — a chain of 8 elementwise ops on 16 M floats ("chain"), and the same
//                           chain ending in their sum ("chain_sum"): one kernel per op time /
//                           fused time
//   persistent_cache_load_ms — loading the MLP training step's program from a warm disk cache
//   pass_worth_step_ms    — an MLP training step (SGD momentum) with every pass on, then with one
//                           pass (or buffer donation) off: ms, slowdown and planned peak bytes
//   overlap_speedup       — steps/s with asynchronous devices / steps/s with XLA_SYNC_WAIT-style
//                           waiting, for a loop whose trace and device times are about equal
// JSON lines on stdout (see benchmarks/README.md).
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <Eigen/Dense>

#include <chrono>
#include <filesystem>

#include "axle/actors/compiler/lowering.h"
#include "axle/actors/host/lazy_settings.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/trace_context.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Tensor chain(Tensor x, int ops) {
  for (int i = 0; i < ops; ++i) x = (i % 2 == 0) ? x + 0.5 : x * 0.999;
  return x;
}

void trace_cost(int repeats) {
  Tensor x = zeros({4});
  mark_step();
  std::vector<double> per_op;
  constexpr int kOps = 10'000;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    Tensor y = chain(x, kOps);
    per_op.push_back(seconds_since(start) * 1e9 / kOps);
    mark_step();
    wait_device_ops();
  }
  emit("lazy", "trace_ns_per_op", quantile(per_op, 0.5), "ns", {{"ops", int64_t{kOps}}});
}

void mark_step_cost(int nodes, int repeats) {
  Tensor x = zeros({4});
  mark_step();
  // The node count counts the traced ops (each also has a scalar parameter leaf).
  Tensor y = chain(x, nodes);
  mark_step();
  wait_device_ops();
  std::vector<double> micros;
  for (int r = 0; r < repeats; ++r) {
    y = chain(x, nodes);
    const auto start = Clock::now();
    mark_step();
    micros.push_back(seconds_since(start) * 1e6);
    wait_device_ops();
  }
  emit("lazy", "mark_step_cached_us", quantile(micros, 0.5), "us", {{"nodes", int64_t{nodes}}});
}

// Compiles (step graph, passes, lowering) a chain of about `nodes` graph nodes: each traced op
// adds itself and its scalar's leaf.
void compile_cost(int nodes, int repeats) {
  const PassSet passes = PassSet::from_config();
  std::vector<double> millis;
  std::size_t graph_nodes = 0;
  for (int r = 0; r < repeats; ++r) {
    // What a sync does to the trace's creation log (the previous chain would be garbage in it).
    TraceContext::current().creation_log().clear();
    Tensor y = chain(zeros({4}), nodes / 2);
    const auto start = Clock::now();
    NodePtr root = y.impl()->ir();
    StepGraph graph = build_step_graph(std::span<const NodePtr>(&root, 1));
    IntrusivePtr<Executable> program = compile_graph(graph, passes);
    millis.push_back(seconds_since(start) * 1e3);
    if (program->calls.empty()) throw std::logic_error("empty program");
    graph_nodes = graph.nodes.size();
  }
  emit("lazy", "compile_ms", quantile(millis, 0.5), "ms",
       {{"nodes", static_cast<int64_t>(graph_nodes)}});
}

void gemm(int repeats) {
  constexpr int kN = 1024;
  Eigen::MatrixXf ea = Eigen::MatrixXf::Random(kN, kN);
  Eigen::MatrixXf eb = Eigen::MatrixXf::Random(kN, kN);
  Eigen::MatrixXf ec(kN, kN);
  std::vector<double> eigen_s, axle_s;
  std::vector<float> host(static_cast<std::size_t>(kN) * kN, 0.5f);
  Tensor a = tensor(host, Shape{kN, kN});
  Tensor b = tensor(host, Shape{kN, kN});
  wait_device_ops();
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    ec.noalias() = ea * eb;
    eigen_s.push_back(seconds_since(start));
    start = Clock::now();
    Tensor c = matmul(a, b);
    mark_step();
    wait_device_ops();
    axle_s.push_back(seconds_since(start));
  }
  const double ratio = quantile(eigen_s, 0.5) / quantile(axle_s, 0.5);
  emit("lazy", "gemm_ratio_vs_eigen", ratio, "ratio", {{"n", int64_t{kN}}});
  if (ec(0, 0) == 12345.f) std::fprintf(stderr, "unlikely\n");  // keep the product alive
}

// Seconds per step of a chain of 8 elementwise ops over 16 M floats (then their sum when
// `reduce`), fused or one kernel per op.
double chain_seconds(bool fuse, bool reduce, int repeats) {
  if (fuse) {
    config::unset("AXLE_DISABLE_PASSES");
  } else {
    config::set("AXLE_DISABLE_PASSES", "fusion");
  }
  LazySystem::restart();
  constexpr int64_t kElements = 16 << 20;
  const Tensor x = tensor(std::vector<float>(kElements, 0.5f), Shape{kElements});
  auto step = [&] {
    Tensor y = abs(maximum((x * 1.5 + 0.25) * x - 0.75, x * 0.5) * 2.0 - 1.0);  // 8 ops
    if (reduce) y = sum(y);
    mark_step();
    wait_device_ops();
  };
  step();  // compile
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    step();
    seconds.push_back(seconds_since(start));
  }
  config::unset("AXLE_DISABLE_PASSES");
  return quantile(seconds, 0.5);
}

void fusion(int repeats) {
  for (bool reduce : {false, true}) {
    const double unfused = chain_seconds(false, reduce, repeats);
    const double fused = chain_seconds(true, reduce, repeats);
    emit("lazy", "fusion_speedup", unfused / fused, "ratio",
         {{"case", std::string(reduce ? "chain_sum" : "chain")},
          {"elements", int64_t{16 << 20}},
          {"ops", int64_t{reduce ? 9 : 8}}});
  }
  LazySystem::restart();
}

// One training step of a two-layer MLP (784-256-10, batch 64) with its backward pass written out
// and SGD, as the persistent cache's benchmark program.
void mlp_step() {
  const Tensor x = full({64, 784}, 0.5);
  const Tensor y = full({64, 10}, 0.1);
  const Tensor w1 = full({784, 256}, 0.01);
  const Tensor w2 = full({256, 10}, 0.02);
  const Tensor h = relu(matmul(x, w1));
  const Tensor o = matmul(h, w2);
  const Tensor diff = o - y;
  const Tensor loss = mean(diff * diff);
  const Tensor d_o = diff * (2.0 / 640.0);
  const Tensor d_w2 = matmul(transpose(h, 0, 1), d_o);
  const Tensor d_h = where(gt(h, 0.0), matmul(d_o, transpose(w2, 0, 1)), zeros_like(h));
  const Tensor d_w1 = matmul(transpose(x, 0, 1), d_h);
  const Tensor w1_next = w1 - d_w1 * 0.1;
  const Tensor w2_next = w2 - d_w2 * 0.1;
  mark_step();
  wait_device_ops();
}

// Milliseconds to load the MLP step's program from a warm persistent cache (a new system each
// time, so the in-memory cache is empty).
void persistent_cache_load(int repeats) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("axle-bench-cache-{}", ::getpid());
  std::filesystem::remove_all(dir);
  LazySystemOptions options;
  options.persistent_cache = PersistentCacheSettings{dir.string(), false};
  LazySystem::restart(options);
  mlp_step();  // compiles and stores
  std::vector<double> millis;
  for (int r = 0; r < repeats; ++r) {
    LazySystem::restart();  // keeps the persistent cache, drops the in-memory one
    clear_all();
    mlp_step();
    const std::optional<MetricData> load = metric_data("PersistentCacheLoadTime");
    if (!load || counter_value("UncachedCompile").value_or(0) != 0) {
      throw std::runtime_error("the warm persistent cache did not serve the MLP step");
    }
    millis.push_back(load->samples.back().second / 1e6);
  }
  options.persistent_cache = PersistentCacheSettings{};  // close it
  LazySystem::restart(options);
  std::filesystem::remove_all(dir);
  emit("lazy", "persistent_cache_load_ms", quantile(millis, 0.5), "ms",
       {{"program", std::string("mlp_step")}});
}

// What each compiler pass and buffer donation is worth to a training step: the MLP step of
// mlp_step with SGD momentum on state kept across steps, timed (median ms per step, device
// included) with everything on and with one thing off; and its planned peak either way.
void pass_worth(int repeats) {
  struct Variant {
    const char* off;
    const char* variable;
    const char* value;
  };
  const Variant variants[] = {{"none", nullptr, nullptr},
                              {"canonicalize", "AXLE_DISABLE_PASSES", "canonicalize"},
                              {"cse", "AXLE_DISABLE_PASSES", "cse"},
                              {"constant_folding", "AXLE_DISABLE_PASSES", "constant_folding"},
                              {"dce", "AXLE_DISABLE_PASSES", "dce"},
                              {"fusion", "AXLE_DISABLE_PASSES", "fusion"},
                              {"donation", "XLA_ENABLE_PARAM_ALIASING", "0"}};
  double baseline_ms = 0;
  for (const Variant& v : variants) {
    clear_all();
    if (v.variable) config::set(v.variable, v.value);
    LazySystem::restart();
    Tensor x = full({64, 784}, 0.5), y = full({64, 10}, 0.1);
    Tensor w1 = full({784, 256}, 0.01), w2 = full({256, 10}, 0.02);
    Tensor m1 = zeros({784, 256}), m2 = zeros({256, 10});
    mark_step();
    auto step = [&] {
      const Tensor h = relu(matmul(x, w1));
      const Tensor diff = matmul(h, w2) - y;
      const Tensor loss = mean(diff * diff);
      const Tensor d_o = diff * (2.0 / 640.0);
      const Tensor d_h = where(gt(h, 0.0), matmul(d_o, transpose(w2, 0, 1)), zeros_like(h));
      m1 = m1 * 0.9 + matmul(transpose(x, 0, 1), d_h);
      m2 = m2 * 0.9 + matmul(transpose(h, 0, 1), d_o);
      w1 = w1 - m1 * 0.01;
      w2 = w2 - m2 * 0.01;
      mark_step();
      wait_device_ops();
    };
    step();  // compile
    const std::optional<MetricData> peak = metric_data("ProgramPeakBytes");
    const double peak_bytes = peak ? peak->samples.back().second : -1.0;
    clear_all();
    std::vector<double> millis;
    for (int r = 0; r < repeats; ++r) {
      const auto start = Clock::now();
      step();
      millis.push_back(seconds_since(start) * 1e3);
    }
    const double ms = quantile(millis, 0.5);
    if (v.variable) config::unset(v.variable);
    if (baseline_ms == 0) baseline_ms = ms;
    emit("lazy", "pass_worth_step_ms", ms, "ms",
         {{"off", std::string(v.off)},
          {"slowdown", ms / baseline_ms},
          {"planned_peak_bytes", peak_bytes}});
  }
}

// Steps/s of a loop tracing `ops` ops per step on `elements`-element tensors.
double steps_per_second(int steps, int ops, int64_t elements, bool wait) {
  Tensor x = zeros({elements});
  mark_step();
  wait_device_ops();
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) {
    x = chain(x, ops);
    mark_step(wait);
  }
  wait_device_ops();
  return steps / seconds_since(start);
}

void overlap(int steps) {
  constexpr int kOps = 200;
  // Grow the tensor until the device's execution time per step reaches the host's trace time.
  int64_t elements = 256;
  for (; elements < (int64_t{1} << 22); elements *= 2) {
    Tensor x = zeros({elements});
    mark_step(true);
    double trace_s = 0;
    for (int r = 0; r < 3; ++r) {  // the first round compiles
      clear_all();
      const auto start = Clock::now();
      x = chain(x, kOps);
      trace_s = seconds_since(start);
      mark_step(true);
    }
    const auto executed = metric_data("ExecuteTime");
    const double device_s = executed ? executed->accumulator / executed->total_samples / 1e9 : 0;
    if (device_s >= trace_s) break;
  }
  steps_per_second(5, kOps, elements, false);  // warm up
  const double sync = steps_per_second(steps, kOps, elements, true);
  const double async = steps_per_second(steps, kOps, elements, false);
  emit("lazy", "overlap_speedup", async / sync, "ratio",
       {{"elements", elements}, {"ops_per_step", int64_t{kOps}}, {"steps", int64_t{steps}}});
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle::bench;
  CLI::App app{"lazy_bench: tracing, mark_step, compile, GEMM and overlap costs"};
  bool quick = false;
  std::vector<std::string> only;
  app.add_flag("--quick", quick, "a short run");
  app.add_option(
      "--only", only,
      "run only these: trace mark_step compile gemm fusion persistent_cache passes overlap");
  std::string observers = "standard";
  app.add_option("--observers", observers,
                 "standard (metrics, timeline, step breakdown) or none: what watches the actors "
                 "while trace and mark_step are measured")
      ->check(CLI::IsMember({"standard", "none"}));
  CLI11_PARSE(app, argc, argv);
  // A million-node compile traces past the default cut (AXLE_MAX_GRAPH_NODES ops per step), so
  // the cut moves further out unless the user chose one.
  if (axle::config::read_lazy_settings().max_graph_nodes ==
      axle::config::LazySettings{}.max_graph_nodes) {
    axle::config::set("AXLE_MAX_GRAPH_NODES", "10000000");
  }
  const auto restart = [&] {
    if (observers == "none") {
      axle::LazySystem::restart(axle::LazySystemOptions{.observers = {{}}});
    } else {
      axle::LazySystem::restart();
    }
  };
  if (observers == "none") restart();
  auto wanted = [&](const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  const int repeats = quick ? 5 : 20;
  if (wanted("trace")) trace_cost(repeats);
  if (wanted("mark_step")) {
    // The host's side alone: graphs this short would otherwise run within mark_step, on the
    // host's thread (AXLE_RUN_ON_HOST_BELOW_US).
    axle::config::set("AXLE_RUN_ON_HOST_BELOW_US", "0");
    restart();
    for (int nodes : {10, 100, 1000, 10000}) mark_step_cost(nodes, repeats);
    axle::config::unset("AXLE_RUN_ON_HOST_BELOW_US");
    restart();
  }
  if (wanted("compile")) {
    for (int nodes : {1'000, 10'000}) compile_cost(nodes, repeats);
    compile_cost(1'000'000, quick ? 1 : 3);
  }
  if (wanted("gemm")) gemm(quick ? 3 : 10);
  if (wanted("fusion")) fusion(quick ? 3 : 10);
  if (wanted("persistent_cache")) persistent_cache_load(quick ? 3 : 10);
  if (wanted("passes")) pass_worth(quick ? 5 : 20);
  if (wanted("overlap")) overlap(quick ? 50 : 200);
  return 0;
}
