// actors: a replica's host — turning its pending IR into executions, its steps and closures.
#include "axle/actors/host/replica_host.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "axle/actors/compiler/debug_analysis.h"
#include "axle/actors/host/finite_check.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/spmd_runtime.h"
#include "axle/actors/host/spmd_step.h"
#include "axle/engine/hash.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"
#include "axle/engine/this_thread.h"
#include "axle/graph/sharding.h"

namespace axle {
namespace {

Future<IntrusivePtr<Executable>> find_or_compile(LazySystem& system, StepGraph& graph,
                                                 SyncReason reason,
                                                 const std::source_location& where,
                                                 int64_t spmd_devices = 0) {
  if (system.debug_level() >= 2) {
    fmt::print(stderr, "{}", execution_analysis(graph, reason, where));
  }
  const auto start =
      system.observers().empty() ? std::chrono::steady_clock::time_point{} : observer_now();
  if (IntrusivePtr<Executable> hit = system.cache().find(graph.hash)) {
    if (!system.observers().empty()) {
      const Span lookup{start, observer_now()};
      system.observers().tell(
          [&](ActorObserver& o) { o.program_found(ProgramSource::kMemoryCache, lookup); });
    }
    auto [promise, future] = make_promise<IntrusivePtr<Executable>>();
    promise.set_value(std::move(hit));
    return future;
  }
  return system.compiler().ask(CompileRequest{std::make_shared<const StepGraph>(std::move(graph)),
                                              reason, where, spmd_devices});
}

// Buffer donation (XLA_ENABLE_PARAM_ALIASING): after a step that syncs every pending tensor of
// the replica, nothing of its graph survives but the outputs, so an input no tensor holds is read
// by this step alone, and the step may overwrite its buffer (parameters and optimizer state
// updated in place, a batch nobody kept). Such an input must appear once and not be an output.
// Which inputs are donated is part of the graph's hash: it depends on the program the user
// wrote, not on timing, so a training loop donates the same inputs every step.
void mark_donations(StepGraph& graph, const Observers& observers) {
  std::vector<std::pair<const DeviceData*, std::size_t>> candidates;
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    const Node& leaf = *graph.nodes[graph.inputs[i]];
    if (leaf.op() == Op::kDeviceData && leaf.data()->tensor_refs() == 0) {
      candidates.emplace_back(leaf.data().get(), i);
    }
  }
  if (candidates.empty()) return;
  std::ranges::sort(candidates);
  graph.donated.assign(graph.inputs.size(), 0);
  std::size_t donated = 0;
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    const bool repeated =
        (k > 0 && candidates[k - 1].first == candidates[k].first) ||
        (k + 1 < candidates.size() && candidates[k + 1].first == candidates[k].first);
    const std::size_t input = candidates[k].second;
    if (repeated || std::ranges::find(graph.outputs, graph.inputs[input]) != graph.outputs.end()) {
      continue;
    }
    graph.donated[input] = 1;
    ++donated;
  }
  if (donated == 0) {
    graph.donated.clear();
    return;
  }
  uint64_t h = hash_combine(graph.hash, 0x646f6e61746564ULL);  // "donated"
  for (uint8_t d : graph.donated) h = hash_combine(h, d);
  graph.hash = h;
  observers.tell([&](ActorObserver& o) { o.inputs_donated(static_cast<int64_t>(donated)); });
}

// What tells that a step's device work is done: of each device's results (which its device
// completes together), the smallest. A closure waiting for its step holds only these, not the
// step's gradients and activations: closures that fall behind would otherwise keep every
// pending step's results alive.
std::vector<IntrusivePtr<DeviceData>> completion_markers(
    std::vector<IntrusivePtr<DeviceData>> outputs) {
  std::vector<IntrusivePtr<DeviceData>> markers;
  for (IntrusivePtr<DeviceData>& out : outputs) {
    auto same_device = std::ranges::find_if(
        markers, [&](const IntrusivePtr<DeviceData>& m) { return m->device() == out->device(); });
    if (same_device == markers.end()) {
      markers.push_back(std::move(out));
    } else if (out->bytes() < (*same_device)->bytes()) {
      *same_device = std::move(out);
    }
  }
  return markers;
}

}  // namespace

