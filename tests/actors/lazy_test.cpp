// The lazy core end to end: tracing, mark_step, the compile cache, asynchronous devices.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/engine/log.h"
#include "axle/graph/trace_context.h"
#include "tests/actors/testing_system.h"

namespace axle {
namespace {

class Lazy : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = &restart_on_testing_backend();
    clear_all();
  }
  TestingBackend* backend_ = nullptr;
};

int64_t count(const char* name) { return counter_value(name).value_or(0); }

Tensor from(std::vector<float> values, Shape shape) { return tensor(values, shape); }

TEST_F(Lazy, AddTwoTensorsAndReadTheResult) {
  Tensor a = from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from({10, 20, 30}, {3});
  Tensor c = a + b;
  mark_step();
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
}

TEST_F(Lazy, ReadingAValueExecutesItsPendingGraph) {
  Tensor a = from({1.5f}, {});
  Tensor b = a * 4.0;
  EXPECT_DOUBLE_EQ(b.item(), 6.0);
}

TEST_F(Lazy, ItemAsyncDeliversWithoutBlocking) {
  Tensor a = from({2, 3}, {2});
  Tensor s = sum(a * a);
  Future<double> value = s.item_async();
  EXPECT_DOUBLE_EQ(value.get(std::chrono::seconds(30)), 13.0);
}

TEST_F(Lazy, MarkStepReturnsWhileTheDeviceIsStillExecuting) {
  Tensor x = from({1, 2}, {2});
  backend_->hold();
  Tensor y = x + x;
  mark_step();  // returns although the device holds the execution
  ASSERT_TRUE(backend_->wait_until_held(1));
  EXPECT_TRUE(y.impl()->data()->pending());
  // Tracing the next step overlaps the held execution.
  Tensor z = y * 3.0;
  EXPECT_TRUE(z.impl()->pending_ir());
  backend_->release();
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{6, 12}));
}

TEST_F(Lazy, SecondStepOfTheSameGraphHitsTheCache) {
  Tensor w = from({1, 1, 1}, {3});
  for (int step = 0; step < 3; ++step) {
    w = w * 2.0 + 1.0;
    mark_step();
  }
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{15, 15, 15}));
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("CachedCompile"), 2);
  EXPECT_EQ(count("MarkStep"), 3);
}

TEST_F(Lazy, ChangingAScalarDoesNotRecompile) {
  Tensor w = from({1, 2}, {2});
  for (double lr : {0.5, 0.25, 0.125}) {
    w = w - w * lr;
    mark_step();
  }
  wait_device_ops();  // compiles run asynchronously; count once they are done
  EXPECT_EQ(count("UncachedCompile"), 1);
  const float expect = 1 * 0.5f * 0.75f * 0.875f;
  EXPECT_FLOAT_EQ(w.to_vector<float>()[0], expect);
}

TEST_F(Lazy, DifferentShapesCompileSeparately) {
  Tensor a = from({1, 2}, {2});
  Tensor b = from({1, 2, 3}, {3});
  Tensor c = a + 1.5;
  mark_step();
  Tensor d = b + 1.5;
  mark_step();
  wait_device_ops();
  EXPECT_EQ(count("UncachedCompile"), 2);
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{2.5, 3.5, 4.5}));
}

TEST_F(Lazy, TwoReplicasTracingTheSameGraphCompileItOnce) {
  auto replica = [](float base) {
    Tensor x = tensor(std::vector<float>{base, base}, Shape{2});
    Tensor y = exp(x) * 2.0 + x;
    mark_step();
    return y.to_vector<float>();
  };
  backend_->hold();  // holds both executions so both compiles are requested first
  std::vector<float> r1, r2;
  std::thread t1([&] { r1 = replica(0); });
  std::thread t2([&] { r2 = replica(1); });
  ASSERT_TRUE(backend_->wait_until_held(1));
  backend_->release();
  t1.join();
  t2.join();
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_FLOAT_EQ(r1[0], 2.0f);
  EXPECT_NEAR(r2[0], 2 * std::exp(1.0f) + 1, 1e-5);
}

