// collectives_bench: in-graph all_reduce among spawn's replicas (one per in-process device).
//   allreduce_gbps        — algorithm bandwidth: bytes of one replica's tensor / time of one
//                           all_reduce (sum), with "bytes" and "devices"; each replica runs
//                           steps of --per_step (default 4) independent all_reduces of tensors
//                           of its own, back to back (the compiler combines those of a step:
//                           one meeting a step; AXLE_DISABLE_PASSES=all_reduce_combiner leaves
//                           them apart)
//   memcpy_gbps           — bytes / time of one memcpy of that many bytes on this host, measured
//                           in the same run
//   allreduce_over_memcpy — their ratio (target: ≥ 0.5 for 64 MiB across 4 devices)
// With --mpi, under mpirun: the job's replicas (processes × CPU_NUM_DEVICES) all-reduce across
// processes, and raw MPI_Allreduce runs on buffers of the same size in the same run:
//   allreduce_gbps        — as above, with "processes" and "world_size"
//   mpi_allreduce_gbps    — bytes / time of one MPI_Allreduce (sum of floats) among the processes,
//                           reducing --per_step buffers in turn as axle's replicas do
//   allreduce_over_mpi    — MPI's time / axle's, the median over rounds that run axle and MPI
//                           in turn (target: ≥ 0.9 from 1 MiB up)
//   allreduce_us, mpi_allreduce_us — the times themselves (small messages: latency; with
//                           --per_step 1, a step's whole cost falls on its one all_reduce)
// Only process 0 prints.
// JSON lines on stdout (see benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

// All_reduces per step, so a step's fixed cost spreads over several (--per_step).
int g_per_step = 4;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string size_name(std::size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
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
// On a new system of `devices` devices.
double allreduce_seconds(std::size_t bytes, int devices, int rounds) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = devices});
  const int world = devices;
  const int64_t elements = static_cast<int64_t>(bytes / sizeof(float));
  const int per_step = g_per_step;
  const int steps = std::max(2, static_cast<int>((64 << 20) / bytes / per_step));
  std::vector<double> seconds;
  spawn([&](int replica) {
    // per_step tensors of this replica's own, reduced anew every step (so each member brings
    // distinct memory, as gradients are).
    std::vector<Tensor> xs;
    for (int k = 0; k < per_step; ++k) xs.push_back(rand({elements}));
    mark_step();
    std::vector<Tensor> ys(static_cast<std::size_t>(per_step));
    auto step = [&] {
      for (int k = 0; k < per_step; ++k) ys[k] = all_reduce(ReduceType::kSum, xs[k], 1.0 / world);
      mark_step();
    };
    step();  // compiles
    wait_device_ops();
    for (int r = 0; r < rounds; ++r) {
      rendezvous("round");
      const auto start = Clock::now();
      for (int s = 0; s < steps; ++s) step();
      wait_device_ops();
      if (replica == 0) seconds.push_back(seconds_since(start) / (steps * per_step));
    }
  });
  return seconds.empty() ? 0 : quantile(seconds, 0.5);
}

// Under mpirun: axle's all_reduce and raw MPI_Allreduce (sum of floats, on a communicator of the
// benchmark's own) of `bytes` per replica, round by round in turn, so that a change in the
// machine's load falls on both alike.
struct AgainstMpi {
  double axle_s = 0;  // median seconds of one all_reduce
  double mpi_s = 0;   // median seconds of one MPI_Allreduce
  double ratio = 0;   // median over rounds of MPI's time / axle's
};

