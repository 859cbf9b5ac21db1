// Tests engine/config.h.
#include "engine/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace axle
