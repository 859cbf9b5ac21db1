// actors/runtime/observer.h: the actors tell the system's observers what they did — executions,
// transfers, compiles, steps, syncs, closures — and record nothing themselves; with no observer
// attached they still work, and the metrics stay empty.
#include "axle/actors/runtime/observer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/device_actor.h"
#include "axle/axle.h"
#include "axle/backends/executable.h"

namespace axle {
namespace {

// Counts every event, and remembers what a few of them carried.
class CountingObserver final : public ActorObserver {
 public:
  std::atomic<int> program_waits{0}, executions{0}, to_device{0}, to_host{0}, found{0}, compiled{0},
      steps{0}, sent{0}, donated{0}, value_waits{0}, closures{0};
  std::atomic<std::size_t> bytes_to_host{0};
  std::atomic<bool> spans_ordered{true};

  void program_waited(const ExecuteRequest&, Span waited) override {
    ++program_waits;
    check(waited);
  }
  void executed(int, const ExecuteRequest&, Span run, double collective_ns) override {
    ++executions;
    check(run);
    if (collective_ns < 0 || collective_ns > run.ns()) spans_ordered = false;
  }
  void transferred_to_device(int, std::size_t, Span span) override {
    ++to_device;
    check(span);
  }
  void transferred_to_host(int, std::size_t bytes, Span span) override {
    ++to_host;
    bytes_to_host += bytes;
    check(span);
  }
  void program_found(ProgramSource source, Span lookup) override {
    if (source == ProgramSource::kMemoryCache) ++found;
    check(lookup);
  }
  void program_compiled(const StepGraph&, const Executable& program, Span compile) override {
    ++compiled;
    if (program.calls.empty()) spans_ordered = false;
    check(compile);
  }
  void step_traced(StepBreakdown&, Span traced) override {
    ++steps;
    check(traced);
  }
  void graph_sent(SyncReason, Device, Span built, ExecuteRequest&) override {
    ++sent;
    check(built);
  }
  void inputs_donated(int64_t count) override { donated += static_cast<int>(count); }
  void value_waited(StepBreakdown&, Span waited) override {
    ++value_waits;
    check(waited);
  }
  void closure_ran(const StepClosure&, Span run) override {
    ++closures;
    check(run);
  }

 private:
  void check(Span span) {
    if (span.end < span.start) spans_ordered = false;
  }
};

// Two steps of the same graph, a read, a closure.
float train_a_little() {
  Tensor w = tensor(std::vector<float>{1, 2, 3, 4}, {4});
  for (int step = 0; step < 2; ++step) {
    w = w * 0.5 + 1.0;
    add_step_closure([] {});
    mark_step();
  }
  return w.to_vector<float>()[0];
}

TEST(Observers, AnAttachedObserverHearsEveryKindOfEvent) {
  auto observer = std::make_shared<CountingObserver>();
  LazySystem::restart(LazySystemOptions{.observers = {{observer}}});
  EXPECT_FLOAT_EQ(train_a_little(), (1 * 0.5f + 1) * 0.5f + 1);
  wait_device_ops();
  EXPECT_EQ(observer->to_device.load(), 1);
  EXPECT_EQ(observer->steps.load(), 2);
  EXPECT_EQ(observer->sent.load(), 2);
  EXPECT_EQ(observer->compiled.load(), 1);
  EXPECT_EQ(observer->found.load(), 1);  // the second step's graph
  EXPECT_EQ(observer->executions.load(), 2);
  EXPECT_GE(observer->donated.load(), 1);  // w's old buffer, updated in place
  EXPECT_EQ(observer->to_host.load(), 1);
  EXPECT_EQ(observer->bytes_to_host.load(), 4 * sizeof(float));
  EXPECT_EQ(observer->value_waits.load(), 1);
  EXPECT_EQ(observer->closures.load(), 2);
  EXPECT_TRUE(observer->spans_ordered.load());
  LazySystem::restart();
}

TEST(Observers, WithNoneAttachedTheWorkIsDoneAndNothingIsRecorded) {
  LazySystem::restart(LazySystemOptions{.observers = {{}}});
  clear_all();
  EXPECT_FLOAT_EQ(train_a_little(), (1 * 0.5f + 1) * 0.5f + 1);
  wait_device_ops();
  EXPECT_FALSE(metric_data("ExecuteTime").has_value());
  EXPECT_FALSE(metric_data("TransferToDeviceTime").has_value());
  EXPECT_FALSE(counter_value("UncachedCompile").has_value());
  EXPECT_FALSE(counter_value("MarkStep").has_value());
  LazySystem::restart();
}

TEST(Observers, TheStandardOnesKeepTheMetrics) {
  LazySystem::restart();
  clear_all();
  (void)train_a_little();
  wait_device_ops();
  EXPECT_EQ(counter_value("MarkStep").value_or(0), 2);
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0), 1);
  EXPECT_EQ(counter_value("CachedCompile").value_or(0), 1);
  EXPECT_EQ(counter_value("StepClosures").value_or(0), 2);
  ASSERT_TRUE(metric_data("ExecuteTime").has_value());
  EXPECT_EQ(metric_data("ExecuteTime")->total_samples, 2);
  ASSERT_TRUE(metric_data("TransferFromDeviceTime").has_value());
  EXPECT_EQ(metric_data("TransferFromDeviceTime")->total_samples, 1);
}

TEST(Observers, SeveralObserversEachHearEveryEventInTheOrderAttached) {
  auto first = std::make_shared<CountingObserver>();
  auto second = std::make_shared<CountingObserver>();
  LazySystem::restart(LazySystemOptions{.observers = {{first, second}}});
  (void)train_a_little();
  wait_device_ops();
  EXPECT_EQ(first->executions.load(), 2);
  EXPECT_EQ(second->executions.load(), 2);
  EXPECT_EQ(first->steps.load(), second->steps.load());
  LazySystem::restart();
}

}  // namespace
}  // namespace axle
