// engine: hashing for IR nodes and graphs — a 64-bit mix that is fast and spreads small inputs.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace axle {

/// Mixes `value` into `seed` (the finaliser of SplitMix64 over a combination step).
[[nodiscard]] constexpr uint64_t hash_combine(uint64_t seed, uint64_t value) noexcept {
  uint64_t x = seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

[[nodiscard]] inline uint64_t hash_double(double v) noexcept {
  if (v == 0) v = 0;  // -0.0 and 0.0 hash alike
  return std::bit_cast<uint64_t>(v);
}

[[nodiscard]] constexpr uint64_t hash_string(std::string_view s) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace axle
