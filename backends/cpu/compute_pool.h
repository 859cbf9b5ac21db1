// backends/cpu: a CPU device's compute threads. The device actor's thread runs a program's
// kernel calls one after another; a large kernel splits its work into parts that this pool runs
// on that thread and on threads() - 1 workers at once (intra-op parallelism).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace axle::cpu {

/// The threads that run one CPU device's kernels: the calling thread (thread 0) and
/// `threads - 1` workers. One caller at a time (the device's actor); parts must not call run.
class ComputePool {
 public:
  /// Starts `threads - 1` workers (threads >= 1).
  explicit ComputePool(int threads);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  [[nodiscard]] int threads() const noexcept { return threads_; }

  /// Runs part(index, thread) for every index in [0, parts) and returns when all have finished;
  /// `thread` in [0, threads()) names the thread running it (for scratch). Each thread first
  /// takes the parts of its own contiguous share of [0, parts) in order, then the others' that
  /// are left: consecutive kernels split alike so find their data where the same thread left it,
  /// and a thread that runs late loses its parts to the others. Which thread runs which part
  /// still varies from call to call, so a part's result must depend on its index only. The
  /// first exception a part throws is rethrown here once every part has finished.
  template <class Part>
  void run(int64_t parts, Part&& part) {
    if (parts <= 0) return;
    if (threads_ == 1 || parts == 1) {
      for (int64_t i = 0; i < parts; ++i) part(i, 0);
      return;
    }
    using P = std::remove_reference_t<Part>;
    run_parts(
        parts,
        [](void* context, int64_t index, int thread) {
          (*static_cast<P*>(context))(index, thread);
        },
        const_cast<void*>(static_cast<const void*>(&part)));
  }

  /// At least `bytes` of 64-byte-aligned memory for `thread`'s use inside a part, kept (and
  /// grown) between calls, so kernels need no allocation per call once warm.
  [[nodiscard]] void* scratch(int thread, std::size_t bytes);

 private:
  using PartFn = void (*)(void* context, int64_t index, int thread);
  struct Scratch {
    void* data = nullptr;
    std::size_t bytes = 0;
  };

  // One thread's share of the current job's parts: generation in the high 32 bits, the next
  // unclaimed part in the low 32. Claiming a part is a compare-exchange that also checks the
  // generation, so a worker that wakes late never takes a part of the next job with the
  // previous job's function.
  struct alignas(64) Share {
    std::atomic<uint64_t> next{0};
  };

  void run_parts(int64_t parts, PartFn fn, void* context);
  // Claims and runs parts of job `generation`, its own share's first, until none is left.
  void work_on(uint32_t generation, int thread);
  void worker_loop(int thread);
  [[nodiscard]] int64_t share_begin(int64_t parts, int share) const noexcept {
    return parts * share / threads_;
  }

  const int threads_;
  // The current job's generation in the high 32 bits (what workers wait for news on).
  std::atomic<uint64_t> job_{0};
  std::unique_ptr<Share[]> shares_;
  std::atomic<PartFn> fn_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::atomic<int64_t> parts_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<uint32_t> wake_{0};  // bumped per job and at shutdown: sleeping workers wait on it
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::vector<Scratch> scratch_;
  std::vector<std::thread> workers_;
};

/// Compute threads per device for `devices` CPU devices: `requested` when above 0 (the
/// AXLE_CPU_INTRA_OP_THREADS setting), else the process's cores shared out among the devices (at
/// least one each): its usable cores, or its share of them when `host_processes` processes of
/// the job see the same cores (process_share_of_cores). Throws std::invalid_argument for a
/// negative request.
[[nodiscard]] int intra_op_threads(int devices, int requested, int host_processes = 1);

/// Splits [0, n) into at most `max_parts` contiguous ranges of at least `grain` elements (the
/// last may be shorter only when n is), each boundary a multiple of `align`, as even as the
/// alignment lets them be (their sizes differ by `align` at most, the last clipped to n): a
/// thread's share of consecutive parts is then about as large as any other's. The ranges depend
/// only on the arguments, so a kernel that computes each range on its own gives the same bits
/// whichever thread runs it. No range is longer than `size`.
struct Ranges {
  int64_t n = 0, size = 0, count = 0;
  int64_t units = 1, align = 1;  // [0, n) in `units` pieces of `align` (the last clipped)
  [[nodiscard]] int64_t begin(int64_t i) const noexcept {
    return count > 0 ? std::min(n, units * i / count * align) : 0;
  }
  [[nodiscard]] int64_t end(int64_t i) const noexcept { return begin(i + 1); }
};
[[nodiscard]] inline Ranges split_range(int64_t n, int64_t max_parts, int64_t grain,
                                        int64_t align = 1) {
  Ranges r{n, n, n > 0 ? 1 : 0, 1, std::max<int64_t>(n, 1)};
  align = std::max<int64_t>(align, 1);
  const int64_t units = (n + align - 1) / align;
  int64_t parts = std::min({max_parts, grain > 0 ? n / grain : n, units});
  // The smallest range, units / parts of them, holds at least `grain` elements.
  while (parts > 1 && units / parts * align < grain) --parts;
  if (parts <= 1) return r;
  r.count = parts;
  r.units = units;
  r.align = align;
  r.size = (units + parts - 1) / parts * align;
  return r;
}

/// Parts per thread parallel_for makes by default: when another process holds a worker's core,
/// the threads that run take over its remaining parts instead of waiting for it.
inline constexpr int64_t kPartsPerThread = 4;

/// Runs body(begin, end, thread) over split_range(n, pool.threads() * parts_per_thread, grain,
/// align) on `pool`. Use one part per thread where each part repeats work (packing a shared
/// GEMM operand).
template <class Body>
void parallel_for(ComputePool& pool, int64_t n, int64_t grain, Body&& body, int64_t align = 1,
                  int64_t parts_per_thread = kPartsPerThread) {
  const int64_t parts = pool.threads() == 1 ? 1 : pool.threads() * parts_per_thread;
  const Ranges ranges = split_range(n, parts, grain, align);
  pool.run(ranges.count,
           [&](int64_t i, int thread) { body(ranges.begin(i), ranges.end(i), thread); });
}

}  // namespace axle::cpu