TEST_F(Lazy, LiveTensorCountStaysFlatOverManySteps) {
  Tensor w = from({0, 0, 0, 0}, {4});
  Tensor g = from({1, 1, 1, 1}, {4});
  for (int step = 0; step < 100; ++step) {
    w = w - g * 0.5;
    mark_step();
  }
  wait_device_ops();
  const int64_t before = live_tensor_count();
  for (int step = 0; step < 10000; ++step) {
    w = w - g * 0.5;
    mark_step();
  }
  wait_device_ops();
  EXPECT_EQ(live_tensor_count(), before);
  EXPECT_FLOAT_EQ(w.to_vector<float>()[0], -0.5f * 10100);
}

TEST_F(Lazy, UnrelatedValueReadWaitsOnlyForItsOwnValue) {
  Tensor ready = from({7}, {1});
  Tensor x = from({1}, {1});
  wait_device_ops();
  backend_->hold();
  Tensor y = x + 1.0;
  mark_step();
  ASSERT_TRUE(backend_->wait_until_held(1));
  // The device holds y's execution; reading a ready tensor does not wait for it.
  EXPECT_FLOAT_EQ(ready.to_vector<float>()[0], 7.0f);
  backend_->release();
  EXPECT_FLOAT_EQ(y.to_vector<float>()[0], 2.0f);
}

TEST_F(Lazy, ShapeErrorNamesTheOpShapesAndLine) {
  Tensor a = from({1, 2, 3}, {3});
  Tensor b = from({1, 2}, {2});
  const int line = __LINE__ + 2;
  try {
    Tensor c = a + b;
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("add"), std::string::npos) << what;
    EXPECT_NE(what.find("f32[3]"), std::string::npos) << what;
    EXPECT_NE(what.find("f32[2]"), std::string::npos) << what;
    EXPECT_NE(what.find("lazy_test.cpp:" + std::to_string(line)), std::string::npos) << what;
  }
}

TEST_F(Lazy, WrongNumberOfHostValuesIsAnError) {
  EXPECT_THROW(from({1, 2, 3}, {2, 2}), ShapeError);
}

TEST_F(Lazy, UnknownDeviceIsAnError) { EXPECT_THROW(device(5), std::out_of_range); }

TEST_F(Lazy, EagerModeExecutesEachOpAsItIsTraced) {
  eager_mode(true);
  Tensor a = from({1, 2}, {2});
  Tensor b = a + 1.0;
  EXPECT_FALSE(b.impl()->pending_ir());
  eager_mode(false);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{2, 3}));
}

TEST_F(Lazy, CompileTracesOneGraphEvenInEagerMode) {
  eager_mode(true);
  Tensor a = from({1, 2}, {2});
  auto step = compile([&](const Tensor& x) { return x * 2.0 + 1.0; });
  const int64_t compiles_before = count("UncachedCompile");
  Tensor out = step(a);
  EXPECT_FALSE(out.impl()->pending_ir());
  wait_device_ops();
  EXPECT_EQ(count("UncachedCompile") - compiles_before, 1);
  eager_mode(false);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3, 5}));
}

TEST_F(Lazy, RunawayGraphIsCutAtTheNodeLimit) {
  config::set("AXLE_MAX_GRAPH_NODES", "100");
  LazySystem::restart();
  config::unset("AXLE_MAX_GRAPH_NODES");
  std::vector<std::string> warnings;
  std::mutex mutex;
  set_log_sink([&](LogLevel level, std::string_view line) {
    std::lock_guard lock(mutex);
    if (level == LogLevel::kWarning) warnings.emplace_back(line);
  });
  Tensor x = from({0}, {1});
  for (int i = 0; i < 250; ++i) x = x + 1.0;
  set_log_sink(nullptr);
  EXPECT_LT(TraceContext::current().nodes_since_step(), 100u);
  ASSERT_GE(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("lazy_test.cpp"), std::string::npos) << warnings[0];
  EXPECT_FLOAT_EQ(x.to_vector<float>()[0], 250.0f);
}