// --- the host itself ---

ReplicaHost& ReplicaHost::make_current() {
  // Kept until the thread exits, unbinding first, so nothing on the way out finds a host being
  // destroyed.
  auto* host = new ReplicaHost();
  ThisThread<ReplicaHost>::bind(host);
  keep_until_thread_exit(std::shared_ptr<void>(host, [](void* p) {
    auto* dying = static_cast<ReplicaHost*>(p);
    if (ThisThread<ReplicaHost>::get() == dying) ThisThread<ReplicaHost>::bind(nullptr);
    delete dying;
  }));
  return *host;
}

ReplicaHost::ReplicaHost() : trace_(&TraceContext::current()) {
  // In a job of several processes, a thread outside spawn is its process's replica.
  if (const ReplicaIdentity* process = process_replica()) join_replica(*process);
}

ReplicaHost::~ReplicaHost() = default;

void ReplicaHost::join_replica(const ReplicaIdentity& identity) {
  replica_ = identity;
  replica_scope_.emplace(Device{identity.device}, identity.world_size);
}

void ReplicaHost::leave_replica() {
  replica_scope_.reset();
  replica_.reset();
  if (const ReplicaIdentity* process = process_replica()) join_replica(*process);
}

const std::shared_ptr<StepBreakdown>& ReplicaHost::account() {
  if (!account_) {
    account_ = new_step_account(replica_ ? fmt::format("replica {}", replica_->ordinal)
                                         : std::string("main"));
  }
  return account_;
}

// --- tracing ---

void ReplicaHost::after_op(const Tensor& result, const SourceLocation& where) {
  LazySystem& system = LazySystem::get();
  if (system.eager() && !eager_suspended()) {
    const Tensor synced[] = {result};
    sync(synced, SyncReason::kEager, std::source_location::current());
    return;
  }
  TraceContext& context = *trace_;
  if (context.nodes_since_step() >= system.max_graph_nodes()) {
    AXLE_LOG(WARNING,
             "{} ops traced without a mark_step (AXLE_MAX_GRAPH_NODES={}): cutting the step at "
             "{}:{}; add mark_step() to the loop",
             context.nodes_since_step(), system.max_graph_nodes(), where.file(), where.line());
    const std::vector<Tensor> pending = context.pending_tensors();
    sync(pending, SyncReason::kGraphLimit, std::source_location::current());
    context.reset_node_count();
  }
}

namespace {

// The result of a step a host holds to tell when the step is done (a device completes a step's
// results together): its smallest, so that no large buffer lives longer for it. Null for none.
IntrusivePtr<DeviceData> smallest_result(std::span<const IntrusivePtr<DeviceData>> outputs) {
  if (outputs.empty()) return nullptr;
  return *std::ranges::min_element(
      outputs, {}, [](const IntrusivePtr<DeviceData>& out) { return out->bytes(); });
}

// Waits until `done`'s step is done; a failed step is done too (its results carry the error).
void wait_for_step(DeviceData& done) {
  try {
    (void)done.wait();
  } catch (...) {
    // Whatever reads the failed step's results gets the error.
  }
}

// The graph's leaves as execution inputs: device data as it lies, a scalar leaf as its value.
void append_leaves(const StepGraph& graph, std::vector<ExecuteInput>& inputs) {
  for (int32_t id : graph.inputs) {
    const Node& leaf = *graph.nodes[id];
    if (leaf.op() == Op::kDeviceData) {
      inputs.push_back({leaf.data(), leaf.dtype(), 0});
    } else {
      inputs.push_back({{}, leaf.dtype(), leaf.value()});
    }
  }
}

}  // namespace

