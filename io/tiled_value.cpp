// io: a value put together from its tiles (io/tiled_value.h).
#include "axle/io/tiled_value.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace axle {

void TiledValue::place(const CpuTensor& tile, int64_t device) {
  if (placed_.empty()) {
    const auto size = static_cast<std::size_t>(shape_.numel()) * dtype_size(tile.dtype);
    host_ = CpuTensor(tile.dtype, shape_, std::vector<std::byte>(size));
  }
  if (tile.dtype != host_.dtype || !(shard_shape(shape_, sharding_) == tile.shape)) {
    throw std::invalid_argument(fmt::format("tile {} {} does not fit {} laid out {}",
                                            dtype_name(tile.dtype), tile.shape.to_string(),
                                            shape_.to_string(), to_string(sharding_)));
  }
  std::vector<int64_t> coordinates = sharding_.tile_of(device);  // throws for a device it lacks
  if (!placed_.insert(std::move(coordinates)).second) {
    throw std::invalid_argument(fmt::format("device {}'s tile was saved twice", device));
  }
  place_shard(host_.bytes, tile.bytes, dtype_size(tile.dtype), shape_, sharding_, device);
}

int64_t TiledValue::tiles() const noexcept {
  if (sharding_.is_replicated()) return 1;
  return static_cast<int64_t>(sharding_.devices.size()) / sharding_.replication();
}

}  // namespace axle
