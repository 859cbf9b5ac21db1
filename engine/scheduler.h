// engine: the threads actors run on. Each worker thread runs an asio io_context (timers,
// parking) and a lock-free run queue of actors with mail; pooled actors are spread over the pool
// workers, an actor that needs a thread of its own (a device) gets a dedicated worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace axle {

namespace detail {
/// What a worker's run queue holds: an actor with mail (engine/actor.h's ActorCell). The worker
/// calls run() on its thread; run() hands back the queue's reference, or queues itself again.
class Runnable {
 public:
  virtual void run() = 0;

 protected:
  ~Runnable() = default;
};
}  // namespace detail

/// Cancels a timer started by an actor; copies share the timer. Cancelling twice is harmless.
class TimerHandle {
 public:
  TimerHandle() = default;
  explicit TimerHandle(std::shared_ptr<std::atomic<bool>> cancelled)
      : cancelled_(std::move(cancelled)) {}
  void cancel() const noexcept {
    if (cancelled_) cancelled_->store(true, std::memory_order_release);
  }
  [[nodiscard]] bool cancelled() const noexcept {
    return !cancelled_ || cancelled_->load(std::memory_order_acquire);
  }

 private:
  std::shared_ptr<std::atomic<bool>> cancelled_;
};

/// One thread that runs actors: spins briefly when out of work, then parks in asio.
class Worker {
 public:
  Worker(std::string name, std::chrono::microseconds spin, const std::atomic<bool>& timers_enabled);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// Queues `actor` to run; the caller hands over one reference to it.
  void schedule(detail::Runnable* actor);

  /// Calls `fire` on this worker's thread after `delay`, then every `period` if it is non-zero,
  /// until the handle is cancelled or the runtime starts shutting down.
  TimerHandle start_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                          std::function<void()> fire);

  /// Even while the worker is between runs, odd while it runs actors; bumped around every run,
  /// so an unchanged even value across a scan proves nothing ran during it.
  [[nodiscard]] uint64_t activity() const noexcept;

  [[nodiscard]] const std::string& name() const noexcept;

  void start();
  /// Asks the thread to finish once its run queue is empty; join() waits for it.
  void request_stop();
  void join();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The pool of workers plus any dedicated ones; owned by the Runtime.
class Scheduler {
 public:
  Scheduler(int pool_threads, std::chrono::microseconds spin);
  ~Scheduler();

  /// The next pool worker, round-robin, for a newly spawned pooled actor.
  Worker& next_pool_worker();
  /// A new worker with its own thread, for one actor.
  Worker& add_dedicated_worker(std::string name);

  [[nodiscard]] int pool_size() const noexcept { return pool_size_; }
  /// Activity counters of every worker, in a fixed order (see Worker::activity).
  [[nodiscard]] std::vector<uint64_t> activity() const;

  /// Stops every timer from firing again (shutdown's first step).
  void disable_timers() noexcept { timers_enabled_.store(false, std::memory_order_seq_cst); }
  /// Stops and joins every worker thread.
  void stop();

 private:
  std::atomic<bool> timers_enabled_{true};
  std::chrono::microseconds spin_;
  int pool_size_;
  std::atomic<uint64_t> next_{0};
  mutable std::mutex workers_mutex_;
  std::vector<std::unique_ptr<Worker>> workers_;  // pool first, then dedicated
  bool stopped_ = false;
};

}  // namespace axle
