// backends/cpu: the compute pool. Workers spin briefly after a job before they sleep, since a
// program's large kernels come in bursts and waking a sleeping thread costs more than most parts.
#include "axle/backends/cpu/compute_pool.h"

#include <fmt/format.h>

#include "axle/engine/cores.h"

#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace axle::cpu {
namespace {

// How long an idle thread polls before it sleeps: about the gap between two large kernels of a
// step, short enough that a worker does not hold a core the host's tracing thread wants.
constexpr auto kSpin = std::chrono::microseconds(50);

inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done` for up to kSpin; true when it became true.
template <class Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

constexpr uint64_t pack(uint32_t generation, uint32_t next) {
  return (static_cast<uint64_t>(generation) << 32) | next;
}
constexpr uint32_t generation_of(uint64_t job) { return static_cast<uint32_t>(job >> 32); }

}  // namespace

ComputePool::ComputePool(int threads)
    : threads_(threads),
      shares_(std::make_unique<Share[]>(static_cast<std::size_t>(std::max(threads, 1)))),
      scratch_(std::max(threads, 1)) {
  if (threads < 1) throw std::invalid_argument("a compute pool needs at least one thread");
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ComputePool::~ComputePool() {
  stopping_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
  for (Scratch& s : scratch_) std::free(s.data);
}

void* ComputePool::scratch(int thread, std::size_t bytes) {
  Scratch& s = scratch_.at(static_cast<std::size_t>(thread));
  if (s.bytes < bytes) {
    const std::size_t size = (bytes + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, size);
    if (!data) throw std::bad_alloc();
    std::free(s.data);
    s.data = data;
    s.bytes = size;
  }
  return s.data;
}

int intra_op_threads(int devices, int requested, int host_processes) {
  if (requested < 0) {
    throw std::invalid_argument(
        fmt::format("intra-op threads must be 0 (the default) or more, not {}", requested));
  }
  if (requested > 0) return requested;
  return std::max(1, process_share_of_cores(host_processes) / std::max(devices, 1));
}

void ComputePool::run_parts(int64_t parts, PartFn fn, void* context) {
  if (parts > int64_t{0xFFFFFFFF}) throw std::length_error("too many parts for one compute job");
  const uint32_t generation = generation_of(job_.load(std::memory_order_relaxed)) + 1;
  // The shares first: a worker still looking at the previous job (every part of it claimed)
  // that sees this job's part count sees these shares too, and its claim fails.
  for (int t = 0; t < threads_; ++t) {
    shares_[static_cast<std::size_t>(t)].next.store(
        pack(generation, static_cast<uint32_t>(share_begin(parts, t))), std::memory_order_relaxed);
  }
  fn_.store(fn, std::memory_order_relaxed);
  context_.store(context, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  parts_.store(parts, std::memory_order_release);
  job_.store(pack(generation, 0), std::memory_order_release);  // publishes the fields above
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  work_on(generation, 0);
  auto all_finished = [&] { return finished_.load(std::memory_order_acquire) == parts; };
  if (!spin_until(all_finished)) {
    for (int64_t seen = finished_.load(std::memory_order_acquire); seen != parts;
         seen = finished_.load(std::memory_order_acquire)) {
      finished_.wait(seen, std::memory_order_acquire);
    }
  }
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

void ComputePool::work_on(uint32_t generation, int thread) {
  if (generation_of(job_.load(std::memory_order_acquire)) != generation) return;
  // The job's fields may already belong to a later generation; the claims below then fail.
  const PartFn fn = fn_.load(std::memory_order_relaxed);
  void* const context = context_.load(std::memory_order_relaxed);
  const int64_t parts = parts_.load(std::memory_order_acquire);
  for (int s = 0; s < threads_; ++s) {
    const int share = (thread + s) % threads_;
    std::atomic<uint64_t>& next = shares_[static_cast<std::size_t>(share)].next;
    const int64_t end = share_begin(parts, share + 1);
    uint64_t claim = next.load(std::memory_order_acquire);
    for (;;) {
      if (generation_of(claim) != generation) return;
      const uint32_t index = static_cast<uint32_t>(claim);
      if (index >= end) break;
      if (!next.compare_exchange_weak(claim, pack(generation, index + 1), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        continue;
      }
      try {
        fn(context, index, thread);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (finished_.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) finished_.notify_one();
      claim = next.load(std::memory_order_acquire);
    }
  }
}

void ComputePool::worker_loop(int thread) {
  uint32_t done_generation = 0;
  for (;;) {
    uint32_t wake = wake_.load(std::memory_order_acquire);
    auto has_news = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_of(job_.load(std::memory_order_acquire)) != done_generation;
    };
    if (!spin_until(has_news)) {
      wake_.wait(wake, std::memory_order_acquire);
      continue;
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    done_generation = generation_of(job_.load(std::memory_order_acquire));
    work_on(done_generation, thread);
  }
}

}  // namespace axle::cpu
