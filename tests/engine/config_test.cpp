// Tests engine/config.h: the lookup (code over environment, parsing) and engine's settings
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
#include "tests/settings_fixture.h"

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

TEST_F(Config, GetOptionalIntIsEmptyWhenUnsetOrBlankAndParsesOtherwise) {
  EXPECT_EQ(config::get_optional_int(kName), std::nullopt);
  setenv(kName, "  ", 1);
  EXPECT_EQ(config::get_optional_int(kName), std::nullopt);
  config::set(kName, " 0 ");
  EXPECT_EQ(config::get_optional_int(kName), 0);
  expect_config_error([] { (void)config::get_optional_int(kName); }, "zero");
}

TEST_F(Config, GetTrimmedGivesTheValueWithoutItsBlanks) {
  EXPECT_EQ(config::get_trimmed(kName), "");
  config::set(kName, "  1e9 ");
  EXPECT_EQ(config::get_trimmed(kName), "1e9");
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

// Every variable of engine's settings; tests/actors/part_settings_test.cpp reads the parts'.
// clang-format off
constexpr std::array<const char*, 6> kVariables = {
    "AXLE_THREADS", "AXLE_SPIN_US", "AXLE_SHUTDOWN_TIMEOUT_MS",
    "AXLE_LOG_LEVEL", "AXLE_VLOG_LEVEL", "AXLE_VMODULE"};
// clang-format on

class Settings : public testing::WithoutVariables {
 protected:
  Settings() : WithoutVariables(kVariables) {}
};

// Expects config::read_settings() to throw ConfigError naming `name` and showing `value`.
void expect_named_error(const char* name, const std::string& value) {
  testing::expect_named_error(name, value, [] { return config::read_settings(); });
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
}

TEST_F(Settings, CodeOverridesTheEnvironment) {
  setenv("AXLE_THREADS", "5", 1);
  EXPECT_EQ(config::read_runtime_settings().threads, 5);
  config::set("AXLE_THREADS", "7");
  EXPECT_EQ(config::read_runtime_settings().threads, 7);
  config::unset("AXLE_THREADS");
  EXPECT_EQ(config::read_runtime_settings().threads, 5);
  unsetenv("AXLE_THREADS");
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

TEST_F(Settings, ValuesOfEveryKindAreParsed) {
  using namespace std::chrono_literals;
  config::set("AXLE_SPIN_US", "7");
  config::set("AXLE_SHUTDOWN_TIMEOUT_MS", "250");
  config::set("AXLE_LOG_LEVEL", "Info");
  config::set("AXLE_VMODULE", "compiler=2, device*=1");
  const config::Settings s = config::read_settings();
  EXPECT_EQ(s.runtime.spin, 7us);
  EXPECT_EQ(s.runtime.shutdown_timeout, 250ms);
  EXPECT_EQ(s.log.min_level, LogLevel::kInfo);
  ASSERT_EQ(s.log.vmodule.size(), 2u);
  EXPECT_EQ(s.log.vmodule[0].pattern, "compiler");
  EXPECT_EQ(s.log.vmodule[0].verbosity, 2);
  EXPECT_EQ(s.log.vmodule[1].pattern, "device*");
  EXPECT_EQ(s.log.vmodule[1].verbosity, 1);
}

TEST_F(Settings, ABadValueIsAConfigErrorNamingTheVariableAndTheValue) {
  expect_named_error("AXLE_THREADS", "many");
  expect_named_error("AXLE_SPIN_US", "1.5");
  expect_named_error("AXLE_LOG_LEVEL", "loud");
  expect_named_error("AXLE_VMODULE", "compiler=lots");
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
