// PT_XLA_DEBUG_LEVEL (actors/compiler/debug_analysis.h): each compilation's analysis names its
// cause (a user mark_step, a value read before mark_step with the reading line, compile), the
// graph's inputs and outputs, and why it recompiled (a changed input shape, an extra op and where
// it was traced); level 2 adds an analysis per execution; level 0 prints nothing.
#include <gtest/gtest.h>

#include <string>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

class DebugAnalysis : public ::testing::Test {
 protected:
  void TearDown() override {
    config::unset("PT_XLA_DEBUG_LEVEL");
    config::unset("AXLE_METRICS_ANALYSIS_STEPS");
    LazySystem::restart();
  }
  static void level(int n) {
    config::set("PT_XLA_DEBUG_LEVEL", std::to_string(n));
    LazySystem::restart();
  }
  // What `fn` prints to stderr, once the devices (and so the compiler) are done.
  template <class F>
  static std::string printed(F&& fn) {
    CaptureStderr();
    fn();
    wait_device_ops();
    return GetCapturedStderr();
  }
  static int count(const std::string& text, const std::string& part) {
    int n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  }
};

// One MLP-like step on a batch of `rows` (data, as a loader's batch is), marked at one line for
// every call.
void step(int64_t rows, bool extra_op = false) {
  Tensor x = tensor(std::vector<float>(static_cast<std::size_t>(rows) * 8, 1.0f), {rows, 8});
  Tensor w = tensor(std::vector<float>(32, 0.5f), {8, 4});
  Tensor y = relu(matmul(x, w));
  if (extra_op) y = neg(y);
  mark_step();  // the line every call syncs from
}