TEST_F(Lazy, MetricsRecordTheStep) {
  Tensor a = from({1, 2}, {2});
  Tensor b = a * a;
  mark_step();
  (void)b.to_vector<float>();
  for (const char* m : {"CompileTime", "ExecuteTime", "TransferToDeviceTime",
                        "TransferFromDeviceTime", "TraceTime"}) {
    EXPECT_TRUE(metric_data(m).has_value()) << m;
  }
  EXPECT_GE(count("xla::mul"), 1);
  EXPECT_GE(count("CreateTensor"), 2);
}

// AXLE_RUN_ON_HOST_BELOW_US: once a graph's steps are known to be short, they run on the thread
// that traces them (here given a bound no step reaches, so that slow builds keep to it too).
int64_t steps_run_on_host(const char* below_us) {
  config::set("AXLE_RUN_ON_HOST_BELOW_US", below_us);
  restart_on_testing_backend();
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  const int64_t before = count("StepsRunOnHost");
  Tensor x = from({1, 2, 3}, {3});
  for (int step = 0; step < 30; ++step) {
    x = x + 1.0;
    mark_step();
  }
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{31, 32, 33}));
  return count("StepsRunOnHost") - before;
}

// A step still goes to the device's thread while that thread has yet to let go of the device
// (on a loaded machine, often): most steps run on the tracing thread, not all.
TEST_F(Lazy, ShortStepsRunOnTheTracingThread) {
  EXPECT_GE(steps_run_on_host("1000000"), 10);
  EXPECT_EQ(steps_run_on_host("0"), 0);
}

TEST_F(Lazy, AnErrorInAStepRunOnTheTracingThreadReachesItsReader) {
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "1000000");
  restart_on_testing_backend();
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  const Tensor x = from({1, 2, 3}, {3});
  const auto pick = [&](int64_t i) {
    Tensor picked = index_select(x, 0, tensor(std::vector<int64_t>{0, i}, Shape{2})) * 2.0;
    mark_step();
    return picked;
  };
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(pick(2).to_vector<float>(), (std::vector<float>{2, 6}));
  }
  // The same graph, now with an index out of range, until a step of it ran on this thread.
  bool on_host = false;
  for (int attempt = 0; attempt < 20 && !on_host; ++attempt) {
    const int64_t before = count("StepsRunOnHost");
    Tensor bad = pick(7);
    on_host = count("StepsRunOnHost") > before;
    try {
      (void)bad.to_vector<float>();
      ADD_FAILURE() << "an index out of range was read";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("index_select"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(on_host);
  EXPECT_EQ(pick(1).to_vector<float>(), (std::vector<float>{2, 4}));
}

// torch.manual_seed: every device's stream starts over from the seed, as set_rng_state on each.
TEST(ManualSeed, SeedsEveryDeviceAsSetRngStateDoesForEach) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  const auto draw = [](Device d) { return randn({8}, kFloat32, d).to_vector<float>(); };
  manual_seed(7);
  const std::vector<float> first0 = draw(device(0)), first1 = draw(device(1));
  EXPECT_EQ(get_rng_state(device(0)), 7U);
  EXPECT_EQ(get_rng_state(device(1)), 7U);
  EXPECT_NE(draw(device(0)), first0);  // the stream moved on
  manual_seed(7);
  EXPECT_EQ(draw(device(0)), first0);
  EXPECT_EQ(draw(device(1)), first1);
  set_rng_state(7, device(1));
  EXPECT_EQ(draw(device(1)), first1);
  manual_seed(8);
  EXPECT_NE(draw(device(0)), first0);
}

}  // namespace
}  // namespace axle
