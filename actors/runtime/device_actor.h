// actors: the DeviceActor — one per device, on a thread of its own. Like a stream, it runs
// requests in arrival order: an execution waits for its program (it may still be compiling) and
// its inputs, then runs and fulfils its output placeholders. At an in-graph collective the run
// pauses: the device brings its operand to the RendezvousActor and goes on when every member of
// its group has (as messages; the thread never blocks on a peer). A failure fails the outputs,
// and the error flows on to whatever reads them. Every call into the backend for its device
// comes from here: executions, transfers both ways, memory queries.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <source_location>
#include <vector>

#include "axle/actors/runtime/meeting_points.h"
#include "axle/actors/runtime/observer.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/backends/backend.h"
#include "axle/engine/actor.h"
#include "axle/graph/device_data.h"

namespace axle {

/// What a device brings to a meeting of a collective's members (device_actor.cpp).
struct CollectiveContribution;

/// One input of an execution: device data, or a host scalar (a graph parameter).
struct ExecuteInput {
  IntrusivePtr<DeviceData> data;  // null for a scalar
  DType dtype = DType::kFloat32;
  double value = 0;
};

/// How long a host's steps of one graph kept their device working: the fastest run seen. The
/// device offers each run's time, the host reads it (ReplicaHost::runs_on_host).
class StepTimes {
 public:
  /// Keeps `ns` when the run was of the graph watched and the fastest yet.
  void offer(uint64_t graph, int64_t ns) {
    const std::lock_guard lock(mutex_);
    if (graph == graph_ && (fastest_ns_ < 0 || ns < fastest_ns_)) fastest_ns_ = ns;
  }
  /// Watches `graph` from now on (forgetting another's time): its fastest run, or -1.
  int64_t fastest(uint64_t graph) {
    const std::lock_guard lock(mutex_);
    if (graph != graph_) {
      graph_ = graph;
      fastest_ns_ = -1;
    }
    return fastest_ns_;
  }

 private:
  std::mutex mutex_;
  uint64_t graph_ = 0;
  int64_t fastest_ns_ = -1;
};

/// Everything one execution needs, as the host fills it in: shared by handle, so messages stay
/// small, and read-only once sent (Execute holds it const). What the device does with it — the
/// wait for its program, the run, its collectives — is the device's own (DeviceExecution).
struct ExecuteRequest final : RefCounted {
  Future<IntrusivePtr<Executable>> program;
  std::vector<ExecuteInput> inputs;
  std::vector<IntrusivePtr<DeviceData>> outputs;
  /// Whose program it is, for its collectives: spawn's replica group (0 outside spawn), the
  /// replica's ordinal and how long a collective may wait for the others.
  uint64_t replica_group = 0;
  int replica = 0;
  /// The group's replicas in this process: `local_replicas` from `first_local_replica` on
  /// (unless told otherwise, all of them).
  int first_local_replica = 0;
  int local_replicas = std::numeric_limits<int>::max();
  std::chrono::nanoseconds collective_timeout{0};
  /// The replica's step account, charged for the device's part of the step.
  std::shared_ptr<StepBreakdown> account;
  /// Where the step was cut (mark_step, or the read that synced it), for its errors.
  std::source_location where;
  /// Where the device tells how long it worked on this step (its run less its waits at
  /// collectives), for the host to run short steps itself; and of which graph.
  std::shared_ptr<StepTimes> times;
  uint64_t graph_hash = 0;
  uint64_t trace_flow = 0;  // the arrow from the host's mark_step, when a trace records
};

struct Execute {
  IntrusivePtr<const ExecuteRequest> request;
};
/// Host data to place on the device into `target`.
struct TransferToDevice {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  IntrusivePtr<DeviceData> target;
};
/// Copies the data (on this device) to the host once it is ready, without waiting for the
/// device's queue; replies with its bytes or the error that failed it. Held while in flight, so
/// no later step donates its buffer.
struct ReadToHost {
  using Reply = std::vector<std::byte>;
  DataHold data;
};
/// The device's memory use.
struct QueryMemory {
  using Reply = MemoryInfo;
};
/// Replies once every request sent before it has finished.
struct Drain {
  using Reply = void;
};
/// Something the head request waited for has arrived.
struct Pump {};
/// A request as its device works through it: the DeviceActor's own state of the wait for its
/// program, its run and its collectives (only the device's thread touches it). Continuations
/// that come back to the device hold it by handle.
struct DeviceExecution final : RefCounted {
  explicit DeviceExecution(IntrusivePtr<const ExecuteRequest> sent)
      : request(std::move(sent)), program(request->program) {}