// A step whose device work takes less than a hand-off between threads costs (the host waking the
// device's worker, then waiting to be woken in turn: 5-10 us on a 2-core VM) runs on the host's
// thread instead, below AXLE_RUN_ON_HOST_BELOW_US (benchmarks/README.md, "Short steps on the
// host's thread"). The device's work is what it did less its waits at collectives (those the
// host would wait for anyway), in the fastest of the graph's runs: a run slowed by a busy core
// says nothing of the work.
bool ReplicaHost::runs_on_host(const LazySystem& system, Device device, uint64_t graph_hash,
                               ExecuteRequest& request, const IntrusivePtr<DeviceData>& done) {
  if (!done || system.run_on_host_below_ns() <= 0) return false;
  ShortSteps& steps = short_steps_;
  if (steps.system != system.serial() || steps.device != device.ordinal) {
    steps = ShortSteps{system.serial(), device.ordinal, std::make_shared<StepTimes>(), {}};
  }
  request.times = steps.times;
  request.graph_hash = graph_hash;
  const int64_t fastest = steps.times->fastest(graph_hash);
  const bool here = fastest >= 0 && fastest < system.run_on_host_below_ns();
  // Its previous step may still run on the device's worker: the host waits for it (a short
  // wait, by this measure) to find the device idle.
  if (here && steps.last_done && steps.last_done->pending()) wait_for_step(*steps.last_done);
  steps.last_done = done;
  return here;
}

void ReplicaHost::sync_device(LazySystem& system, const DeviceSync& sync, bool wait,
                              bool may_donate, SyncReason reason, const std::source_location& where,
                              std::vector<IntrusivePtr<DeviceData>>* step_outputs,
                              bool only_device) {
  const Device device = sync.device;
  const std::vector<NodePtr>& roots = sync.roots;
  // Each traced op made one node and usually one scalar leaf.
  const auto sync_start =
      system.observers().empty() ? std::chrono::steady_clock::time_point{} : observer_now();
  const std::size_t hint = 2 * trace_->nodes_since_step();
  StepGraph& graph = step_graph_;
  build_step_graph(roots, graph, scratch_, hint);
  if (may_donate) mark_donations(graph, system.observers());

  auto request = make_intrusive<ExecuteRequest>();
  request->account = account();
  request->where = where;
  if (replica_) {
    request->replica_group = replica_->group;
    request->replica = replica_->ordinal;
    request->first_local_replica = replica_->first_local;
    request->local_replicas = replica_->local_count;
    if (has_collectives(graph)) {
      request->collective_timeout = collective_timeout();
      try {
        check_replicas_agree(graph);
      } catch (...) {
        graph.clear();
        throw;
      }
    }
  }
  request->inputs.reserve(graph.inputs.size());
  append_leaves(graph, request->inputs);
  request->outputs.reserve(roots.size());
  for (const NodePtr& root : roots) {
    request->outputs.push_back(make_intrusive<DeviceData>(device, root->dtype(), root->shape()));
  }
  // AXLE_CHECK_FINITE evaluates the graph again when a result is not finite.
  std::optional<StepGraph> kept;
  if (system.check_finite()) kept = graph;
  request->program = find_or_compile(system, graph, reason, where);
  const IntrusivePtr<DeviceData> done = smallest_result(request->outputs);
  const bool here = only_device && request->program.ready() &&
                    runs_on_host(system, device, graph.hash, *request, done);
  graph.clear();  // drops its references to the roots
  for (std::size_t i = 0; i < sync.tensors.size(); ++i) {
    sync.tensors[i]->set_data(request->outputs[sync.root_of[i]]);
  }
  if (step_outputs) {
    step_outputs->insert(step_outputs->end(), request->outputs.begin(), request->outputs.end());
  }
  std::vector<IntrusivePtr<DeviceData>> outputs;
  if (wait) outputs = request->outputs;
  if (!system.observers().empty()) {
    const Span built{sync_start, observer_now()};
    system.observers().tell(
        [&](ActorObserver& o) { o.graph_sent(reason, device, built, *request); });
  }
  admit_to_devices(system, done);
  if (!here) {
    system.device_actor(device).tell(Execute{std::move(request)});
  } else if (system.device_actor(device).tell_here(Execute{std::move(request)},
                                                   /*await_worker=*/true)) {
    AXLE_COUNTER_INC("StepsRunOnHost", 1);
  }
  if (wait) {
    for (auto& out : outputs) out->wait();
  }
  if (kept) check_step_finite(*kept, outputs, where);
}

