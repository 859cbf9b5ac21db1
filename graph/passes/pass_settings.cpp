// graph/passes: reading AXLE_DISABLE_PASSES against the passes' own names.
#include "axle/graph/passes/pass_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string_view>

#include "axle/engine/config.h"

namespace axle::config {

PassSettings read_pass_settings() {
  const auto& known = kPassNames;
  const std::string names = get_string("AXLE_DISABLE_PASSES", "");
  PassSettings settings;
  std::size_t begin = 0;
  while (begin <= names.size()) {
    std::size_t end = names.find(',', begin);
    if (end == std::string::npos) end = names.size();
    std::string_view name(names.data() + begin, end - begin);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (!name.empty()) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw ConfigError(fmt::format("AXLE_DISABLE_PASSES={}: unknown pass '{}' (known: {})",
                                      names, name, fmt::join(known, ", ")));
      }
      settings.disabled.emplace_back(name);
    }
    begin = end + 1;
  }
  return settings;
}

}  // namespace axle::config
