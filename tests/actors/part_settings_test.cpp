// Tests the settings groups the parts above engine declare beside their code (graph's,
// backends', the compiler's, the collectives', the lazy system's): defaults, parsing, and bad
// values named. engine's own are tests/engine/config_test.cpp's.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "axle/actors/compiler/compiler_settings.h"
#include "axle/actors/host/lazy_settings.h"
#include "axle/actors/runtime/collective_settings.h"
#include "axle/backends/device_settings.h"
#include "axle/engine/config.h"
#include "axle/engine/cores.h"
#include "axle/graph/graph_settings.h"
#include "tests/settings_fixture.h"

namespace axle {
namespace {

// Every variable of the groups read here.
// clang-format off
constexpr std::array<const char*, 30> kVariables = {
    "XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_NO_SPECIAL_SCALARS",
    "XLA_IR_DEBUG",
    "PJRT_DEVICE", "CPU_NUM_DEVICES", "AXLE_CPU_INTRA_OP_THREADS", "AXLE_CPU_BLOCK_CACHE_MB",
    "AXLE_CPU_ISA", "AXLE_DEVICE_MEMORY_LIMIT",
    "XLA_PERSISTENT_CACHE_PATH", "XLA_PERSISTENT_CACHE_READ_ONLY",
    "XLA_COMPILATION_CACHE_SIZE", "AXLE_MAX_GRAPH_NODES", "XLA_USE_EAGER_DEBUG_MODE",
    "XLA_SYNC_WAIT", "AXLE_MAX_STEPS_IN_FLIGHT", "AXLE_RUN_ON_HOST_BELOW_US",
    "XLA_MAX_ASYNC_QUEUE", "XLA_ENABLE_PARAM_ALIASING", "XLA_SAVE_TENSORS_FILE",
    "XLA_SAVE_TENSORS_FMT", "AXLE_TRACE_FILE",
    "PT_XLA_DEBUG_LEVEL", "AXLE_METRICS_ANALYSIS_STEPS", "XLA_METRICS_FILE",
    "XLA_FLAGS", "XLA_SAVE_HLO_FILE",
    "AXLE_COLLECTIVE_TIMEOUT", "OMPI_COMM_WORLD_LOCAL_SIZE"};
// clang-format on

// Each group as its part reads it.
struct PartSettings {
  config::DTypeSettings dtype;
  config::IrDumpSettings ir_dump;
  config::DeviceSettings devices;
  config::PersistentCacheSettings persistent_cache;
  config::LazySettings lazy;
  config::AnalysisSettings analysis;
  config::ProgramDumpSettings program_dump;
  config::CollectiveSettings collectives;
};

PartSettings read_part_settings() {
  return {.dtype = config::read_dtype_settings(),
          .ir_dump = config::read_ir_dump_settings(),
          .devices = config::read_device_settings(),
          .persistent_cache = config::read_persistent_cache_settings(),
          .lazy = config::read_lazy_settings(),
          .analysis = config::read_analysis_settings(),
          .program_dump = config::read_program_dump_settings(),
          .collectives = config::read_collective_settings()};
}

class PartSettingsTest : public testing::WithoutVariables {
 protected:
  PartSettingsTest() : WithoutVariables(kVariables) {}
};

// Expects read_part_settings() to throw ConfigError naming `name` and showing `value`.
void expect_named_error(const char* name, const std::string& value) {
  testing::expect_named_error(name, value, [] { return read_part_settings(); });
}

TEST_F(PartSettingsTest, DefaultsAreTheDocumentedOnes) {
  using namespace std::chrono_literals;
  const PartSettings s = read_part_settings();
  EXPECT_FALSE(s.dtype.use_bf16);
  EXPECT_FALSE(s.dtype.downcast_bf16);
  EXPECT_FALSE(s.dtype.no_special_scalars);
  EXPECT_FALSE(s.ir_dump.source_lines);
  EXPECT_EQ(s.devices.pjrt_device, "CPU");
  EXPECT_EQ(s.devices.cpu_num_devices, 1);
  EXPECT_EQ(s.devices.cpu_intra_op_threads, 0);  // the cores shared among the devices
  EXPECT_EQ(s.devices.cpu_block_cache_mb, 1024);
  EXPECT_EQ(s.devices.cpu_isa, "auto");
  EXPECT_EQ(s.devices.device_memory_limit, 0);
  EXPECT_EQ(s.persistent_cache.path, "");
  EXPECT_FALSE(s.persistent_cache.read_only);
  EXPECT_EQ(s.lazy.compilation_cache_size, 2048);
  EXPECT_EQ(s.lazy.max_graph_nodes, 1'000'000);
  EXPECT_FALSE(s.lazy.eager_debug_mode);
  EXPECT_FALSE(s.lazy.sync_wait);
  EXPECT_EQ(s.lazy.max_steps_in_flight, 2);
  EXPECT_EQ(s.lazy.run_on_host_below_us, 20);
  EXPECT_EQ(s.lazy.max_async_closures, 100);
  EXPECT_TRUE(s.lazy.param_aliasing);
  EXPECT_FALSE(s.lazy.check_finite);
  EXPECT_FALSE(s.lazy.use_spmd);
  EXPECT_EQ(s.lazy.save_tensors_file, "");
  EXPECT_EQ(s.lazy.save_tensors_format, config::SaveTensorsFormat::kText);
  EXPECT_EQ(s.lazy.trace_file, "");
  EXPECT_EQ(s.analysis.debug_level, 0);
  EXPECT_EQ(s.analysis.metrics_analysis_steps, 100);
  EXPECT_EQ(s.analysis.metrics_file, "");
  EXPECT_EQ(s.program_dump.dump_to, "");
  EXPECT_EQ(s.program_dump.save_hlo_file, "");
  EXPECT_EQ(s.collectives.timeout, 300s);
}

TEST_F(PartSettingsTest, CodeOverridesTheEnvironment) {
  setenv("XLA_COMPILATION_CACHE_SIZE", "5", 1);
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 5);
  config::set("XLA_COMPILATION_CACHE_SIZE", "7");
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 7);
  config::unset("XLA_COMPILATION_CACHE_SIZE");
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 5);
  unsetenv("XLA_COMPILATION_CACHE_SIZE");
}

