// Tests engine/config.h: the lookup (code over environment, parsing) and the settings table
// (defaults, overrides, bad values named).
#include "axle/engine/config.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "axle/engine/cores.h"

namespace axle {
namespace {

constexpr const char* kName = "AXLE_CONFIG_TEST_VALUE";

// Leaves neither environment nor overrides behind, whatever the test set.
class Config : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }

  static void clear() {
    unsetenv(kName);
    config::unset(kName);
  }
};

// Expects `read` to throw ConfigError whose message names kName and shows `value` quoted.
template <typename Read>
void expect_config_error(Read read, const std::string& value) {
  config::set(kName, value);
  try {
    read();
    ADD_FAILURE() << "expected ConfigError for " << kName << "='" << value << "'";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(kName), std::string::npos) << message;
    EXPECT_NE(message.find("'" + value + "'"), std::string::npos) << message;
  }
}

TEST_F(Config, SetOverridesEnvironment) {
  setenv(kName, "from-env", 1);
  EXPECT_EQ(config::get(kName), "from-env");
  config::set(kName, "from-code");
  EXPECT_EQ(config::get(kName), "from-code");
}

TEST_F(Config, UnsetRestoresEnvironment) {
  setenv(kName, "from-env", 1);
  config::set(kName, "from-code");
  config::unset(kName);
  EXPECT_EQ(config::get(kName), "from-env");
}

TEST_F(Config, GetIsEmptyWhenNeitherSetNorInEnvironment) {
  EXPECT_EQ(config::get(kName), std::nullopt);
}

TEST_F(Config, FallbacksApplyWhenUnset) {
  EXPECT_EQ(config::get_int(kName, 7), 7);
  EXPECT_EQ(config::get_double(kName, 0.5), 0.5);
  EXPECT_TRUE(config::get_bool(kName, true));
  EXPECT_EQ(config::get_string(kName, "fallback"), "fallback");
}

TEST_F(Config, BlankValueCountsAsUnsetForNumbersAndBooleans) {
  setenv(kName, "  ", 1);
  EXPECT_EQ(config::get_int(kName, 7), 7);
  EXPECT_EQ(config::get_double(kName, 0.5), 0.5);
  EXPECT_FALSE(config::get_bool(kName, false));
}

TEST_F(Config, GetIntParsesSignedAndPaddedIntegers) {
  setenv(kName, " -42 ", 1);
  EXPECT_EQ(config::get_int(kName, 0), -42);
  config::set(kName, "+7");
  EXPECT_EQ(config::get_int(kName, 0), 7);
  config::set(kName, "9223372036854775807");
  EXPECT_EQ(config::get_int(kName, 0), INT64_MAX);
}

TEST_F(Config, GetIntRejectsMalformedNamingVariableAndValue) {
  for (const char* value : {"12abc", "1.5", "ten", "+-3", "99999999999999999999"}) {
    expect_config_error([] { (void)config::get_int(kName, 0); }, value);
  }
}

TEST_F(Config, GetDoubleParsesDecimalsAndExponents) {
  setenv(kName, " -0.25 ", 1);
  EXPECT_EQ(config::get_double(kName, 0), -0.25);
  config::set(kName, "1e-3");
  EXPECT_EQ(config::get_double(kName, 0), 1e-3);
  config::set(kName, "+3");
  EXPECT_EQ(config::get_double(kName, 0), 3.0);
}

TEST_F(Config, GetDoubleRejectsMalformedNamingVariableAndValue) {
  for (const char* value : {"abc", "1.5x", "1,5", "--1"}) {
    expect_config_error([] { (void)config::get_double(kName, 0); }, value);
  }
}

TEST_F(Config, GetBoolParsesEverySpellingInAnyCase) {
  for (const char* yes : {"1", "true", "Yes", " ON "}) {
    config::set(kName, yes);
    EXPECT_TRUE(config::get_bool(kName, false)) << yes;
  }
  for (const char* no : {"0", "FALSE", "no", "Off"}) {
    config::set(kName, no);
    EXPECT_FALSE(config::get_bool(kName, true)) << no;
  }
}

TEST_F(Config, GetBoolRejectsMalformedNamingVariableAndValue) {
  for (const char* value : {"maybe", "2", "y"}) {
    expect_config_error([] { (void)config::get_bool(kName, false); }, value);
  }
}

TEST_F(Config, GetStringReturnsValueVerbatim) {
  config::set(kName, " spaced value ");
  EXPECT_EQ(config::get_string(kName, "fallback"), " spaced value ");
}

