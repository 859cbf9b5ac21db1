// actors: the ClosureRunner — runs the step closures added with run_async (add_step_closure) on
// a thread of its own, each after its step's device work is done and in the order its replica
// added them, so logging a loss never makes the host wait for the device. Each replica's closures
// queue apart: one replica's closure waiting for its step never holds back another's, nor a
// replica draining its own (a replica waits at its next collective for the others, so a drain
// that waited for their later steps would wait forever).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <utility>
#include <vector>

#include "axle/actors/runtime/errors.h"
#include "axle/actors/runtime/observer.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/engine/actor.h"
#include "axle/graph/device_data.h"

namespace axle {

/// A step closure and the line that added it (named when it fails).
struct StepClosure {
  std::function<void()> fn;
  std::source_location where;
  std::shared_ptr<StepBreakdown> account;  ///< the adding replica's, charged for the run
  Device device;  ///< the adding thread's default device, `Device{}` while the closure runs
};

/// Failures of one replica thread's asynchronous closures, raised by its next mark_step.
class ClosureFailures {
 public:
  void add(std::exception_ptr error);
  /// The first failure since the last call, or null.
  [[nodiscard]] std::exception_ptr take();

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

/// One replica thread's asynchronous closures handed to the runner and not yet run. Its host
/// waits here before it hands on more than XLA_MAX_ASYNC_QUEUE (as torch_xla's bounded closure
/// queue): every pending closure holds what it captured (a step's loss holds the step's backward
/// graph), and a runner that falls behind would otherwise let that grow without bound.
class ClosureBacklog : public std::enable_shared_from_this<ClosureBacklog> {
 public:
  /// Closures counted in the backlog until it goes: run, failed or dropped with their runner.
  class Entry {
   public:
    Entry() = default;
    Entry(std::shared_ptr<ClosureBacklog> backlog, std::size_t count) noexcept
        : backlog_(std::move(backlog)), count_(count) {}
    Entry(Entry&& other) noexcept
        : backlog_(std::move(other.backlog_)), count_(std::exchange(other.count_, 0)) {}
    Entry& operator=(Entry&& other) noexcept {
      if (this != &other) {
        release();
        backlog_ = std::move(other.backlog_);
        count_ = std::exchange(other.count_, 0);
      }
      return *this;
    }
    ~Entry() { release(); }
    /// Counts the closures out now.
    void release() noexcept {
      if (backlog_) backlog_->ran(count_);
      backlog_.reset();
      count_ = 0;
    }

   private:
    std::shared_ptr<ClosureBacklog> backlog_;
    std::size_t count_ = 0;
  };

  /// Waits until `count` more closures fit under `limit` (0: no limit; a batch larger than the
  /// limit waits for an empty backlog), then counts them in until the entry goes. `waited` tells
  /// whether it had to wait.
  [[nodiscard]] Entry admit(std::size_t count, std::size_t limit, bool* waited = nullptr);
  [[nodiscard]] std::size_t pending() const;
  /// The most closures ever pending at once.
  [[nodiscard]] std::size_t peak() const;

 private:
  void ran(std::size_t count) noexcept;

  mutable std::mutex mutex_;
  std::condition_variable ran_;
  std::size_t pending_ = 0;
  std::size_t peak_ = 0;
};

/// Runs `closures` once every one of `outputs` (the step's results on all devices) is ready or
/// failed, after the closures sent before by the same replica (the one `failures` belongs to).
struct RunAfterStep {
  std::vector<IntrusivePtr<DeviceData>> outputs;
  std::vector<StepClosure> closures;
  std::shared_ptr<ClosureFailures> failures;
  ClosureBacklog::Entry backlog;  ///< counts the closures out once they have run
};
/// Replies once every closure the replica owning `failures` sent before it has run.
struct DrainClosures {
  using Reply = void;
  const ClosureFailures* replica = nullptr;
};
/// An output the head batch waits for has completed.
struct StepOutputDone {};

class ClosureRunner : public Actor<ClosureRunner, RunAfterStep, DrainClosures, StepOutputDone> {
 public:
  explicit ClosureRunner(const Observers& observers) : observers_(observers) {}
  void handle(RunAfterStep& m);
  void handle(DrainClosures& m, Promise<void>&& reply);
  void handle(StepOutputDone&) { pump(); }

 private:
  struct Work {
    RunAfterStep batch;  // or
    Promise<void> drained;
    bool is_drain = false;
  };
  // One replica's closures, in the order they were added.
  struct Queue {
    std::deque<Work> work;
    const DeviceData* waiting_on = nullptr;
  };
  void pump();
  // Runs the queue's closures until one waits for its step; false when it is empty.
  bool pump(Queue& queue);

  const Observers& observers_;
  std::map<const ClosureFailures*, Queue> queues_;  // by replica; an empty one is erased
};

/// While a step closure runs, its thread is bound to this (ThisThread<StepDone>): when its
/// step's device work completed, the clock RateTracker reads there, so closures that run late
/// and in a burst still time the steps as the devices ran them.
struct StepDone {
  std::chrono::steady_clock::time_point at;
};

/// When the last of a step's `outputs` completed (all must be done).
[[nodiscard]] std::chrono::steady_clock::time_point step_done_at(
    const std::vector<IntrusivePtr<DeviceData>>& outputs);

/// Runs `closure` now, telling `observers`, with its thread's StepDone at `step_done`; a failure
/// is rethrown as a StepClosureError naming where it was added.
void run_step_closure(const StepClosure& closure, const Observers& observers,
                      std::chrono::steady_clock::time_point step_done);

}  // namespace axle
