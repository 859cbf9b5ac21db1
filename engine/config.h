// engine: process-wide configuration. Every setting is an environment variable (PyTorch/XLA's
// names where the meaning is the same) that code may also set; code wins over the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace axle {

/// Thrown when a configuration value cannot be parsed; the message names the variable and value.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace config {

/// The value of `name`: what `set` gave it, else the environment, else nothing.
[[nodiscard]] std::optional<std::string> get(std::string_view name);

/// Integer value of `name`, or `fallback` when unset; throws ConfigError when not an integer.
[[nodiscard]] int64_t get_int(std::string_view name, int64_t fallback);

/// Floating-point value of `name`, or `fallback` when unset; throws ConfigError when malformed.
[[nodiscard]] double get_double(std::string_view name, double fallback);

/// Boolean value of `name` (1/0, true/false, yes/no, on/off), or `fallback` when unset.
[[nodiscard]] bool get_bool(std::string_view name, bool fallback);

/// String value of `name`, or `fallback` when unset.
[[nodiscard]] std::string get_string(std::string_view name, std::string_view fallback);

/// Sets `name` for this process, overriding the environment.
void set(std::string_view name, std::string value);

/// Removes a value given by `set`; the environment applies again.
void unset(std::string_view name);

}  // namespace config
}  // namespace axle
