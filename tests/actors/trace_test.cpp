// The profiler timeline (engine/trace.h): a trace file is Chrome trace-event JSON with a track
// per actor, an arrow from each mark_step to the execution it caused, and — in an asynchronous
// run — the host tracing a step while the device still executes the one before (never under
// XLA_SYNC_WAIT=1); Trace and StepTrace annotate; nothing is recorded without a trace.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

struct Span {
  std::string name;
  std::string track;
  double start = 0;
  double end = 0;
};

struct TraceFile {
  std::vector<Span> spans;
  std::set<std::string> tracks;
  std::map<int64_t, double> flow_starts;  // id -> ts
  std::map<int64_t, double> flow_ends;
};

TraceFile read_trace(const std::filesystem::path& path) {
  std::ifstream in(path);
  const nlohmann::json json = nlohmann::json::parse(in);  // throws unless it is JSON
  TraceFile file;
  std::map<int, std::string> names;
  for (const auto& event : json.at("traceEvents")) {
    if (event.at("ph") == "M") names[event.at("tid").get<int>()] = event.at("args").at("name");
  }
  for (const auto& [tid, name] : names) file.tracks.insert(name);
  for (const auto& event : json.at("traceEvents")) {
    const std::string phase = event.at("ph");
    if (phase == "X") {
      const double ts = event.at("ts");
      file.spans.push_back({event.at("name"), names.at(event.at("tid").get<int>()), ts,
                            ts + event.at("dur").get<double>()});
    } else if (phase == "s") {
      file.flow_starts[event.at("id")] = event.at("ts");
    } else if (phase == "f") {
      file.flow_ends[event.at("id")] = event.at("ts");
    }
  }
  return file;
}

int count(const TraceFile& file, const std::string& name) {
  int n = 0;
  for (const Span& s : file.spans) n += s.name == name;
  return n;
}

// Whether the host traced some step N+1 while the device was still executing step N: the trace
// span that follows a mark_step begins before the execution that mark_step caused (found through
// their arrow) has ended. Under XLA_SYNC_WAIT=1 the host waits, and it never does.
bool tracing_overlaps_execution(const TraceFile& file) {
  for (const auto& [id, sent] : file.flow_starts) {
    if (!file.flow_ends.contains(id)) continue;
    const double started = file.flow_ends.at(id);
    const Span* execute = nullptr;
    const Span* next_trace = nullptr;
    for (const Span& span : file.spans) {
      if (span.name == "execute" && std::abs(span.start - started) < 0.01) execute = &span;
      if (span.name == "trace step" && span.start >= sent &&
          (!next_trace || span.start < next_trace->start)) {
        next_trace = &span;
      }
    }
    if (execute && next_trace && next_trace->start < execute->end) return true;
  }
  return false;
}

class Timeline : public ::testing::Test {
 protected:
  void SetUp() override { LazySystem::restart(); }
  void TearDown() override {
    config::unset("XLA_SYNC_WAIT");
    config::unset("AXLE_TRACE_FILE");
    LazySystem::restart();
    std::filesystem::remove(path_);
  }
  // Steps whose device work (a chain of 256x256 products) takes longer than their tracing (a
  // thousand small ops), after the two that compile; `steps` more are traced.
  static void run_steps(int steps) {
    Tensor w = tensor(std::vector<float>(256 * 256, 0.01f), {256, 256});
    Tensor s = zeros({4});
    auto step = [&] {
      Tensor x = w;
      for (int k = 0; k < 8; ++k) x = matmul(x, w) * 0.5;
      w = x;
      for (int k = 0; k < 1000; ++k) s = s + 1.0;
      mark_step();
    };
    for (int i = 0; i < 2; ++i) step();  // the graphs of the first and of every later step
    wait_device_ops();
    for (int i = 0; i < steps; ++i) step();
    wait_device_ops();
  }
  // Each test's own file: ctest runs tests as processes side by side.
  const std::filesystem::path path_ =
      std::filesystem::temp_directory_path() /
      (std::string("axle_trace_test_") +
       ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json");
};

TEST_F(Timeline, AnAsynchronousRunShowsEachActorAndTracingOverlappingExecution) {
  start_trace(path_.string());
  run_steps(8);
  EXPECT_GT(stop_trace(), 0u);
  const TraceFile file = read_trace(path_);
  auto has_track = [&](const std::string& prefix) {
    for (const std::string& t : file.tracks) {
      if (t.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_track("device-0")) << ::testing::PrintToString(file.tracks);
  EXPECT_TRUE(has_track("compiler")) << ::testing::PrintToString(file.tracks);
  EXPECT_EQ(count(file, "trace step"), 10);
  EXPECT_EQ(count(file, "execute"), 10);
  EXPECT_EQ(count(file, "compile"), 2);
  // Every execution has its arrow from the mark_step that sent it, drawn forward in time.
  EXPECT_EQ(file.flow_ends.size(), 10u);
  for (const auto& [id, end] : file.flow_ends) {
    ASSERT_TRUE(file.flow_starts.contains(id)) << id;
    EXPECT_LE(file.flow_starts.at(id), end) << id;
  }
  std::string spans;
  for (const Span& span : file.spans) {
    spans += fmt::format("{} {} {:.0f} {:.0f}\n", span.track, span.name, span.start, span.end);
  }
  EXPECT_TRUE(tracing_overlaps_execution(file)) << spans;
}

TEST_F(Timeline, UnderSyncWaitTracingNeverOverlapsExecution) {
  config::set("XLA_SYNC_WAIT", "1");
  LazySystem::restart();
  start_trace(path_.string());
  run_steps(6);
  (void)stop_trace();
  const TraceFile file = read_trace(path_);
  EXPECT_EQ(count(file, "execute"), 8);
  EXPECT_FALSE(tracing_overlaps_execution(file));
}

TEST_F(Timeline, TraceAndStepTraceAnnotateAndStepTraceMarksTheStep) {
  start_trace(path_.string());
  Tensor x = zeros({4});
  for (int step = 0; step < 3; ++step) {
    StepTrace train("train", step);
    const Trace forward("forward");
    x = x + 1.0;
  }
  EXPECT_FALSE(x.impl()->pending_ir());  // the last StepTrace marked the step
  wait_device_ops();
  (void)stop_trace();
  const TraceFile file = read_trace(path_);
  EXPECT_EQ(count(file, "forward"), 3);
  EXPECT_EQ(count(file, "train step 2"), 1);
  EXPECT_EQ(count(file, "execute"), 3);
}

TEST_F(Timeline, NothingIsRecordedWithoutATraceAndTraceFileRecordsTheSystemsLife) {
  run_steps(1);
  EXPECT_EQ(stop_trace(), 0u);
  EXPECT_FALSE(std::filesystem::exists(path_));
  config::set("AXLE_TRACE_FILE", path_.string());
  LazySystem::restart();
  run_steps(2);
  config::unset("AXLE_TRACE_FILE");
  LazySystem::restart();  // the old system writes its trace as it goes
  const TraceFile file = read_trace(path_);
  std::string spans;
  for (const Span& span : file.spans) spans += span.track + " " + span.name + "\n";
  EXPECT_EQ(count(file, "execute"), 4) << spans;
}

TEST_F(Timeline, ASecondStartIsRefused) {
  start_trace(path_.string());
  EXPECT_THROW(start_trace(path_.string()), std::logic_error);
  (void)stop_trace();
}

}  // namespace
}  // namespace axle
