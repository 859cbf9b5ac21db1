// Test helpers for settings: a fixture that runs each test with the given variables unset, and
// the check that a bad value is a ConfigError naming the variable and the value.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "axle/engine/config.h"

namespace axle::testing {

/// Runs each test with none of `names` set, in code or in the environment; the environment's
/// values come back afterwards.
class WithoutVariables : public ::testing::Test {
 protected:
  explicit WithoutVariables(std::span<const char* const> names) : names_(names) {}

  void SetUp() override {
    for (const char* name : names_) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      unsetenv(name);
      config::unset(name);
    }
  }
  void TearDown() override {
    for (const char* name : names_) config::unset(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::span<const char* const> names_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

/// Sets `name` to `value` and expects `read()` to throw ConfigError naming both.
template <class Read>
void expect_named_error(const char* name, const std::string& value, Read read) {
  config::set(name, value);
  try {
    (void)read();
    ADD_FAILURE() << "expected ConfigError for " << name << "=" << value;
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find(value), std::string::npos) << message;
  }
  config::unset(name);
}

}  // namespace axle::testing
