// actors: what the actors report as they work, to whoever watches — metrics, the profiler
// timeline, the step breakdown — through one small interface (Taskflow's ObserverInterface is the
// model). A handler says once what happened; the observers decide what to record of it, so the
// handlers stay about their work, and with no observer attached an event costs one test of an
// empty list. The process root owns the observers (LazySystemOptions::observers); the standard
// three are in actors/runtime/standard_observers.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "axle/graph/device.h"
#include "axle/graph/sync_reason.h"

namespace axle {

struct ExecuteRequest;
struct Executable;
struct StepClosure;
struct StepGraph;
class StepBreakdown;

/// When something started and ended.
struct Span {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point end;
  [[nodiscard]] double ns() const noexcept {
    return std::chrono::duration<double, std::nano>(end - start).count();
  }
};

/// Where a program was found without compiling it.
enum class ProgramSource { kMemoryCache, kPersistentCache };

/// Receives the actors' events. Every method has an empty default; an observer overrides what it
/// records. Device events come on the device actor's thread, compiler events on the compiler's,
/// host events on the replica's thread, closure events on whichever thread runs the closure, so
/// an observer that keeps state makes it safe for that.
class ActorObserver {
 public:
  virtual ~ActorObserver() = default;

  // --- devices ---
  /// A device waited for `request`'s program to come from the compiler.
  virtual void program_waited(const ExecuteRequest& request, Span waited) {}
  /// A device waited for its group at a collective (`kernel`).
  virtual void collective_waited(const ExecuteRequest& request, std::string_view kernel,
                                 Span waited) {}
  /// A device ran `request`'s program to its end, `collective_ns` of it at collectives.
  virtual void executed(int device, const ExecuteRequest& request, Span run, double collective_ns) {
  }
  /// Host bytes went to a device.
  virtual void transferred_to_device(int device, std::size_t bytes, Span transfer) {}
  /// Device bytes went to the host (a value read).
  virtual void transferred_to_host(int device, std::size_t bytes, Span transfer) {}

  // --- the compiler (and a replica host finding a program in the in-memory cache) ---
  /// A program was found without compiling.
  virtual void program_found(ProgramSource source, Span lookup) {}
  /// The persistent cache did not hold a program it was asked for.
  virtual void program_not_persisted() {}
  /// The compiler compiled `graph` into `program`.
  virtual void program_compiled(const StepGraph& graph, const Executable& program, Span compile) {}

  // --- replica hosts ---
  /// A replica traced a step: `traced` runs from its previous step to this one's mark_step.
  virtual void step_traced(StepBreakdown& account, Span traced) {}
  /// A replica is sending `request` (its graph, synced for `reason`) to `device`, having spent
  /// `built` building it. An observer may tag the request (the timeline's flow arrow).
  virtual void graph_sent(SyncReason reason, Device device, Span built, ExecuteRequest& request) {}
  /// A step may overwrite `count` input buffers in place (buffer donation).
  virtual void inputs_donated(int64_t count) {}
  /// A replica waited for a value read from a device (item(), cpu()).
  virtual void value_waited(StepBreakdown& account, Span waited) {}

  // --- step closures ---
  /// A step closure ran.
  virtual void closure_ran(const StepClosure& closure, Span run) {}
};

/// The observers attached to a system, fixed when it starts.
class Observers {
 public:
  Observers() = default;
  explicit Observers(std::vector<std::shared_ptr<ActorObserver>> list) : list_(std::move(list)) {}

  /// True when nothing watches: callers skip even reading the clock.
  [[nodiscard]] bool empty() const noexcept { return list_.empty(); }
  /// Calls `event(observer)` for each observer, in the order they were attached.
  template <class Event>
  void tell(Event&& event) const {
    for (const std::shared_ptr<ActorObserver>& observer : list_) event(*observer);
  }

 private:
  std::vector<std::shared_ptr<ActorObserver>> list_;
};

/// Now, as Span's clock reads it.
[[nodiscard]] inline std::chrono::steady_clock::time_point observer_now() noexcept {
  return std::chrono::steady_clock::now();
}

}  // namespace axle
