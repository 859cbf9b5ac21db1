// The lazy core's settings and device queries: PJRT_DEVICE / CPU_NUM_DEVICES, XLA_USE_BF16,
// XLA_SYNC_WAIT, XLA_SAVE_TENSORS_FILE, XLA_COMPILATION_CACHE_SIZE, random seeds, memory info.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/op_util.h"
#include "tests/actors/testing_system.h"

namespace axle {
namespace {

class LazyConfig : public ::testing::Test {
 protected:
  void SetUp() override { clear_all(); }
  void TearDown() override {
    for (const char* name : {"XLA_USE_BF16", "XLA_SYNC_WAIT", "XLA_SAVE_TENSORS_FILE",
                             "XLA_SAVE_TENSORS_FMT", "XLA_COMPILATION_CACHE_SIZE", "PJRT_DEVICE",
                             "AXLE_DEVICE_MEMORY_LIMIT", "AXLE_CHECK_FINITE"}) {
      config::unset(name);
    }
    ops::reload_dtype_config();
    LazySystem::restart();
  }
};

int64_t count(const char* name) { return counter_value(name).value_or(0); }

TEST_F(LazyConfig, CpuDevicesAreCountedAndNamed) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 3});
  EXPECT_EQ(device_count(), 3);
  ASSERT_EQ(devices().size(), 3u);
  EXPECT_EQ(devices()[2].ordinal, 2);
  EXPECT_EQ(xla_device_hw(device(1)), "CPU");
  EXPECT_EQ(device(2).to_string(), "xla:2");
  EXPECT_THROW(device(3), std::out_of_range);
}

TEST_F(LazyConfig, EachDeviceComputesItsOwnTensors) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  Tensor a = tensor(std::vector<float>{1, 2}, Shape{2}, device(0));
  Tensor b = tensor(std::vector<float>{10, 20}, Shape{2}, device(1));
  Tensor c = a * 2.0;
  Tensor d = b * 2.0;
  mark_step();
  EXPECT_EQ(c.device().ordinal, 0);
  EXPECT_EQ(d.device().ordinal, 1);
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{20, 40}));
  EXPECT_THROW(a + b, ShapeError);  // operands on different devices
}

TEST_F(LazyConfig, AStepOverTheDeviceMemoryLimitFailsBeforeItRunsAndASmallerOneStillRuns) {
  constexpr int64_t kLimit = 1 << 20;
  config::set("AXLE_DEVICE_MEMORY_LIMIT", std::to_string(kLimit));
  LazySystem::restart();
  Tensor small = full({16, 16}, 2.0, DType::kFloat32, device(0));
  mark_step();  // small is device data from here on
  Tensor big = full({512, 512}, 1.0, DType::kFloat32, device(0)) * sum(small);  // 1 MiB and more
  const int line = __LINE__ + 1;
  mark_step();
  try {
    (void)big.to_vector<float>();
    FAIL() << "a step over the limit ran";
  } catch (const DeviceMemoryError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find(fmt::format("lazy_config_test.cpp:{} needs ", line)), std::string::npos)
        << text;
    EXPECT_NE(text.find(fmt::format("over AXLE_DEVICE_MEMORY_LIMIT={}", kLimit)), std::string::npos)
        << text;
    // The bytes it names: at least the 1 MiB result.
    const std::size_t at = text.find(" needs ") + 7;
    EXPECT_GT(std::stoll(text.substr(at)), kLimit) << text;
  }
  // The device and the tensors the failed step read are untouched: a smaller step runs.
  Tensor smaller = small * 3.0;
  mark_step();
  EXPECT_EQ(smaller.to_vector<float>(), std::vector<float>(256, 6.0f));
  EXPECT_LE(get_memory_info(device(0)).bytes_in_use, static_cast<uint64_t>(kLimit));
}

TEST_F(LazyConfig, DeviceMemoryLimitsThatAreNotByteCountsAreConfigErrors) {
  for (const char* bad : {"-1", "abc", "1.5"}) {
    config::set("AXLE_DEVICE_MEMORY_LIMIT", bad);
    try {
      LazySystem::restart();
      ADD_FAILURE() << "AXLE_DEVICE_MEMORY_LIMIT=" << bad << " was accepted";
    } catch (const ConfigError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("AXLE_DEVICE_MEMORY_LIMIT="), std::string::npos) << text;
      EXPECT_NE(text.find(bad), std::string::npos) << text;
    }
  }
  config::unset("AXLE_DEVICE_MEMORY_LIMIT");
}

