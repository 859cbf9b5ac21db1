// actors: the standard observers.
#include "axle/actors/runtime/standard_observers.h"

#include <fmt/format.h>

#include <algorithm>

#include "axle/actors/runtime/closure_runner.h"
#include "axle/actors/runtime/device_actor.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/backends/executable.h"
#include "axle/engine/metrics.h"
#include "axle/engine/trace.h"

namespace axle {
namespace {

int64_t trace_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

class MetricsObserver final : public ActorObserver {
 public:
  void executed(int, const ExecuteRequest&, Span run, double) override {
    AXLE_METRIC_ADD("ExecuteTime", MetricKind::kTime, run.ns());
  }
  void transferred_to_device(int, std::size_t, Span transfer) override {
    AXLE_METRIC_ADD("TransferToDeviceTime", MetricKind::kTime, transfer.ns());
  }
  void transferred_to_host(int, std::size_t, Span transfer) override {
    AXLE_METRIC_ADD("TransferFromDeviceTime", MetricKind::kTime, transfer.ns());
  }
  void program_found(ProgramSource source, Span lookup) override {
    if (source == ProgramSource::kMemoryCache) {
      AXLE_COUNTER_INC("CachedCompile", 1);
    } else {
      AXLE_METRIC_ADD("PersistentCacheLoadTime", MetricKind::kTime, lookup.ns());
      AXLE_COUNTER_INC("PersistentCacheHit", 1);
    }
  }
  void program_not_persisted() override { AXLE_COUNTER_INC("PersistentCacheMiss", 1); }
  void program_compiled(const StepGraph&, const Executable& program, Span compile) override {
    AXLE_METRIC_ADD("CompileTime", MetricKind::kTime, compile.ns());
    AXLE_COUNTER_INC("UncachedCompile", 1);
    const auto fused = std::ranges::count_if(
        program.calls, [](const KernelCall& call) { return call.kernel == Kernel::kFused; });
    if (fused) AXLE_COUNTER_INC("FusedKernels", static_cast<int64_t>(fused));
    AXLE_METRIC_ADD("ProgramPeakBytes", MetricKind::kBytes,
                    static_cast<double>(program.plan.peak_bytes));
  }
  void step_traced(StepBreakdown&, Span traced) override {
    AXLE_METRIC_ADD("TraceTime", MetricKind::kTime, traced.ns());
    AXLE_COUNTER_INC("MarkStep", 1);
  }
  void inputs_donated(int64_t count) override { AXLE_COUNTER_INC("DonatedInputs", count); }
  void closure_ran(const StepClosure&, Span) override { AXLE_COUNTER_INC("StepClosures", 1); }
};

class TimelineObserver final : public ActorObserver {
 public:
  void collective_waited(const ExecuteRequest&, std::string_view kernel, Span waited) override {
    if (!trace_recording()) return;
    record_span(fmt::format("{} wait", kernel), "collective", trace_ns(waited.start),
                trace_ns(waited.end));
  }
  void executed(int, const ExecuteRequest& request, Span run, double) override {
    if (!trace_recording()) return;
    record_span("execute", "device", trace_ns(run.start), trace_ns(run.end), 0, request.trace_flow);
  }
  void transferred_to_device(int, std::size_t, Span transfer) override {
    if (!trace_recording()) return;
    record_span("transfer to device", "device", trace_ns(transfer.start), trace_ns(transfer.end));
  }
  void program_compiled(const StepGraph&, const Executable&, Span compile) override {
    if (!trace_recording()) return;
    record_span("compile", "compiler", trace_ns(compile.start), trace_ns(compile.end));
  }
  void step_traced(StepBreakdown&, Span traced) override {
    if (!trace_recording()) return;
    record_span("trace step", "host", trace_ns(traced.start), trace_ns(traced.end));
  }
  void graph_sent(SyncReason reason, Device device, Span built, ExecuteRequest& request) override {
    if (!trace_recording()) return;
    request.trace_flow = new_trace_flow();
    record_span(fmt::format("{} -> {}", reason_name(reason), device.to_string()), "host",
                trace_ns(built.start), trace_ns(built.end), request.trace_flow);
  }
  void closure_ran(const StepClosure&, Span run) override {
    if (!trace_recording()) return;
    record_span("step closure", "closures", trace_ns(run.start), trace_ns(run.end));
  }
};

class BreakdownObserver final : public ActorObserver {
 public:
  void program_waited(const ExecuteRequest& request, Span waited) override {
    if (request.account) request.account->add(StepBreakdown::kCompilerWait, waited.ns());
  }
  void executed(int, const ExecuteRequest& request, Span run, double collective_ns) override {
    if (!request.account) return;
    request.account->add(StepBreakdown::kExecuting, run.ns() - collective_ns);
    request.account->add(StepBreakdown::kCollectives, collective_ns);
  }
  void step_traced(StepBreakdown& account, Span traced) override {
    account.count_step(traced.ns());
  }
  void value_waited(StepBreakdown& account, Span waited) override {
    account.add_host_wait(StepBreakdown::kValueWait, waited.ns());
  }
  void closure_ran(const StepClosure& closure, Span run) override {
    if (closure.account) closure.account->add(StepBreakdown::kClosures, run.ns());
  }
};

}  // namespace

std::shared_ptr<ActorObserver> metrics_observer() { return std::make_shared<MetricsObserver>(); }
std::shared_ptr<ActorObserver> timeline_observer() { return std::make_shared<TimelineObserver>(); }
std::shared_ptr<ActorObserver> breakdown_observer() {
  return std::make_shared<BreakdownObserver>();
}

std::vector<std::shared_ptr<ActorObserver>> standard_observers() {
  return {metrics_observer(), timeline_observer(), breakdown_observer()};
}

}  // namespace axle
