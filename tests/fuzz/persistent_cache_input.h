// tests/fuzz: what the persistent cache's fuzz target and its seed generator share. An input is
// a mode byte and then either a whole entry file or, to reach past the entry's checksum, the
// bytes of a Program that the target wraps in a correct entry.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "actors/persistent_cache.h"
#include "actors/persistent_cache.pb.h"
#include "engine/hash.h"

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
  interface.inputs = {{DType::kF32, Shape{2, 3}}, {DType::kF32, Shape{2, 3}}};
  interface.outputs = {{DType::kF32, Shape{2, 3}}};
  return interface;
}

/// The bytes of the entry file an input stands for.
inline std::string cache_entry_bytes(uint8_t mode, std::string_view rest) {
  if (!(mode & kWrapProgram)) return std::string(rest);
  // What PersistentCache::encode_entry writes, around these program bytes.
  proto::CacheEntry entry;
  entry.set_magic("axle compiled program");
  entry.set_axle_version(AXLE_VERSION_STRING);
  entry.set_graph_hash(kSeedHash);
  entry.set_program(std::string(rest));
  entry.set_program_checksum(hash_string(entry.program()));
  return entry.SerializeAsString();
}

}  // namespace axle::fuzz