TEST_F(LazyConfig, CheckFiniteNamesTheFirstOpThatMadeANanAndItsLine) {
  config::set("AXLE_CHECK_FINITE", "1");
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1, 2, -3, 4}, Shape{4});
  Tensor fine = exp(x) * 2.0;
  mark_step();  // finite: nothing to say
  EXPECT_NEAR(fine.to_vector<float>()[0], 2 * std::exp(1.0f), 1e-5);

  Tensor shifted = x + 1.0;
  const int line = __LINE__ + 1;
  Tensor bad = log(shifted * 0.5);  // log of -1 at element 2: NaN
  Tensor worse = bad * 3.0 + sqrt(abs(x));
  try {
    mark_step();
    FAIL() << "a NaN went unnoticed";
  } catch (const NonFiniteError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("produced NaN"), std::string::npos) << text;
    EXPECT_NE(text.find(fmt::format("the first op to produce NaN is log f32[4], traced at {}:{}",
                                    __FILE__, line)),
              std::string::npos)
        << text;
  }
}

TEST_F(LazyConfig, CheckFiniteNamesAnInputThatWasAlreadyNotFinite) {
  config::set("AXLE_CHECK_FINITE", "1");
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1, std::numeric_limits<float>::infinity()}, Shape{2});
  Tensor y = x * 2.0;
  try {
    mark_step();
    FAIL() << "an infinity went unnoticed";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("already held infinity"), std::string::npos) << e.what();
  }
}

TEST_F(LazyConfig, UnknownPjrtDeviceIsAConfigError) {
  config::set("PJRT_DEVICE", "TPU");
  EXPECT_THROW(LazySystem::restart(), ConfigError);
  config::unset("PJRT_DEVICE");
}

TEST_F(LazyConfig, Bf16StorageKeepsTheLogicalDtype) {
  config::set("XLA_USE_BF16", "1");
  ops::reload_dtype_config();
  LazySystem::restart();
  Tensor a = tensor(std::vector<float>{1.0f, 1.00390625f, 3.14159f}, Shape{3});
  Tensor b = a * 1.0;
  EXPECT_EQ(b.dtype(), DType::kFloat32);                 // what the user sees
  EXPECT_EQ(b.impl()->ir()->dtype(), DType::kBFloat16);  // what the device holds
  std::vector<float> v = b.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 1.0f);  // 1 + 2^-8 is not representable in bf16 (8 bits of mantissa)
  EXPECT_NEAR(v[2], 3.14159f, 0.02f);
  EXPECT_EQ(b.cpu().dtype, DType::kFloat32);
}

TEST_F(LazyConfig, SyncWaitMakesMarkStepWaitForTheDevice) {
  config::set("XLA_SYNC_WAIT", "1");
  LazySystem::restart();
  Tensor a = tensor(std::vector<float>{1, 2}, Shape{2});
  Tensor b = exp(a);
  mark_step();
  EXPECT_FALSE(b.impl()->data()->pending());
  config::unset("XLA_SYNC_WAIT");
  TestingBackend& backend = restart_on_testing_backend();
  Tensor a2 = tensor(std::vector<float>{1, 2}, Shape{2});
  Tensor c = exp(a2);
  backend.hold();
  mark_step();
  EXPECT_TRUE(c.impl()->data()->pending());  // without it, mark_step does not wait
  backend.release();
}

TEST_F(LazyConfig, SavedTensorsFileGetsEachExecutedGraph) {
  char path[] = "/tmp/axle_save_tensorsXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  config::set("XLA_SAVE_TENSORS_FILE", path);
  config::set("XLA_SAVE_TENSORS_FMT", "text");
  LazySystem::restart();
  Tensor a = tensor(std::vector<float>{1, 2}, Shape{2});
  Tensor b = relu(a - 1.5);
  mark_step();
  Tensor c = b + b;
  mark_step();
  wait_device_ops();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  const std::string saved = text.str();
  EXPECT_NE(saved.find("[mark_step]"), std::string::npos) << saved;
  EXPECT_NE(saved.find("relu"), std::string::npos) << saved;
  EXPECT_NE(saved.find("add"), std::string::npos) << saved;
}