TEST_F(DebugAnalysis, ACompilationTellsItsCauseGraphAndSourceLine) {
  level(1);
  const std::string text = printed([] { step(16); });
  EXPECT_EQ(count(text, "Compilation Analysis: Compilation Cause"), 1) << text;
  EXPECT_NE(text.find("Compilation Analysis:   user mark_step"), std::string::npos) << text;
  EXPECT_NE(text.find("Compilation Analysis:   Graph Hash: "), std::string::npos) << text;
  EXPECT_NE(text.find("Compilation Analysis:   Number of Graph Outputs: 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("debug_analysis_test.cpp:"), std::string::npos) << text;
  EXPECT_NE(text.find("Compilation Analysis:   none: the first graph synced from this line"),
            std::string::npos)
      << text;
  // 16 x 4 floats out.
  EXPECT_NE(text.find("Post Compilation Analysis: Graph output size: 0.000000 GB (256 bytes)"),
            std::string::npos)
      << text;
  // The same step again is a cache hit: nothing more.
  EXPECT_EQ(printed([] { step(16); }), "");
}

// Under SPMD the analysis names the devices, each collective the partitioner inserted and how
// each input and output is laid out.
TEST_F(DebugAnalysis, AnSpmdCompilationListsTheCollectivesItInserted) {
  config::set("PT_XLA_DEBUG_LEVEL", "1");
  LazySystem::restart({.cpu_devices = 4});
  use_spmd();
  const std::string text = printed([] {
    const Mesh mesh({0, 1, 2, 3}, {1, 4}, {"data", "model"});
    const Tensor x = tensor(std::vector<float>(8 * 16, 1.0f), {8, 16});
    const Tensor w = tensor(std::vector<float>(16 * 4, 0.5f), {16, 4});
    spmd::mark_sharding(x, mesh, {std::nullopt, "model"});
    spmd::mark_sharding(w, mesh, {"model", std::nullopt});
    const Tensor y = matmul(x, w);  // contracted over "model": one all_reduce
    mark_step();
    EXPECT_EQ(y.to_vector<float>(), std::vector<float>(8 * 4, 8.0f));
  });
  EXPECT_NE(text.find("Post Compilation Analysis: SPMD: one program for each of 4 devices"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1 collective inserted"), std::string::npos) << text;
  EXPECT_NE(text.find("Post Compilation Analysis:   all_reduce(f32[8,4]) -> f32[8,4]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("input 0 sharding {devices=[1,4]0,1,2,3}"), std::string::npos) << text;
  EXPECT_NE(text.find("output 0 sharding {replicated}"), std::string::npos) << text;
}

TEST_F(DebugAnalysis, AValueReadBeforeMarkStepIsNamedWithItsLine) {
  level(1);
  const std::string text = printed([] {
    Tensor x = ones({3}) * 2.0;
    (void)sum(x).item();  // the read that forces execution
  });
  EXPECT_NE(text.find("most likely user code trying to access a tensor value before mark_step"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("debug_analysis_test.cpp:"), std::string::npos) << text;
}

TEST_F(DebugAnalysis, CompileIsNamedAsTheCause) {
  level(1);
  const std::string text = printed([] {
    auto doubled = compile([](const Tensor& x) { return x * 2.0; });
    (void)doubled(ones({5}));
  });
  EXPECT_NE(text.find("Compilation Analysis:   axle::compile"), std::string::npos) << text;
}

TEST_F(DebugAnalysis, ARecompilationNamesTheInputWhoseShapeChanged) {
  level(1);
  const std::string text = printed([] {
    step(128);
    step(96);  // the last, smaller batch
  });
  EXPECT_EQ(count(text, "Compilation Analysis: Compilation Cause"), 2) << text;
  EXPECT_NE(text.find("input 0 is f32[96,8], was f32[128,8] in the graph last compiled from this "
                      "line"),
            std::string::npos)
      << text;
}

TEST_F(DebugAnalysis, ARecompilationNamesAnExtraOpAndWhereItWasTraced) {
  level(1);
  const std::string text = printed([] {
    step(4);
    step(4, /*extra_op=*/true);
  });
  EXPECT_NE(text.find("an op more than the graph last compiled from this line: neg f32[4,4] (at "),
            std::string::npos)
      << text;
}

TEST_F(DebugAnalysis, ARecompilationShowsAShardingAnnotationInXlaText) {
  level(1);
  const spmd::Mesh mesh({0, 1}, {2, 1}, {"data", "model"});
  const std::string text = printed([&] {
    for (bool annotate : {false, true}) {
      Tensor x = tensor(std::vector<float>(32, 1.0f), {4, 8});
      Tensor y = relu(x);
      if (annotate) spmd::mark_sharding(y, mesh, {"data", std::nullopt});
      mark_step();  // one line for both graphs
    }
  });
  EXPECT_NE(text.find("custom_sharding f32[4,8] sharding={devices=[2,1]0,1}"), std::string::npos)
      << text;
}

TEST_F(DebugAnalysis, LevelTwoAnalysesEveryExecutionAndLevelZeroNothing) {
  level(2);
  const std::string two = printed([] {
    step(2);
    step(2);
  });
  EXPECT_EQ(count(two, "Execution Analysis: Execution Cause"), 2) << two;
  EXPECT_EQ(count(two, "Compilation Analysis: Compilation Cause"), 1) << two;
  level(0);
  EXPECT_EQ(printed([] {
              step(3);
              step(5);
            }),
            "");
}

TEST_F(DebugAnalysis, MetricsAnalysisCallsOutFrequentCompilationsAndValueReads) {
  config::set("AXLE_METRICS_ANALYSIS_STEPS", "10");
  clear_all();
  level(1);
  // Ten steps, each with a new batch size and a loss read on the host.
  const std::string text = printed([] {
    for (int64_t rows = 1; rows <= 10; ++rows) {
      Tensor x = tensor(std::vector<float>(static_cast<std::size_t>(rows) * 2, 1.0f), {rows, 2});
      (void)sum(x * 3.0).item();
      mark_step();
    }
  });
  EXPECT_NE(text.find("Metrics Analysis: CompileTime too frequent: 10 counts during 10 steps"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Metrics Analysis: TransferFromDeviceTime too frequent: "), std::string::npos)
      << text;
}

TEST_F(DebugAnalysis, MetricsAnalysisIsQuietForASteadyLoop) {
  config::set("AXLE_METRICS_ANALYSIS_STEPS", "10");
  clear_all();
  level(1);
  Tensor w = tensor(std::vector<float>(4, 1.0f), {4});
  const std::string text = printed([&] {
    for (int i = 0; i < 30; ++i) {
      w = w * 0.5 + 1.0;
      mark_step();
    }
  });
  EXPECT_EQ(text.find("Metrics Analysis:"), std::string::npos) << text;
}

}  // namespace
}  // namespace axle
