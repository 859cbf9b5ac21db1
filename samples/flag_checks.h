// samples: range checks for command-line flags whose failures read as sentences
// ("--batch_size must be positive; got 0"), where CLI11's own print the double range in full.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

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

/// --mesh "D,M" as the SPMD mesh shape {D, M} (axes "data" and "model"); throws
/// std::invalid_argument naming the flag otherwise.
inline std::vector<int64_t> mesh_shape(const std::string& text) {
  const auto comma = text.find(',');
  if (comma != std::string::npos) {
    const std::string data = text.substr(0, comma), model = text.substr(comma + 1);
    double d = 0, m = 0;
    if (detail::parse_number(data, d) && detail::parse_number(model, m) && d >= 1 && m >= 1 &&
        d == static_cast<double>(static_cast<int64_t>(d)) &&
        m == static_cast<double>(static_cast<int64_t>(m))) {
      return {static_cast<int64_t>(d), static_cast<int64_t>(m)};
    }
  }
  throw std::invalid_argument(
      "--mesh must be two positive whole sizes, data then model (e.g. "
      "2,2), not '" +
      text + "'");
}

}  // namespace axle::samples