// Every variable of engine's settings (README.md's table also lists the parts' own groups).
// clang-format off
constexpr std::array<const char*, 30> kVariables = {
    "AXLE_THREADS", "AXLE_SPIN_US", "AXLE_SHUTDOWN_TIMEOUT_MS",
    "AXLE_LOG_LEVEL", "AXLE_VLOG_LEVEL", "AXLE_VMODULE",
    "XLA_USE_BF16", "XLA_DOWNCAST_BF16", "XLA_NO_SPECIAL_SCALARS",
    "XLA_IR_DEBUG",
    "PJRT_DEVICE", "CPU_NUM_DEVICES", "AXLE_CPU_INTRA_OP_THREADS", "AXLE_CPU_BLOCK_CACHE_MB",
    "XLA_PERSISTENT_CACHE_PATH", "XLA_PERSISTENT_CACHE_READ_ONLY",
    "XLA_COMPILATION_CACHE_SIZE", "AXLE_MAX_GRAPH_NODES", "XLA_USE_EAGER_DEBUG_MODE",
    "XLA_SYNC_WAIT", "XLA_ENABLE_PARAM_ALIASING", "XLA_SAVE_TENSORS_FILE", "XLA_SAVE_TENSORS_FMT",
    "AXLE_TRACE_FILE",
    "PT_XLA_DEBUG_LEVEL", "AXLE_METRICS_ANALYSIS_STEPS", "XLA_METRICS_FILE",
    "XLA_FLAGS", "XLA_SAVE_HLO_FILE",
    "AXLE_COLLECTIVE_TIMEOUT"};
// clang-format on

// Runs each test with none of the table's variables set, in code or in the environment; the
// environment's values come back afterwards.
class Settings : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      unsetenv(name);
      config::unset(name);
    }
  }
  void TearDown() override {
    for (const char* name : kVariables) config::unset(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

// Expects read_settings() to throw ConfigError naming `name` and showing `value`.
void expect_named_error(const char* name, const std::string& value) {
  config::set(name, value);
  try {
    (void)config::read_settings();
    ADD_FAILURE() << "expected ConfigError for " << name << "=" << value;
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find(value), std::string::npos) << message;
  }
  config::unset(name);
}

TEST_F(Settings, DefaultsAreTheDocumentedOnes) {
  using namespace std::chrono_literals;
  const config::Settings s = config::read_settings();
  EXPECT_EQ(s.runtime.threads, 0);
  EXPECT_EQ(s.runtime.spin, 50us);
  EXPECT_EQ(s.runtime.shutdown_timeout, 10000ms);
  EXPECT_EQ(s.log.min_level, LogLevel::kWarning);
  EXPECT_EQ(s.log.vlog_level, 0);
  EXPECT_TRUE(s.log.vmodule.empty());
  EXPECT_FALSE(s.dtype.use_bf16);
  EXPECT_FALSE(s.dtype.downcast_bf16);
  EXPECT_FALSE(s.dtype.no_special_scalars);
  EXPECT_FALSE(s.ir_dump.source_lines);
  EXPECT_EQ(s.devices.pjrt_device, "CPU");
  EXPECT_EQ(s.devices.cpu_num_devices, 1);
  EXPECT_EQ(s.devices.cpu_intra_op_threads, 0);  // the cores shared among the devices
  EXPECT_EQ(s.devices.cpu_block_cache_mb, 1024);
  EXPECT_EQ(s.persistent_cache.path, "");
  EXPECT_FALSE(s.persistent_cache.read_only);
  EXPECT_EQ(s.lazy.compilation_cache_size, 2048);
  EXPECT_EQ(s.lazy.max_graph_nodes, 1'000'000);
  EXPECT_FALSE(s.lazy.eager_debug_mode);
  EXPECT_FALSE(s.lazy.sync_wait);
  EXPECT_EQ(s.lazy.max_async_closures, 100);
  EXPECT_TRUE(s.lazy.param_aliasing);
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

TEST_F(Settings, CodeOverridesTheEnvironment) {
  setenv("XLA_COMPILATION_CACHE_SIZE", "5", 1);
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 5);
  config::set("XLA_COMPILATION_CACHE_SIZE", "7");
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 7);
  config::unset("XLA_COMPILATION_CACHE_SIZE");
  EXPECT_EQ(config::read_lazy_settings().compilation_cache_size, 5);
  unsetenv("XLA_COMPILATION_CACHE_SIZE");
}