// Under SPMD the device's graph is the global program: compiled once into the program every
// device of the mesh runs (a miss waits for the compile, which decides how the results are laid
// out), then sent to each device with its shards of the inputs and its position.
void ReplicaHost::sync_spmd(LazySystem& system, const DeviceSync& sync, bool wait, bool may_donate,
                            SyncReason reason, const std::source_location& where,
                            std::vector<IntrusivePtr<DeviceData>>* step_outputs) {
  if (replica_ && replica_->group != kProcessGroup) {
    throw std::logic_error(
        "use_spmd(): an SPMD program runs on every device from one thread; spawn no replicas "
        "under SPMD");
  }
  // The mesh is every device of the job; this process runs its own `local` devices' part, from
  // global ordinal `first` on (a job of several processes: each traces and compiles the same
  // program, and their devices meet in its collectives across processes).
  const int devices = system.spmd_device_count();
  const int local = system.device_count();
  const int first = system.first_spmd_device();
  const auto sync_start =
      system.observers().empty() ? std::chrono::steady_clock::time_point{} : observer_now();
  StepGraph& graph = step_graph_;
  build_step_graph(spmd_step::roots_keeping_layouts(sync), graph, scratch_,
                   2 * trace_->nodes_since_step());
  if (may_donate) mark_donations(graph, system.observers());
  graph.hash = hash_combine(graph.hash, 0x73706d6400000000ULL + static_cast<uint64_t>(devices));
  std::vector<ExecuteInput> inputs;
  inputs.reserve(graph.inputs.size() + 1);
  append_leaves(graph, inputs);
  std::optional<StepGraph> kept;
  if (system.check_finite()) kept = graph;
  if (replica_) {
    // Processes that traced different programs (or the same over other meshes) would meet in
    // collectives that do not match: they compare first, as spawn's replicas do.
    try {
      check_replicas_agree(graph);
    } catch (...) {
      graph.clear();
      throw;
    }
  }
  Future<IntrusivePtr<Executable>> compiled =
      find_or_compile(system, graph, reason, where, devices);
  graph.clear();
  const IntrusivePtr<Executable> program = compiled.get();
  const Executable::Spmd& layout = program->spmd;
  // What the partitioner estimates each device's collectives move in this step.
  AXLE_COUNTER_INC("SpmdCollectiveBytes", layout.collective_bytes);
  spmd_step::lay_out_inputs(system, layout, inputs);
  std::vector<std::vector<IntrusivePtr<DeviceData>>> shards(sync.roots.size());
  for (auto& result : shards) result.reserve(static_cast<std::size_t>(local));
  std::vector<IntrusivePtr<ExecuteRequest>> requests;
  requests.reserve(static_cast<std::size_t>(local));
  for (int k = 0; k < local; ++k) {
    auto request = make_intrusive<ExecuteRequest>();
    request->account = account();
    request->where = where;
    request->replica_group = kSpmdGroup;
    request->replica = first + k;  // the device's mesh position
    request->first_local_replica = first;
    request->local_replicas = local;
    request->collective_timeout = collective_timeout();
    auto [promise, future] = make_promise<IntrusivePtr<Executable>>();
    promise.set_value(program);
    request->program = std::move(future);
    spmd_step::fill_spmd_request(*request, inputs, layout, sync, k, first + k, shards);
    requests.push_back(std::move(request));
  }
  const std::vector<IntrusivePtr<DeviceData>> outputs =
      spmd_step::publish_spmd_results(sync, layout, std::move(shards), first);
  if (step_outputs) step_outputs->insert(step_outputs->end(), outputs.begin(), outputs.end());
  if (!system.observers().empty()) {
    const Span built{sync_start, observer_now()};
    for (int i = 0; i < local; ++i) {
      system.observers().tell(
          [&](ActorObserver& o) { o.graph_sent(reason, Device{i}, built, *requests[i]); });
    }
  }
  admit_to_devices(system, smallest_result(outputs));
  for (int i = 0; i < local; ++i) {
    system.device_actor(Device{i}).tell(Execute{std::move(requests[i])});
  }
  if (wait || kept) {
    for (const auto& out : outputs) out->wait();
  }
  if (kept) check_step_finite(*kept, outputs, where);
}

