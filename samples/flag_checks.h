// samples: range checks for command-line flags whose failures read as sentences
// ("--batch_size must be positive; got 0"), where CLI11's own print the double range in full.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

namespace axle::samples {

namespace detail {
// Whether `text` is a whole number (integer or floating point), stored in `value`.
inline bool parse_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}
}  // namespace detail

/// Accepts numbers above zero.
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!detail::parse_number(text, value)) return "must be a number; got '" + text + "'";
        if (!(value > 0)) return "must be positive; got " + text;
        return {};
      },
      "POSITIVE", "positive");
}

/// Accepts zero and numbers above it.
inline CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!detail::parse_number(text, value)) return "must be a number; got '" + text + "'";
        if (!(value >= 0)) return "must be zero or more; got " + text;
        return {};
      },
      "NONNEGATIVE", "non_negative");
}

}  // namespace axle::samples