// mpirun's OMPI_COMM_WORLD_LOCAL_SIZE: with more processes on the host than cores, threads do
// not spin (the default only; AXLE_SPIN_US still decides when set).
TEST_F(Settings, ThreadsDoNotSpinWhenMoreProcessesShareTheHostThanItHasCores) {
  using namespace std::chrono_literals;
  const std::string crowded = std::to_string(usable_cores() + 1);
  const std::string fitting = std::to_string(usable_cores());
  config::set("OMPI_COMM_WORLD_LOCAL_SIZE", fitting);
  EXPECT_EQ(config::read_runtime_settings().spin, 50us);
  config::set("OMPI_COMM_WORLD_LOCAL_SIZE", crowded);
  EXPECT_EQ(config::read_runtime_settings().spin, 0us);
  config::set("AXLE_SPIN_US", "20");
  EXPECT_EQ(config::read_runtime_settings().spin, 20us);
  config::unset("OMPI_COMM_WORLD_LOCAL_SIZE");
  config::unset("AXLE_SPIN_US");
  EXPECT_EQ(config::read_runtime_settings().spin, 50us);
}

// Short steps run on their hosts' threads either way (there they wait at meetings yielding their
// core, as Open MPI's ranks do).
TEST_F(Settings, ShortStepsRunOnTheHostsThreadsWhetherOrNotMoreProcessesShareTheHostThanCores) {
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

TEST_F(Settings, ValuesOfEveryKindAreParsed) {
  using namespace std::chrono_literals;
  config::set("AXLE_SPIN_US", "7");
  config::set("AXLE_LOG_LEVEL", "Info");
  config::set("AXLE_VMODULE", "compiler=2, device*=1");
  config::set("XLA_USE_BF16", "yes");
  config::set("PJRT_DEVICE", "cpu");
  config::set("CPU_NUM_DEVICES", "4");
  config::set("AXLE_CPU_INTRA_OP_THREADS", "3");
  config::set("XLA_ENABLE_PARAM_ALIASING", "0");
  config::set("XLA_SAVE_TENSORS_FMT", "hlo");
  config::set("XLA_FLAGS", "--xla_other=1 --xla_dump_to=/tmp/dumps --xla_more");
  config::set("AXLE_COLLECTIVE_TIMEOUT", "0.25");
  const config::Settings s = config::read_settings();
  EXPECT_EQ(s.runtime.spin, 7us);
  EXPECT_EQ(s.log.min_level, LogLevel::kInfo);
  ASSERT_EQ(s.log.vmodule.size(), 2u);
  EXPECT_EQ(s.log.vmodule[0].pattern, "compiler");
  EXPECT_EQ(s.log.vmodule[0].verbosity, 2);
  EXPECT_EQ(s.log.vmodule[1].pattern, "device*");
  EXPECT_EQ(s.log.vmodule[1].verbosity, 1);
  EXPECT_TRUE(s.dtype.use_bf16);
  EXPECT_EQ(s.devices.cpu_num_devices, 4);
  EXPECT_EQ(s.devices.cpu_intra_op_threads, 3);
  EXPECT_FALSE(s.lazy.param_aliasing);
  EXPECT_EQ(s.lazy.save_tensors_format, config::SaveTensorsFormat::kHlo);
  EXPECT_EQ(s.program_dump.dump_to, "/tmp/dumps");
  EXPECT_EQ(s.collectives.timeout, 250ms);
}

TEST_F(Settings, ABadValueIsAConfigErrorNamingTheVariableAndTheValue) {
  expect_named_error("AXLE_THREADS", "many");
  expect_named_error("AXLE_LOG_LEVEL", "loud");
  expect_named_error("AXLE_VMODULE", "compiler=lots");
  expect_named_error("XLA_USE_BF16", "maybe");
  expect_named_error("PJRT_DEVICE", "TPU");
  expect_named_error("CPU_NUM_DEVICES", "0");
  expect_named_error("CPU_NUM_DEVICES", "abc");
  expect_named_error("XLA_MAX_ASYNC_QUEUE", "-1");
  expect_named_error("AXLE_CPU_INTRA_OP_THREADS", "0");
  expect_named_error("AXLE_CPU_INTRA_OP_THREADS", "257");
  expect_named_error("XLA_SAVE_TENSORS_FMT", "png");
  expect_named_error("PT_XLA_DEBUG_LEVEL", "1.5");
  expect_named_error("AXLE_COLLECTIVE_TIMEOUT", "0");
  expect_named_error("AXLE_COLLECTIVE_TIMEOUT", "1e9");
}

TEST_F(Settings, TheLogReaderCanKeepTheDefaultOfAMalformedValueAndApplyTheRest) {
  config::set("AXLE_LOG_LEVEL", "loud");
  config::set("AXLE_VLOG_LEVEL", "2");
  std::vector<std::string> errors;
  const config::LogSettings s = config::read_log_settings(&errors);
  EXPECT_EQ(s.min_level, LogLevel::kWarning);
  EXPECT_EQ(s.vlog_level, 2);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("AXLE_LOG_LEVEL='loud'"), std::string::npos) << errors[0];
  EXPECT_THROW((void)config::read_log_settings(), ConfigError);
}

}  // namespace
}  // namespace axle