TEST_F(LazyConfig, BadSaveFormatIsAConfigError) {
  config::set("XLA_SAVE_TENSORS_FMT", "png");
  EXPECT_THROW(LazySystem::restart(), ConfigError);
}

TEST_F(LazyConfig, CompileCacheEvictsTheLeastRecentlyUsed) {
  config::set("XLA_COMPILATION_CACHE_SIZE", "2");
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1, 2}, Shape{2});
  auto run = [&](int which) {
    Tensor y = which == 0 ? x + 1.5 : which == 1 ? x * 2.5 : x - 3.5;
    mark_step();
    wait_device_ops();
  };
  run(0);
  run(1);
  run(2);  // evicts graph 0
  EXPECT_EQ(LazySystem::get().cache().size(), 2u);
  run(0);  // compiles again
  EXPECT_EQ(count("UncachedCompile"), 4);
  run(2);  // still cached
  EXPECT_EQ(count("UncachedCompile"), 4);
}

TEST_F(LazyConfig, SameSeedGivesTheSameNumbersWhateverTheDeviceCount) {
  auto draw = [](int devices, int on) {
    LazySystem::restart(LazySystemOptions{.cpu_devices = devices});
    set_rng_state(1234, device(on));
    Tensor r = randn({64}, DType::kFloat32, device(on));
    return r.to_vector<float>();
  };
  const std::vector<float> one = draw(1, 0);
  EXPECT_EQ(draw(1, 0), one);
  EXPECT_EQ(draw(3, 2), one);
  LazySystem::restart();
  set_rng_state(99);
  EXPECT_EQ(get_rng_state(), 99u);
  EXPECT_NE(randn({64}).to_vector<float>(), one);
}

TEST_F(LazyConfig, MemoryInfoTracksDeviceBuffers) {
  LazySystem::restart();
  const MemoryInfo before = get_memory_info(device(0));
  Tensor big = tensor(std::vector<float>(1 << 16, 1.0f), Shape{1 << 16});
  wait_device_ops();
  const MemoryInfo during = get_memory_info(device(0));
  EXPECT_GE(during.bytes_in_use, before.bytes_in_use + (1u << 18));
  EXPECT_GE(during.peak_bytes, during.bytes_in_use);
  big = Tensor();
  EXPECT_LT(get_memory_info(device(0)).bytes_in_use, during.bytes_in_use);
}

TEST_F(LazyConfig, ExecutionErrorsReachTheReaderWithTheKernelName) {
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1, 2, 3}, Shape{3});
  Tensor index = tensor(std::vector<int64_t>{0, 7}, Shape{2});
  Tensor picked = index_select(x, 0, index);  // 7 is out of range: found only when it runs
  Tensor later = picked * 2.0;
  mark_step();
  try {
    (void)later.to_vector<float>();
    FAIL() << "expected the execution error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("index_select"), std::string::npos) << e.what();
  }
  // The device survives and runs the next step.
  Tensor ok = x + 1.0;
  EXPECT_EQ(ok.to_vector<float>(), (std::vector<float>{2, 3, 4}));
}

TEST_F(LazyConfig, StepScopeMarksTheStepWhenItEnds) {
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1}, Shape{1});
  Tensor y;
  {
    StepScope step;
    y = x * 3.0;
    EXPECT_TRUE(y.impl()->pending_ir());
  }
  EXPECT_FALSE(y.impl()->pending_ir());
  EXPECT_EQ(count("MarkStep"), 1);
  EXPECT_FLOAT_EQ(y.item<float>(), 3.0f);
}

TEST_F(LazyConfig, PrintingShowsValuesDeviceAndDtype) {
  LazySystem::restart();
  Tensor x = tensor(std::vector<int64_t>{1, 2, 3, 4}, Shape{2, 2});
  EXPECT_EQ(x.to_string(), "tensor([[1, 2], [3, 4]], device='xla:0', dtype=s64)");
}

}  // namespace
}  // namespace axle
