// actors: devices and steps.
#include "actors/api.h"

#include <chrono>
#include <memory>
#include <stdexcept>

#include "actors/host.h"
#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "graph/trace_context.h"

namespace axle {
namespace {

thread_local std::chrono::steady_clock::time_point tls_last_step = std::chrono::steady_clock::now();

// This replica thread's closures for its next step, and its asynchronous closures' failures.
struct ThreadClosures {
  std::vector<StepClosure> now;
  std::vector<StepClosure> async;
  std::shared_ptr<ClosureFailures> failures = std::make_shared<ClosureFailures>();
};
thread_local ThreadClosures tls_closures;

void rethrow_closure_failure() {
  if (std::exception_ptr error = tls_closures.failures->take()) std::rethrow_exception(error);
}

// Hands the step's closures on: asynchronous ones to the runner, which waits for `outputs`;
// the others run here once `outputs` are done.
void run_closures(std::vector<IntrusivePtr<DeviceData>> outputs) {
  ThreadClosures& closures = tls_closures;
  std::vector<StepClosure> now = std::move(closures.now);
  closures.now.clear();
  if (!closures.async.empty()) {
    LazySystem::get().closure_runner().tell(RunAfterStep{
        now.empty() ? std::move(outputs) : outputs, std::move(closures.async), closures.failures});
    closures.async.clear();
  }
  if (now.empty()) return;
  for (const IntrusivePtr<DeviceData>& out : outputs) {
    try {
      (void)out->wait();
    } catch (...) {
      // A failed step: the closure reading it gets the error itself.
    }
  }
  for (const StepClosure& closure : now) run_step_closure(closure);
}

}  // namespace

Device device(int ordinal) {
  Device d{ordinal};
  (void)LazySystem::get().device_actor(d);  // validates
  return d;
}

Device device() { return device(Device{}.ordinal); }

std::vector<Device> devices() {
  std::vector<Device> all;
  for (int i = 0; i < device_count(); ++i) all.push_back(Device{i});
  return all;
}

int device_count() { return LazySystem::get().device_count(); }

std::string xla_device_hw(Device d) {
  LazySystem& system = LazySystem::get();
  (void)system.device_actor(d);
  return std::string(system.backend().hardware());
}

namespace {

void step(bool wait, SyncReason reason, const std::source_location& where) {
  const auto start = std::chrono::steady_clock::now();
  const double traced_ns = std::chrono::duration<double, std::nano>(start - tls_last_step).count();
  AXLE_METRIC_ADD("TraceTime", MetricKind::kTime, traced_ns);
  if (trace_recording()) {
    record_span(
        "trace step", "host",
        std::chrono::duration_cast<std::chrono::nanoseconds>(tls_last_step.time_since_epoch())
            .count(),
        std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
  }
  const std::shared_ptr<StepBreakdown>& account = this_thread_breakdown();
  account->count_step(traced_ns);
  AXLE_COUNTER_INC("MarkStep", 1);
  TraceContext& context = TraceContext::current();
  const bool closures = !tls_closures.now.empty() || !tls_closures.async.empty();
  std::vector<IntrusivePtr<DeviceData>> outputs;
  sync_tensors(context.pending_tensors(), wait || LazySystem::get().sync_wait(), reason, where,
               closures ? &outputs : nullptr);
  context.reset_node_count();
  tls_last_step = std::chrono::steady_clock::now();
  if (closures) run_closures(std::move(outputs));
  LazySystem::get().after_step();
  rethrow_closure_failure();
}

}  // namespace

void mark_step(bool wait, std::source_location where) { step(wait, SyncReason::kMarkStep, where); }

namespace detail {
void compiled_step(std::source_location where) { step(false, SyncReason::kCompile, where); }
void loader_step(std::source_location where) { step(false, SyncReason::kLoaderStep, where); }
}  // namespace detail

void add_step_closure(std::function<void()> closure, bool run_async, std::source_location where) {
  if (!closure) throw std::invalid_argument("add_step_closure: the closure is empty");
  (run_async ? tls_closures.async : tls_closures.now)
      .push_back({std::move(closure), where, this_thread_breakdown(), Device{}});
}

void wait_device_ops(const std::vector<Device>& which) {
  LazySystem& system = LazySystem::get();
  std::vector<Future<void>> drained;
  const std::vector<Device> all = which.empty() ? devices() : which;
  for (Device d : all) drained.push_back(system.device_actor(d).ask(Drain{}));
  for (auto& f : drained) f.get();
  system.closure_runner().ask(DrainClosures{}).get();
  rethrow_closure_failure();
}

void initialize_cache(const std::string& path, bool readonly) {
  LazySystem::initialize_persistent_cache(path, readonly);
}

void eager_mode(bool enabled) { LazySystem::get().set_eager(enabled); }
bool is_eager_mode() { return LazySystem::get().eager(); }

void set_rng_state(uint64_t seed, Device d) { TraceContext::current().set_rng_state(d, seed); }
uint64_t get_rng_state(Device d) { return TraceContext::current().rng_state(d).seed; }

MemoryInfo get_memory_info(Device d) {
  LazySystem& system = LazySystem::get();
  (void)system.device_actor(d);
  return system.backend().memory_info(d.ordinal);
}

int64_t live_tensor_count() { return TensorImpl::live_count(); }

}  // namespace axle
