// engine: configuration lookup (code overrides, then environment).
#include "engine/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace axle::config {
namespace {

struct Overrides {
  std::shared_mutex mutex;
  std::map<std::string, std::string, std::less<>> values;
};

Overrides& overrides() {
  static Overrides instance;
  return instance;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses all of `text` as a T, for value `value` of variable `name`. std::from_chars rather than
// strtod: strtod follows the C locale (after setlocale, "0.5" may fail where ',' is the decimal
// point) and turns an overflow such as "1e999" into inf without complaint. A leading '+', which
// strtod accepted, is still accepted.
template <typename T>
T parse_number(std::string_view name, const std::string& value, std::string_view text,
               std::string_view kind) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  T result{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), result);
  if (ec == std::errc::result_out_of_range) {
    throw ConfigError(fmt::format("{}='{}' is out of range", name, value));
  }
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ConfigError(fmt::format("{}='{}' is not {}", name, value, kind));
  }
  return result;
}

}  // namespace

std::optional<std::string> get(std::string_view name) {
  {
    auto& o = overrides();
    std::shared_lock lock(o.mutex);
    if (auto it = o.values.find(name); it != o.values.end()) return it->second;
  }
  if (const char* env = std::getenv(std::string(name).c_str())) return std::string(env);
  return std::nullopt;
}

int64_t get_int(std::string_view name, int64_t fallback) {
  auto value = get(name);
  if (!value) return fallback;
  std::string_view text = trim(*value);
  if (text.empty()) return fallback;
  return parse_number<int64_t>(name, *value, text, "an integer");
}

double get_double(std::string_view name, double fallback) {
  auto value = get(name);
  if (!value) return fallback;
  std::string_view text = trim(*value);
  if (text.empty()) return fallback;
  return parse_number<double>(name, *value, text, "a number");
}

bool get_bool(std::string_view name, bool fallback) {
  auto value = get(name);
  if (!value) return fallback;
  std::string text(trim(*value));
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (text.empty()) return fallback;
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  throw ConfigError(fmt::format("{}='{}' is not a boolean (use 1 or 0)", name, *value));
}

std::string get_string(std::string_view name, std::string_view fallback) {
  auto value = get(name);
  return value ? *value : std::string(fallback);
}

void set(std::string_view name, std::string value) {
  auto& o = overrides();
  std::unique_lock lock(o.mutex);
  o.values.insert_or_assign(std::string(name), std::move(value));
}

void unset(std::string_view name) {
  auto& o = overrides();
  std::unique_lock lock(o.mutex);
  if (auto it = o.values.find(name); it != o.values.end()) o.values.erase(it);
}

}  // namespace axle::config
