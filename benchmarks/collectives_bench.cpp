// collectives_bench: in-graph all_reduce among spawn's replicas (one per in-process device).
//   allreduce_gbps        — algorithm bandwidth: bytes of one replica's tensor / time of one
//                           all_reduce (sum), with "bytes" and "devices"; each replica runs
//                           steps of kChain all_reduces of tensors of its own, back to back
//   memcpy_gbps           — bytes / time of one memcpy of that many bytes on this host, measured
//                           in the same run
//   allreduce_over_memcpy — their ratio (target: ≥ 0.5 for 64 MiB across 4 devices)
// JSON lines on stdout (see benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "actors/lazy_system.h"
#include "axle.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kChain = 4;  // all_reduces per step, so a step's fixed cost spreads over several

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median seconds of one memcpy of `bytes` (both buffers touched first).
double memcpy_seconds(std::size_t bytes, int rounds) {
  std::vector<std::byte> from(bytes, std::byte{1});
  std::vector<std::byte> to(bytes, std::byte{0});
  std::vector<double> seconds;
  const int repeat = std::max<int>(1, static_cast<int>((64 << 20) / bytes));
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < repeat; ++i) {
      std::memcpy(to.data(), from.data(), bytes);
      from[static_cast<std::size_t>(i) % bytes] = to[bytes - 1];  // keeps the copies
    }
    seconds.push_back(seconds_since(start) / repeat);
  }
  return quantile(seconds, 0.5);
}

// Median seconds of one all_reduce of `bytes` per replica across `devices` replicas.
double allreduce_seconds(std::size_t bytes, int devices, int rounds) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = devices});
  const int64_t elements = static_cast<int64_t>(bytes / sizeof(float));
  const int steps = std::max(2, static_cast<int>((64 << 20) / bytes / kChain));
  std::vector<double> seconds;
  spawn([&](int replica) {
    // kChain tensors of this replica's own, reduced anew every step (so each member brings
    // distinct memory, as gradients are).
    std::vector<Tensor> xs;
    for (int k = 0; k < kChain; ++k) xs.push_back(rand({elements}));
    mark_step();
    std::vector<Tensor> ys(kChain);
    auto step = [&] {
      for (int k = 0; k < kChain; ++k) ys[k] = all_reduce(ReduceType::kSum, xs[k], 1.0 / devices);
      mark_step();
    };
    step();  // compiles
    wait_device_ops();
    for (int r = 0; r < rounds; ++r) {
      rendezvous("round");
      const auto start = Clock::now();
      for (int s = 0; s < steps; ++s) step();
      wait_device_ops();
      if (replica == 0) seconds.push_back(seconds_since(start) / (steps * kChain));
    }
  });
  return quantile(seconds, 0.5);
}

std::string size_name(std::size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle::bench;
  CLI::App app{"collectives_bench: in-graph all_reduce bandwidth across in-process devices"};
  bool quick = false;
  std::vector<int> device_counts = {2, 4, 8};
  std::vector<std::size_t> sizes = {std::size_t{4} << 10, std::size_t{1} << 20,
                                    std::size_t{64} << 20};
  app.add_flag("--quick", quick, "a short run");
  app.add_option("--bytes", sizes, "tensor sizes in bytes")->delimiter(',');
  app.add_option("--devices", device_counts, "device counts to run")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  const int rounds = quick ? 3 : 7;
  for (std::size_t bytes : sizes) {
    const double copy = memcpy_seconds(bytes, rounds);
    const double copy_gbps = static_cast<double>(bytes) / copy / 1e9;
    emit("collectives", "memcpy_gbps", copy_gbps, "GB/s",
         {{"bytes", static_cast<int64_t>(bytes)}, {"size", size_name(bytes)}});
    for (int devices : device_counts) {
      const double seconds = allreduce_seconds(bytes, devices, rounds);
      const double gbps = static_cast<double>(bytes) / seconds / 1e9;
      const std::map<std::string, Param> params = {{"bytes", static_cast<int64_t>(bytes)},
                                                   {"devices", int64_t{devices}},
                                                   {"size", size_name(bytes)}};
      emit("collectives", "allreduce_gbps", gbps, "GB/s", params);
      emit("collectives", "allreduce_over_memcpy", gbps / copy_gbps, "ratio", params);
    }
  }
  return 0;
}