void ReplicaHost::sync(std::span<const Tensor> tensors, SyncReason reason,
                       const std::source_location& where, bool wait,
                       std::vector<IntrusivePtr<DeviceData>>* step_outputs) {
  LazySystem& system = LazySystem::get();
  if (system.saved_graphs().enabled()) {
    system.saved_graphs().append(std::vector<Tensor>(tensors.begin(), tensors.end()),
                                 reason_name(reason));
  }
  // Only a step syncs every pending tensor of the replica (see mark_donations).
  // AXLE_CHECK_FINITE reads the step's inputs after it ran: none may be overwritten.
  const bool may_donate = reason_is_step(reason) && system.param_aliasing() &&
                          !system.check_finite() && !Node::ir_shared_across_threads();
  const std::vector<DeviceSync> syncs = pending_by_device(tensors);
  for (const DeviceSync& sync : syncs) {
    if (system.spmd()) {
      sync_spmd(system, sync, wait, may_donate, reason, where, step_outputs);
      continue;
    }
    sync_device(system, sync, wait || system.check_finite(), may_donate, reason, where,
                step_outputs, syncs.size() == 1);
  }
  // The synced tensors now read device data: what the log holds of their graphs is garbage
  // (and anything still pending is held by its tensors).
  trace_->creation_log().clear();
}

// Without a bound, a host that traces faster than its devices run queues step after step, each
// holding its inputs and results (a whole epoch of batches on a fast loader). torch_xla lets one
// step run while the next is traced; two in flight also keep a device busy while its host wakes.
void ReplicaHost::admit_to_devices(LazySystem& system, const IntrusivePtr<DeviceData>& done) {
  const std::size_t limit = system.max_steps_in_flight();
  if (limit == 0 || !done) return;
  InFlight& in_flight = in_flight_;
  if (in_flight.system != system.serial() || in_flight.ring.size() != limit) {
    in_flight.ring.assign(limit, nullptr);
    in_flight.next = 0;
    in_flight.system = system.serial();
  }
  IntrusivePtr<DeviceData>& oldest = in_flight.ring[in_flight.next];
  if (oldest && oldest->pending()) {
    const auto start = std::chrono::steady_clock::now();
    wait_for_step(*oldest);
    const std::chrono::duration<double, std::nano> waited =
        std::chrono::steady_clock::now() - start;
    account()->add_host_wait(StepBreakdown::kDeviceWait, waited.count());
    AXLE_COUNTER_INC("StepsInFlightWait", 1);
  }
  oldest = done;
  in_flight.next = (in_flight.next + 1) % limit;
}

// --- steps and closures ---

