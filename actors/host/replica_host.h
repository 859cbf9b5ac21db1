// actors: the replica host — one object per replica, on the replica's own thread (spawn's
// replica threads, the main thread, any thread that traces). It owns everything a replica has:
// its trace state (TraceContext: pending tensors, creation log, random streams, identity as
// `Device{}` sees it), the scratch it builds step graphs in, its step closures, its step clock
// and breakdown account, the graph hashes its replicas agreed on, its eager suspensions, and who
// it is among spawn's replicas. mark_step, value reads and step closures go through it; it sends
// compile requests to the compiler (cache misses only) and execute requests to the devices, and
// never waits for either unless asked to. The process root (LazySystem) knows nothing of hosts.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "axle/actors/runtime/closure_runner.h"
#include "axle/actors/runtime/replica_exchange.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/sync_reason.h"
#include "axle/graph/tensor.h"
#include "axle/graph/tensor_runtime.h"
#include "axle/graph/trace_context.h"

namespace axle {

class LazySystem;
struct ExecuteRequest;
class StepTimes;

class ReplicaHost {
 public:
  /// The calling thread's host, made on first use and kept until the thread exits.
  [[nodiscard]] static ReplicaHost& current() {
    if (ReplicaHost* host = ThisThread<ReplicaHost>::get()) [[likely]]
      return *host;
    return make_current();
  }

  ReplicaHost();
  ~ReplicaHost();
  ReplicaHost(const ReplicaHost&) = delete;
  ReplicaHost& operator=(const ReplicaHost&) = delete;

  // --- identity ---

  /// Who this replica is inside spawn; null outside it.
  [[nodiscard]] const ReplicaIdentity* replica() const noexcept {
    return replica_ ? &*replica_ : nullptr;
  }
  /// Makes this host replica `identity.ordinal` of spawn's group, with that device as its
  /// default, until leave_replica().
  void join_replica(const ReplicaIdentity& identity);
  void leave_replica();

  // --- tracing and steps ---

  [[nodiscard]] TraceContext& trace() noexcept { return *trace_; }
  /// After every traced op: eager mode executes it, a runaway graph is cut.
  void after_op(const Tensor& result, const SourceLocation& where);
  /// Executes the pending IR of `tensors` (graph's TensorRuntime::sync); with `wait`, waits for
  /// the results. The results' placeholders are appended to `step_outputs` when given.
  void sync(std::span<const Tensor> tensors, SyncReason reason, const std::source_location& where,
            bool wait = false, std::vector<IntrusivePtr<DeviceData>>* step_outputs = nullptr);
  /// mark_step: executes every pending tensor as one graph per device, runs or hands on the
  /// step's closures, and reports the step.
  void step(bool wait, SyncReason reason, const std::source_location& where);
  /// add_step_closure: runs `closure` after the next step's device work.
  void add_step_closure(std::function<void()> closure, bool run_async,
                        const std::source_location& where);
  /// Waits for `devices`' work (when empty: the replica's device inside spawn, else all) and
  /// every asynchronous closure added so far; rethrows the first failure of this host's
  /// asynchronous closures.
  void wait_device_ops(const std::vector<Device>& devices);

  /// compile(fn) traces whole graphs even in eager mode: eager execution waits while suspended.
  void suspend_eager() noexcept { ++eager_suspensions_; }
  void resume_eager() noexcept { --eager_suspensions_; }
  [[nodiscard]] bool eager_suspended() const noexcept { return eager_suspensions_ > 0; }

  /// This replica's step account ("replica 2", or "main" outside spawn), made on first use.
  [[nodiscard]] const std::shared_ptr<StepBreakdown>& account();

 private:
  static ReplicaHost& make_current();
  struct Closures {
    std::vector<StepClosure> now;
    std::vector<StepClosure> async;
    std::shared_ptr<ClosureFailures> failures = std::make_shared<ClosureFailures>();
    std::shared_ptr<ClosureBacklog> backlog = std::make_shared<ClosureBacklog>();
  };

  void sync_device(LazySystem& system, const DeviceSync& sync, bool wait, bool may_donate,
                   SyncReason reason, const std::source_location& where,
                   std::vector<IntrusivePtr<DeviceData>>* step_outputs, bool only_device);
  void sync_spmd(LazySystem& system, const DeviceSync& sync, bool wait, bool may_donate,
                 SyncReason reason, const std::source_location& where,
                 std::vector<IntrusivePtr<DeviceData>>* step_outputs);
  [[nodiscard]] bool has_collectives(const StepGraph& graph);
  void check_replicas_agree(const StepGraph& graph);
  void run_closures(std::vector<IntrusivePtr<DeviceData>> outputs);
  void rethrow_closure_failure();
  // Whether the step about to go to `device` (`request`, of a graph with `graph_hash`, done when
  // `done`, its smallest result, is) runs on this thread; waits for the previous one when it
  // does.
  bool runs_on_host(const LazySystem& system, Device device, uint64_t graph_hash,
                    ExecuteRequest& request, const IntrusivePtr<DeviceData>& done);
  // Before a graph goes to the devices (done when `done`, its smallest result, is; null: it has
  // no results): waits while AXLE_MAX_STEPS_IN_FLIGHT graphs sent before it are not done, then
  // counts it in.
  void admit_to_devices(LazySystem& system, const IntrusivePtr<DeviceData>& done);

  IntrusivePtr<TraceContext> trace_;
  std::optional<ReplicaIdentity> replica_;
  std::optional<ReplicaScope> replica_scope_;
  // A cache hit needs the graph only until its inputs are read, so the host builds every step
  // into one graph it keeps (its buffers stay warm); a miss hands the graph over to the compiler.
  StepGraph step_graph_;
  StepGraphScratch scratch_;
  Closures closures_;
  // The graphs in flight, oldest at `next`, each held by its smallest result (a device completes
  // a graph's results together); of the system numbered `system` (a restarted system's devices
  // may never complete the old ones).
  struct InFlight {
    std::vector<IntrusivePtr<DeviceData>> ring;
    std::size_t next = 0;
    uint64_t system = 0;
  };
  InFlight in_flight_;
  // Short steps run on this thread (runs_on_host): how long the device worked on this
  // thread's steps, and what tells that the last one is done (its smallest result).
  struct ShortSteps {
    uint64_t system = 0;
    int device = -1;
    std::shared_ptr<StepTimes> times;
    IntrusivePtr<DeviceData> last_done;
  };
  ShortSteps short_steps_;
  std::chrono::steady_clock::time_point last_step_ = std::chrono::steady_clock::now();
  std::shared_ptr<StepBreakdown> account_;
  // Which graphs hold collectives (by hash: a training loop syncs the same few graphs every
  // step), and which its replicas agreed on.
  std::unordered_map<uint64_t, bool> has_collectives_;
  std::unordered_set<uint64_t> agreed_;
  int eager_suspensions_ = 0;
};

}  // namespace axle