AgainstMpi allreduce_against_mpi(std::size_t bytes, int rounds) {
  const int devices = LazySystem::get().device_count();
  const int world = world_size() * devices;
  const int64_t elements = static_cast<int64_t>(bytes / sizeof(float));
  const int per_step = g_per_step;
  const int steps = std::max(2, static_cast<int>((64 << 20) / bytes / per_step));
  const int mpi_steps = steps * per_step;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int count = static_cast<int>(elements);
  // As axle's replicas, MPI reduces per_step buffers of its own in turn, into per_step results:
  // the same memory traffic (one buffer pair reused would stay in the caches from 1 MiB down).
  std::vector<std::vector<float>> ins, outs;
  for (int k = 0; k < per_step; ++k) {
    ins.emplace_back(static_cast<std::size_t>(count), 1.0f + static_cast<float>(k));
    outs.emplace_back(static_cast<std::size_t>(count));
  }
  std::vector<double> axle_seconds, mpi_seconds, ratios;
  spawn(
      [&](int replica) {
        // per_step tensors of this replica's own, reduced anew every step (so each member brings
        // distinct memory, as gradients are).
        std::vector<Tensor> xs;
        for (int k = 0; k < per_step; ++k) xs.push_back(rand({elements}));
        mark_step();
        std::vector<Tensor> ys(static_cast<std::size_t>(per_step));
        auto step = [&] {
          for (int k = 0; k < per_step; ++k) {
            ys[k] = all_reduce(ReduceType::kSum, xs[k], 1.0 / world);
          }
          mark_step();
        };
        step();  // compiles
        wait_device_ops();
        // One replica per process calls MPI, the others wait at the next rendezvous.
        const bool calls_mpi = global_ordinal() % devices == 0;
        if (calls_mpi) {
          for (int k = 0; k < per_step; ++k) {
            MPI_Allreduce(ins[k].data(), outs[k].data(), count, MPI_FLOAT, MPI_SUM, comm);
          }
        }
        for (int r = 0; r < rounds; ++r) {
          rendezvous("axle round");
          const auto start = Clock::now();
          for (int s = 0; s < steps; ++s) step();
          wait_device_ops();
          const double axle_s = seconds_since(start) / (steps * per_step);
          rendezvous("mpi round");
          if (!calls_mpi) continue;
          MPI_Barrier(comm);
          const auto mpi_start = Clock::now();
          for (int s = 0; s < mpi_steps; ++s) {
            MPI_Allreduce(ins[s % per_step].data(), outs[s % per_step].data(), count, MPI_FLOAT,
                          MPI_SUM, comm);
          }
          const double mpi_s = seconds_since(mpi_start) / mpi_steps;
          axle_seconds.push_back(axle_s);
          mpi_seconds.push_back(mpi_s);
          ratios.push_back(mpi_s / axle_s);
        }
      },
      devices);
  MPI_Comm_free(&comm);
  return {quantile(axle_seconds, 0.5), quantile(mpi_seconds, 0.5), quantile(ratios, 0.5)};
}

// The --mpi run: axle against raw MPI, size by size.
int run_mpi(const std::vector<std::size_t>& sizes, int rounds) {
  if (process_count() < 2) {
    std::fprintf(stderr,
                 "collectives_bench --mpi: run it under mpirun with at least 2 processes\n");
    return 2;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);  // axle started MPI for the job
  if (!initialized) return 2;
  const int devices = LazySystem::get().device_count();
  for (std::size_t bytes : sizes) {
    const AgainstMpi m = allreduce_against_mpi(bytes, rounds);
    if (process_index() != 0) continue;
    const std::map<std::string, Param> params = {
        {"bytes", static_cast<int64_t>(bytes)},
        {"size", size_name(bytes)},
        {"per_step", int64_t{g_per_step}},
        {"processes", int64_t{process_count()}},
        {"world_size", int64_t{process_count() * devices}}};
    emit("collectives_mpi", "allreduce_gbps", static_cast<double>(bytes) / m.axle_s / 1e9, "GB/s",
         params);
    emit("collectives_mpi", "mpi_allreduce_gbps", static_cast<double>(bytes) / m.mpi_s / 1e9,
         "GB/s", params);
    emit("collectives_mpi", "allreduce_us", m.axle_s * 1e6, "us", params);
    emit("collectives_mpi", "mpi_allreduce_us", m.mpi_s * 1e6, "us", params);
    emit("collectives_mpi", "allreduce_over_mpi", m.ratio, "ratio", params);
  }
  return 0;
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
  app.add_option("--per_step", g_per_step, "independent all_reduces traced per step")
      ->check(CLI::Range(1, 64));
  bool mpi = false;
  app.add_flag("--mpi", mpi,
               "under mpirun: all_reduce across the job's processes against raw MPI_Allreduce");
  CLI11_PARSE(app, argc, argv);
  const int rounds = quick ? 3 : 7;
  if (mpi) return run_mpi(sizes, rounds);
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
                                                   {"per_step", int64_t{g_per_step}},
                                                   {"size", size_name(bytes)}};
      emit("collectives", "allreduce_gbps", gbps, "GB/s", params);
      emit("collectives", "allreduce_over_memcpy", gbps / copy_gbps, "ratio", params);
    }
  }
  return 0;
}