void ReplicaHost::step(bool wait, SyncReason reason, const std::source_location& where) {
  LazySystem& system = LazySystem::get();
  if (!system.observers().empty()) {
    const Span traced{last_step_, observer_now()};
    StepBreakdown& mine = *account();
    system.observers().tell([&](ActorObserver& o) { o.step_traced(mine, traced); });
  }
  const bool closures = !closures_.now.empty() || !closures_.async.empty();
  std::vector<IntrusivePtr<DeviceData>> outputs;
  const std::vector<Tensor> pending = trace_->pending_tensors();
  sync(pending, reason, where, wait || system.sync_wait(), closures ? &outputs : nullptr);
  trace_->reset_node_count();
  last_step_ = std::chrono::steady_clock::now();
  if (closures) run_closures(std::move(outputs));
  system.step_reports().after_step();
  rethrow_closure_failure();
}

void ReplicaHost::add_step_closure(std::function<void()> closure, bool run_async,
                                   const std::source_location& where) {
  (run_async ? closures_.async : closures_.now)
      .push_back({std::move(closure), where, account(), Device{}});
}

// Hands the step's closures on: asynchronous ones to the runner, which waits for `outputs`;
// the others run here once `outputs` are done.
void ReplicaHost::run_closures(std::vector<IntrusivePtr<DeviceData>> outputs) {
  outputs = completion_markers(std::move(outputs));
  std::vector<StepClosure> now = std::move(closures_.now);
  closures_.now.clear();
  if (!closures_.async.empty()) {
    LazySystem& system = LazySystem::get();
    // As torch_xla's bounded closure queue: a runner behind by XLA_MAX_ASYNC_QUEUE closures
    // holds the host here, or the steps their closures captured would pile up.
    const auto start = std::chrono::steady_clock::now();
    bool waited = false;
    ClosureBacklog::Entry counted =
        closures_.backlog->admit(closures_.async.size(), system.max_async_closures(), &waited);
    if (waited) {
      const std::chrono::duration<double, std::nano> wait =
          std::chrono::steady_clock::now() - start;
      account()->add_host_wait(StepBreakdown::kClosures, wait.count());
      AXLE_COUNTER_INC("AsyncClosureQueueWait", 1);
    }
    system.closure_runner().tell(RunAfterStep{now.empty() ? std::move(outputs) : outputs,
                                              std::move(closures_.async), closures_.failures,
                                              std::move(counted)});
    closures_.async.clear();
  }
  if (now.empty()) return;
  for (const IntrusivePtr<DeviceData>& out : outputs) {
    try {
      (void)out->wait();
    } catch (...) {
      // A failed step: the closure reading it gets the error itself.
    }
  }
  const Observers& observers = LazySystem::get().observers();
  const auto step_done = step_done_at(outputs);
  for (const StepClosure& closure : now) run_step_closure(closure, observers, step_done);
}

void ReplicaHost::rethrow_closure_failure() {
  if (std::exception_ptr error = closures_.failures->take()) std::rethrow_exception(error);
}

void ReplicaHost::wait_device_ops(const std::vector<Device>& devices) {
  LazySystem& system = LazySystem::get();
  std::vector<Future<void>> drained;
  if (devices.empty() && replica_) {
    // A replica of spawn waits for its own device, as a torch_xla process for its one local
    // device. Another replica's device may already hold that replica's next step, parked at a
    // collective for this one: a drain queued behind it would wait for a step this replica
    // issues only once the wait returns.
    drained.push_back(system.device_actor(Device{replica_->device}).ask(Drain{}));
  } else if (devices.empty()) {
    for (int i = 0; i < system.device_count(); ++i) {
      drained.push_back(system.device_actor(Device{i}).ask(Drain{}));
    }
  } else {
    for (Device d : devices) drained.push_back(system.device_actor(d).ask(Drain{}));
  }
  for (auto& f : drained) f.get();
  system.closure_runner().ask(DrainClosures{closures_.failures.get()}).get();
  rethrow_closure_failure();
}

}  // namespace axle
