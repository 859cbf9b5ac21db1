// io: the random stream behind FakeData and the DataLoader's shuffling. SplitMix64 (Steele, Lea
// and Flood, 2014) is fully specified here, unlike the standard distributions, whose results
// differ between standard libraries: a seed gives the same data and order on every platform.
#pragma once

#include <cstdint>

#include "axle/engine/hash.h"

namespace axle::detail {

/// A SplitMix64 stream: 64 random bits per call, and values drawn from them.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  /// A stream for one (seed, index) pair, independent of the streams of other indices.
  SplitMix64(uint64_t seed, uint64_t index) noexcept : state_(hash_combine(seed, index)) {}

  [[nodiscard]] uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1), with the 24 bits a float holds.
  [[nodiscard]] float next_float() noexcept {
    return static_cast<float>(next() >> 40) * 0x1.0p-24f;
  }

  /// Uniform in [0, n) for n > 0, by rejection, so no value is favoured.
  [[nodiscard]] uint64_t next_below(uint64_t n) noexcept {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }

 private:
  uint64_t state_;
};

}  // namespace axle::detail
