// io: a value put together on the host from the tiles devices held of it, as the SPMD
// checkpoints read them back (io/spmd_checkpoint.h, and CheckpointManager's steps under SPMD,
// io/checkpoint_tiles.h). Not installed as API.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "axle/graph/sharding.h"
#include "axle/graph/tensor.h"

namespace axle {

class TiledValue {
 public:
  /// A value of `shape` laid out as `sharding`, no tile placed yet.
  TiledValue(Shape shape, ShardingSpec sharding)
      : shape_(std::move(shape)), sharding_(std::move(sharding)) {}

  /// Puts `tile`, device `device`'s, into its place (the first tile sets the dtype).
  /// std::invalid_argument saying why for a tile of another dtype or shape than its place, a
  /// device the sharding gives no tile, or a tile placed before.
  void place(const CpuTensor& tile, int64_t device);
  /// How many tiles the value is made of (1 when replicated), and how many are placed.
  [[nodiscard]] int64_t tiles() const noexcept;
  [[nodiscard]] int64_t placed() const noexcept { return static_cast<int64_t>(placed_.size()); }

  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] const ShardingSpec& sharding() const noexcept { return sharding_; }
  /// The value as placed so far (row-major, the tiles' dtype).
  [[nodiscard]] const CpuTensor& host() const noexcept { return host_; }
  /// Lets go of the host copy.
  void release() { host_ = {}; }

 private:
  Shape shape_;
  ShardingSpec sharding_;
  CpuTensor host_;
  std::set<std::vector<int64_t>> placed_;  // the tiles' coordinates
};

}  // namespace axle
