// actors/runtime: what the meeting points' files (meeting_points.cpp, meeting_failures.cpp) share:
// the kinds of message their processes exchange, and how a set of members is named in errors.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace axle::meeting_wire {

/// What a message between the meeting points of two processes says.
enum class WireKind : uint8_t { kShare = 1, kCancel = 2 };

/// "{0, 2, 3}".
inline std::string members_text(const std::vector<int>& members) {
  return fmt::format("{{{}}}", fmt::join(members, ", "));
}

}  // namespace axle::meeting_wire