// Short steps run on their hosts' threads either way (there they wait at meetings yielding their
// core, as Open MPI's ranks do).
TEST_F(PartSettingsTest, ShortStepsRunOnTheHostsThreadsWhetherOrNotProcessesOutnumberCores) {
  config::set("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(usable_cores()));
  EXPECT_EQ(config::read_lazy_settings().run_on_host_below_us, 20);
  config::set("OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(usable_cores() + 1));
  EXPECT_EQ(config::read_lazy_settings().run_on_host_below_us, 20);
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "5");
  EXPECT_EQ(config::read_lazy_settings().run_on_host_below_us, 5);
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "-1");
  EXPECT_THROW((void)config::read_lazy_settings(), ConfigError);
  config::unset("OMPI_COMM_WORLD_LOCAL_SIZE");
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  EXPECT_EQ(config::read_lazy_settings().run_on_host_below_us, 20);
}

TEST_F(PartSettingsTest, ValuesOfEveryKindAreParsed) {
  using namespace std::chrono_literals;
  config::set("XLA_USE_BF16", "yes");
  config::set("XLA_IR_DEBUG", "1");
  config::set("PJRT_DEVICE", "cpu");
  config::set("CPU_NUM_DEVICES", "4");
  config::set("AXLE_CPU_INTRA_OP_THREADS", " 3 ");
  config::set("AXLE_DEVICE_MEMORY_LIMIT", "1048576");
  config::set("XLA_PERSISTENT_CACHE_PATH", "/tmp/cache");
  config::set("XLA_ENABLE_PARAM_ALIASING", "0");
  config::set("XLA_SAVE_TENSORS_FMT", "hlo");
  config::set("PT_XLA_DEBUG_LEVEL", "2");
  config::set("XLA_FLAGS", "--xla_other=1 --xla_dump_to=/tmp/dumps --xla_more");
  config::set("AXLE_COLLECTIVE_TIMEOUT", "0.25");
  const PartSettings s = read_part_settings();
  EXPECT_TRUE(s.dtype.use_bf16);
  EXPECT_TRUE(s.ir_dump.source_lines);
  EXPECT_EQ(s.devices.pjrt_device, "cpu");
  EXPECT_EQ(s.devices.cpu_num_devices, 4);
  EXPECT_EQ(s.devices.cpu_intra_op_threads, 3);
  EXPECT_EQ(s.devices.device_memory_limit, 1048576);
  EXPECT_EQ(s.persistent_cache.path, "/tmp/cache");
  EXPECT_FALSE(s.lazy.param_aliasing);
  EXPECT_EQ(s.lazy.save_tensors_format, config::SaveTensorsFormat::kHlo);
  EXPECT_EQ(s.analysis.debug_level, 2);
  EXPECT_EQ(s.program_dump.dump_to, "/tmp/dumps");
  EXPECT_EQ(s.collectives.timeout, 250ms);
}

TEST_F(PartSettingsTest, ABadValueIsAConfigErrorNamingTheVariableAndTheValue) {
  expect_named_error("XLA_USE_BF16", "maybe");
  expect_named_error("PJRT_DEVICE", "TPU");
  expect_named_error("CPU_NUM_DEVICES", "0");
  expect_named_error("CPU_NUM_DEVICES", "abc");
  expect_named_error("CPU_NUM_DEVICES", "4294967296");
  expect_named_error("AXLE_CPU_INTRA_OP_THREADS", "0");
  expect_named_error("AXLE_CPU_INTRA_OP_THREADS", "257");
  expect_named_error("AXLE_DEVICE_MEMORY_LIMIT", "-1");
  expect_named_error("XLA_MAX_ASYNC_QUEUE", "-1");
  expect_named_error("AXLE_MAX_STEPS_IN_FLIGHT", "-2");
  expect_named_error("XLA_SAVE_TENSORS_FMT", "png");
  expect_named_error("PT_XLA_DEBUG_LEVEL", "1.5");
  expect_named_error("PT_XLA_DEBUG_LEVEL", "-1");
  expect_named_error("AXLE_COLLECTIVE_TIMEOUT", "0");
  expect_named_error("AXLE_COLLECTIVE_TIMEOUT", "1e9");
}

}  // namespace
}  // namespace axle
