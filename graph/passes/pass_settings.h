// graph/passes: the passes' own setting, declared beside the passes it names. engine/config.h
// holds the lookup (code over environment, parsing) and the settings of the parts below; this
// group is read with it (a *_settings.cpp file is where a part reads its variables).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace axle::config {

/// The passes AXLE_DISABLE_PASSES may name, in the order of graph/passes' Pass (pass_name).
inline constexpr std::array<std::string_view, 6> kPassNames = {
    "canonicalize", "cse", "constant_folding", "dce", "all_reduce_combiner", "fusion"};

/// The compiler's passes: read whenever a pass set is made from the settings
/// (PassSet::from_config: by each compiler the lazy system starts, and by each hlo dump).
struct PassSettings {
  /// AXLE_DISABLE_PASSES, default none: passes to skip, comma-separated names of kPassNames.
  std::vector<std::string> disabled;
};

/// Reads the PassSettings; throws ConfigError naming the variable, its value, the unknown pass
/// and the known ones.
[[nodiscard]] PassSettings read_pass_settings();

}  // namespace axle::config
