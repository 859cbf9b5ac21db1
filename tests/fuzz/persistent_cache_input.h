// tests/fuzz: what the persistent cache's fuzz target and its seed generator share. An input is
// a mode byte and then either a whole entry file or, to reach past the entry's checksum, the
// bytes of a Program that the target wraps in a correct entry. No protobuf here: the normal
// build's seed test includes it too.
#pragma once

#include <cstdint>

#include "axle/actors/compiler/persistent_cache.h"

namespace axle::fuzz {

/// The graph hash the seeds are stored for and the target loads.
constexpr uint64_t kSeedHash = 0x00c0ffee5eed0001ULL;
/// Mode bits: the rest is a Program to wrap in a correct entry; check it against
/// seed_interface() too.
constexpr uint8_t kWrapProgram = 1;
constexpr uint8_t kWithInterface = 2;

/// The seed program's interface: x f32[2,3] and y f32[2,3] in, one f32[2,3] out.
inline ProgramInterface seed_interface() {
  ProgramInterface interface;
  interface.inputs = {{DType::kFloat32, Shape{2, 3}}, {DType::kFloat32, Shape{2, 3}}};
  interface.outputs = {{DType::kFloat32, Shape{2, 3}}};
  return interface;
}

}  // namespace axle::fuzz
