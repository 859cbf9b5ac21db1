// tests/fuzz: what the sharded checkpoint's fuzz target and its seed generator share: an input
// holds several replicas' files, separated by kSeparator.
#pragma once

#include <string_view>
#include <vector>

namespace axle::fuzz {

constexpr std::string_view kSeparator = "AXLESHRD";
constexpr int kMaxFiles = 4;
/// An input starting with this is metadata texts, not files.
constexpr std::string_view kTextMode = "axle_fsdp_shard_metadata";

/// The files of an input: the parts between separators, at most kMaxFiles (the last takes the
/// rest).
inline std::vector<std::string_view> split_shard_files(std::string_view input) {
  std::vector<std::string_view> parts;
  while (static_cast<int>(parts.size()) + 1 < kMaxFiles) {
    const std::size_t at = input.find(kSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + kSeparator.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace axle::fuzz