  IntrusivePtr<const ExecuteRequest> request;  // let go when it finishes, with its buffers
  Future<IntrusivePtr<Executable>> program;    // the request's, taken once
  IntrusivePtr<Executable> ready_program;
  std::exception_ptr compile_error;
  bool program_known = false;
  bool waiting_for_program = false;
  std::unique_ptr<ProgramRun> run;   // once started
  bool at_collective = false;        // waiting for the other members
  bool run_waiting = false;          // the backend's run waits to be resumed
  int collectives_reached = 0;       // collective calls the run has come to
  bool reduced_meeting_due = false;  // a shared all-reduce's second meeting is still to come
  bool finished = false;
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point waits_since;  // for its program, or at a collective
  double collective_ns = 0;                           // of the run, spent at collectives
};

/// The backend's run of `execution` can go on (see ProgramRun::when_resumable).
struct ResumeRun {
  IntrusivePtr<DeviceExecution> execution;
};
/// A read's data is ready (or failed): copy it now.
struct ReadReady {
  DataHold data;
  Promise<std::vector<std::byte>> reply;
};

class DeviceActor : public Actor<DeviceActor, Execute, TransferToDevice, ReadToHost, QueryMemory,
                                 Drain, Pump, ResumeRun, ReadReady> {
 public:
  /// At a collective the device waits up to `meeting_spin` for the other members before it
  /// parks (AXLE_SPIN_US). A step that would hold more than `memory_limit` bytes (0: no limit,
  /// AXLE_DEVICE_MEMORY_LIMIT) fails before it runs.
  DeviceActor(Backend& backend, int ordinal, std::shared_ptr<MeetingPoints> points,
              std::chrono::microseconds meeting_spin, const Observers& observers,
              uint64_t memory_limit = 0)
      : backend_(backend),
        ordinal_(ordinal),
        points_(std::move(points)),
        meeting_spin_(meeting_spin),
        memory_limit_(memory_limit),
        observers_(observers) {}

  void handle(Execute& m);
  void handle(TransferToDevice& m);
  void handle(ReadToHost& m, Promise<std::vector<std::byte>>&& reply);
  void handle(QueryMemory& m, Promise<MemoryInfo>&& reply);
  void handle(Drain& m, Promise<void>&& reply);
  void handle(Pump&) { pump(); }
  void handle(ResumeRun& m);
  void handle(ReadReady& m) { copy_to_host(std::move(m.data), std::move(m.reply)); }

 private:
  using Execution = DeviceExecution;
  struct Work {
    IntrusivePtr<Execution> execute;  // or
    TransferToDevice transfer;
    Promise<void> drained;  // or a Drain marker
    bool is_drain = false;
  };
  void pump();
  bool ready(Execution& execution);
  void start(Execution& execution);
  // Runs until the program ends or pauses at a collective.
  void advance(Execution& execution);
  void collective(Execution& execution, const KernelCall& call);
  // An all-reduce among the processes `owners` (see device_actor.cpp).
  void all_reduce_by_stretches(Execution& execution, const KernelCall& call,
                               const std::vector<int>& members, std::vector<int> owners);
  // The members of `call` have met (`all`): the device computes its result of the collective.
  void collect(IntrusivePtr<Execution> held, const KernelCall& call,
               const std::vector<int>& members, int position, bool shares_result,
               const std::string& tag, Result<Gathered> all, bool in_line);
  // This process's stretch of an all-reduce by stretches, folded (device_collectives.cpp).
  IntrusivePtr<DeviceMemory> fold_own_stretch(Execution& execution, const KernelCall& call,
                                              const std::vector<std::shared_ptr<const void>>& all,
                                              int64_t first, int64_t last);
  // Who a meeting waits for: members of this process only, or members in other processes too,
  // whose messages the transport's thread receives, or (kPolled) the waiting device itself.
  enum class Awaits { kLocal, kProcesses, kProcessesPolled };
  // Runs `then(Result<Gathered>, in_line)` once every member has come to the meeting `met`:
  // in line (in_line true) when they come while the device waits, else as a message.
  template <class Then>
  void when_met(Future<Gathered> met, Awaits awaits, Then then);
  // The run goes on with `result` as the collective's, or fails with `failed`; in line, the
  // caller's loop goes on with it, else the queue is pumped.
  void resume_after_collective(Execution& execution, std::exception_ptr failed,
                               IntrusivePtr<DeviceMemory> result, bool in_line);
  // What this device brings to one meeting of `call`'s members.
  [[nodiscard]] Arrive arrival(const ExecuteRequest& request, const KernelCall& call,
                               std::vector<int> members, std::string tag,
                               std::shared_ptr<const CollectiveContribution> contribution) const;
  // A run that failed still comes, with its error, to every meeting of the collectives its
  // program has left, so the other members fail at once and their meetings stay matched.
  void come_failed_to_collectives(const Execution& execution, std::exception_ptr error);
  void finish(Execution& execution, std::exception_ptr error);
  // The error for a program that would exceed memory_limit_ on this device, or null.
  std::exception_ptr over_memory_limit(const Execution& execution) const;
  void run(TransferToDevice& transfer);
  void copy_to_host(DataHold data, Promise<std::vector<std::byte>> reply);
  // How meetings and errors name `call` of the request's program ("f32[1024] -> f32[1024]"),
  // formatted once per collective of the last program that reached one: a step's program is
  // usually the last step's.
  const std::string& collective_tag(const Execution& execution, const KernelCall& call);

  Backend& backend_;
  int ordinal_;
  std::shared_ptr<MeetingPoints> points_;
  std::chrono::microseconds meeting_spin_;
  uint64_t memory_limit_;
  const Observers& observers_;
  std::deque<Work> queue_;
  const DeviceData* waiting_on_ = nullptr;
  IntrusivePtr<Executable> tagged_program_;   // held, so that its address names it alone
  std::vector<std::string> collective_tags_;  // its calls' tags, by index; empty until formatted
  std::string untagged_call_;                 // the tag of a call from outside the program
};

}  // namespace axle
