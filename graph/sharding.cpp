#include "axle/graph/sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>

#include "axle/engine/hash.h"
#include "axle/graph/tensor.h"

namespace axle {
namespace {

int64_t product(std::span<const int64_t> values) {
  return std::accumulate(values.begin(), values.end(), int64_t{1}, std::multiplies<>());
}

std::string axis_text(const MeshAxis& axis) {
  if (const auto* name = std::get_if<std::string>(&axis)) return fmt::format("'{}'", *name);
  return std::to_string(std::get<int>(axis));
}

// Keys of interned shardings: a hash of the encoding, the same in every thread and process, so
// graphs hash alike and persistent-cache entries stay valid.
class ShardingTable {
 public:
  int64_t intern(const ShardingSpec& sharding) {
    const std::vector<int64_t> encoded = encode_sharding(sharding);
    uint64_t h = 0x7368617264ULL;  // "shard"
    for (int64_t v : encoded) h = hash_combine(h, static_cast<uint64_t>(v));
    const auto key = static_cast<int64_t>(h >> 1);  // non-negative
    {
      std::shared_lock lock(mutex_);
      if (table_.contains(key)) return key;
    }
    std::unique_lock lock(mutex_);
    table_.try_emplace(key, sharding);
    return key;
  }
  ShardingSpec find(int64_t key) const {
    std::shared_lock lock(mutex_);
    auto it = table_.find(key);
    if (it == table_.end()) {
      throw std::invalid_argument(fmt::format("no sharding was interned under key {}", key));
    }
    return it->second;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<int64_t, ShardingSpec> table_;
};

ShardingTable& sharding_table() {
  static ShardingTable table;
  return table;
}

}  // namespace

std::string to_string(const PartitionSpec& spec) {
  std::vector<std::string> dims;
  for (const PartitionDim& dim : spec) {
    if (dim.replicated()) {
      dims.emplace_back("None");
    } else if (dim.axes().size() == 1) {
      dims.push_back(axis_text(dim.axes()[0]));
    } else {
      std::vector<std::string> axes;
      for (const MeshAxis& axis : dim.axes()) axes.push_back(axis_text(axis));
      dims.push_back(fmt::format("({})", fmt::join(axes, ", ")));
    }
  }
  return fmt::format("({})", fmt::join(dims, ", "));
}

int64_t intern_sharding(const ShardingSpec& sharding) { return sharding_table().intern(sharding); }

ShardingSpec interned_sharding(int64_t key) { return sharding_table().find(key); }

namespace {
std::string spec_text(const PartitionSpec& spec) { return to_string(spec); }
}  // namespace

bool ShardingSpec::is_replicated() const noexcept {
  const int rank = tiled_rank();
  for (int d = 0; d < rank; ++d) {
    if (tile_dims[d] != 1) return false;
  }
  return true;
}

int ShardingSpec::tiled_rank() const noexcept {
  return static_cast<int>(tile_dims.size()) - (last_tile_dim_replicate ? 1 : 0);
}

int64_t ShardingSpec::tiles(int dim) const noexcept {
  return dim < tiled_rank() ? tile_dims[dim] : 1;
}

int64_t ShardingSpec::replication() const noexcept {
  if (tile_dims.empty()) return 1;
  return last_tile_dim_replicate ? tile_dims.back() : 1;
}

std::vector<int64_t> ShardingSpec::tile_of(int64_t device) const {
  const auto at = std::find(devices.begin(), devices.end(), device);
  if (at == devices.end()) {
    if (is_replicated()) return std::vector<int64_t>(std::max(tiled_rank(), 0), 0);
    throw std::invalid_argument(
        fmt::format("sharding {} does not place device {}", to_string(*this), device));
  }
  int64_t linear = at - devices.begin();
  std::vector<int64_t> coords(tile_dims.size());
  for (std::size_t d = tile_dims.size(); d-- > 0;) {
    coords[d] = linear % tile_dims[d];
    linear /= tile_dims[d];
  }
  coords.resize(tiled_rank());
  return coords;
}

bool operator==(const ShardingSpec& a, const ShardingSpec& b) noexcept {
  if (a.is_replicated() && b.is_replicated()) return true;
  return a.tile_dims == b.tile_dims && a.devices == b.devices &&
         a.last_tile_dim_replicate == b.last_tile_dim_replicate;
}

std::string to_string(const ShardingSpec& sharding) {
  if (sharding.is_replicated()) return "{replicated}";
  return fmt::format("{{devices=[{}]{}{}}}", fmt::join(sharding.tile_dims, ","),
                     fmt::join(sharding.devices, ","),
                     sharding.last_tile_dim_replicate ? " last_tile_dim_replicate" : "");
}

void check_sharding(const Shape& shape, const ShardingSpec& sharding, std::string_view what) {
  if (sharding.is_replicated()) return;
  auto fail = [&](std::string_view why) {
    throw ShapeError(fmt::format("{}: sharding {} cannot lay out a tensor of shape [{}]: {}", what,
                                 to_string(sharding), fmt::join(shape.dims(), ","), why));
  };
  if (sharding.tiled_rank() != shape.rank()) {
    fail(fmt::format("it tiles {} dimensions, the tensor has {}", sharding.tiled_rank(),
                     shape.rank()));
  }
  for (int64_t tiles : sharding.tile_dims) {
    if (tiles < 1) fail("a tile count is below 1");
  }
  if (static_cast<int64_t>(sharding.devices.size()) != product(sharding.tile_dims)) {
    fail(fmt::format("it assigns {} devices to {} tiles", sharding.devices.size(),
                     product(sharding.tile_dims)));
  }
  std::vector<int64_t> sorted = sharding.devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    fail("it names a device twice");
  }
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] % sharding.tile_dims[d] != 0) {
      fail(fmt::format("dimension {} ({}) does not split evenly in {}", d, shape[d],
                       sharding.tile_dims[d]));
    }
  }
}

Shape shard_shape(const Shape& global, const ShardingSpec& sharding) {
  check_sharding(global, sharding, "shard_shape");
  if (sharding.is_replicated()) return global;
  Shape shard = global;
  for (int d = 0; d < global.rank(); ++d) shard[d] = global[d] / sharding.tile_dims[d];
  return shard;
}

namespace {

// Copies between a value and one device's tile of it: `to_shard` picks the direction. Runs of
// the tile's last dimension are contiguous on both sides.
void copy_tile(std::byte* value, std::byte* shard, std::size_t element_size, const Shape& shape,
               const ShardingSpec& sharding, int64_t device, bool to_shard) {
  const Shape local = shard_shape(shape, sharding);
  const int rank = shape.rank();
  if (rank == 0 || local.numel() == 0) {
    if (rank == 0) {
      to_shard ? std::memcpy(shard, value, element_size) : std::memcpy(value, shard, element_size);
    }
    return;
  }
  const std::vector<int64_t> tile = sharding.tile_of(device);
  std::vector<int64_t> origin(static_cast<std::size_t>(rank), 0);
  for (int d = 0; d < rank && d < static_cast<int>(tile.size()); ++d)
    origin[d] = tile[d] * local[d];
  std::vector<int64_t> strides(static_cast<std::size_t>(rank), 1);
  for (int d = rank - 1; d > 0; --d) strides[d - 1] = strides[d] * shape[d];
  const std::size_t run = static_cast<std::size_t>(local[rank - 1]) * element_size;
  std::vector<int64_t> at(static_cast<std::size_t>(rank), 0);  // within the tile, last dim 0
  const int64_t runs = local.numel() / local[rank - 1];
  for (int64_t r = 0; r < runs; ++r) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += (origin[d] + at[d]) * strides[d];
    std::byte* in_value = value + static_cast<std::size_t>(offset) * element_size;
    std::byte* in_shard = shard + static_cast<std::size_t>(r) * run;
    to_shard ? std::memcpy(in_shard, in_value, run) : std::memcpy(in_value, in_shard, run);
    for (int d = rank - 2; d >= 0; --d) {
      if (++at[d] < local[d]) break;
      at[d] = 0;
    }
  }
}

void check_bytes(std::size_t have, std::size_t want, std::string_view what, const Shape& shape) {
  if (have != want) {
    throw std::invalid_argument(
        fmt::format("{}: {} bytes given for {} ({} needed)", what, have, shape.to_string(), want));
  }
}

}  // namespace

std::vector<std::byte> shard_bytes(std::span<const std::byte> value, std::size_t element_size,
                                   const Shape& shape, const ShardingSpec& sharding,
                                   int64_t device) {
  check_bytes(value.size(), static_cast<std::size_t>(shape.numel()) * element_size, "shard_bytes",
              shape);
  std::vector<std::byte> shard(static_cast<std::size_t>(shard_shape(shape, sharding).numel()) *
                               element_size);
  copy_tile(const_cast<std::byte*>(value.data()), shard.data(), element_size, shape, sharding,
            device, /*to_shard=*/true);
  return shard;
}

void place_shard(std::span<std::byte> value, std::span<const std::byte> shard,
                 std::size_t element_size, const Shape& shape, const ShardingSpec& sharding,
                 int64_t device) {
  check_bytes(value.size(), static_cast<std::size_t>(shape.numel()) * element_size, "place_shard",
              shape);
  const Shape local = shard_shape(shape, sharding);
  check_bytes(shard.size(), static_cast<std::size_t>(local.numel()) * element_size,
              "place_shard (the shard)", local);
  copy_tile(value.data(), const_cast<std::byte*>(shard.data()), element_size, shape, sharding,
            device, /*to_shard=*/false);
}

// Layout: [rank of tile_dims, tile_dims..., last_tile_dim_replicate, devices...]; replicated is
// the single int 0.
std::vector<int64_t> encode_sharding(const ShardingSpec& sharding) {
  if (sharding.is_replicated()) return {0};
  std::vector<int64_t> ints;
  ints.reserve(2 + sharding.tile_dims.size() + sharding.devices.size());
  ints.push_back(static_cast<int64_t>(sharding.tile_dims.size()));
  ints.insert(ints.end(), sharding.tile_dims.begin(), sharding.tile_dims.end());
  ints.push_back(sharding.last_tile_dim_replicate ? 1 : 0);
  ints.insert(ints.end(), sharding.devices.begin(), sharding.devices.end());
  return ints;
}

ShardingSpec decode_sharding(std::span<const int64_t> ints) {
  if (ints.empty()) throw std::invalid_argument("decode_sharding: no ints");
  const int64_t dims = ints[0];
  if (dims == 0) return ShardingSpec::replicated();
  if (dims < 0 || static_cast<std::size_t>(dims) + 2 > ints.size()) {
    throw std::invalid_argument(
        fmt::format("decode_sharding: malformed [{}]", fmt::join(ints, ",")));
  }
  ShardingSpec sharding;
  sharding.tile_dims.assign(ints.begin() + 1, ints.begin() + 1 + dims);
  sharding.last_tile_dim_replicate = ints[1 + dims] != 0;
  sharding.devices.assign(ints.begin() + 2 + dims, ints.end());
  if (static_cast<int64_t>(sharding.devices.size()) != product(sharding.tile_dims)) {
    throw std::invalid_argument(
        fmt::format("decode_sharding: malformed [{}]", fmt::join(ints, ",")));
  }
  return sharding;
}

Mesh::Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> mesh_shape,
           std::vector<std::string> axis_names)
    : device_ids_(std::move(device_ids)),
      shape_(std::move(mesh_shape)),
      names_(std::move(axis_names)) {
  if (shape_.empty()) throw std::invalid_argument("Mesh: mesh_shape is empty");
  for (int64_t size : shape_) {
    if (size < 1) {
      throw std::invalid_argument(
          fmt::format("Mesh: mesh_shape ({}) has an axis below 1", fmt::join(shape_, ", ")));
    }
  }
  if (static_cast<int64_t>(device_ids_.size()) != product(shape_)) {
    throw std::invalid_argument(
        fmt::format("Mesh: {} device ids do not fill mesh_shape ({}), which holds {}",
                    device_ids_.size(), fmt::join(shape_, ", "), product(shape_)));
  }
  std::vector<int64_t> sorted = device_ids_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw std::invalid_argument(
        fmt::format("Mesh: device ids [{}] repeat a device", fmt::join(device_ids_, ", ")));
  }
  if (!names_.empty()) {
    if (names_.size() != shape_.size()) {
      throw std::invalid_argument(
          fmt::format("Mesh: {} axis names for a mesh of {} axes", names_.size(), shape_.size()));
    }
    std::vector<std::string> names = names_;
    std::sort(names.begin(), names.end());
    if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
      throw std::invalid_argument(
          fmt::format("Mesh: axis names ({}) repeat a name", fmt::join(names_, ", ")));
    }
  }
}

std::vector<std::pair<std::string, int64_t>> Mesh::shape() const {
  std::vector<std::pair<std::string, int64_t>> axes;
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    axes.emplace_back(names_.empty() ? std::to_string(i) : names_[i], shape_[i]);
  }
  return axes;
}

int Mesh::axis_index(const MeshAxis& axis) const {
  if (const auto* index = std::get_if<int>(&axis)) {
    if (*index < 0 || *index >= static_cast<int>(shape_.size())) {
      throw std::invalid_argument(fmt::format("Mesh: axis {} is out of range for a mesh of {} axes",
                                              *index, shape_.size()));
    }
    return *index;
  }
  const std::string& name = std::get<std::string>(axis);
  const auto at = std::find(names_.begin(), names_.end(), name);
  if (at == names_.end()) {
    throw std::invalid_argument(fmt::format(
        "Mesh: no axis is named '{}' (the mesh's axes: {})", name,
        names_.empty() ? std::string("unnamed") : fmt::format("{}", fmt::join(names_, ", "))));
  }
  return static_cast<int>(at - names_.begin());
}

ShardingSpec Mesh::sharding(const PartitionSpec& spec, int rank) const {
  if (static_cast<int>(spec.size()) != rank) {
    throw std::invalid_argument(
        fmt::format("partition spec {} has {} entries for a tensor of rank {}", spec_text(spec),
                    spec.size(), rank));
  }
  // Mesh axes in the order the spec uses them, then the unused ones.
  std::vector<int> order;
  std::vector<int64_t> tile_dims;
  for (const PartitionDim& dim : spec) {
    int64_t tiles = 1;
    for (const MeshAxis& axis : dim.axes()) {
      const int index = axis_index(axis);
      if (std::find(order.begin(), order.end(), index) != order.end()) {
        throw std::invalid_argument(fmt::format("partition spec {} uses mesh axis {} twice",
                                                spec_text(spec), axis_text(axis)));
      }
      order.push_back(index);
      tiles *= shape_[index];
    }
    tile_dims.push_back(tiles);
  }
  int64_t replicated = 1;
  for (int axis = 0; axis < static_cast<int>(shape_.size()); ++axis) {
    if (std::find(order.begin(), order.end(), axis) == order.end()) {
      order.push_back(axis);
      replicated *= shape_[axis];
    }
  }
  if (product(tile_dims) == 1) return ShardingSpec::replicated();

  // The mesh's device ids transposed to `order` (row-major over the permuted axes).
  const int axes = static_cast<int>(shape_.size());
  std::vector<int64_t> strides(axes, 1);
  for (int a = axes - 1; a > 0; --a) strides[a - 1] = strides[a] * shape_[a];
  ShardingSpec sharding;
  sharding.devices.reserve(device_ids_.size());
  std::vector<int64_t> coords(axes, 0);  // over the permuted axes
  for (std::size_t n = 0; n < device_ids_.size(); ++n) {
    int64_t source = 0;
    for (int a = 0; a < axes; ++a) source += coords[a] * strides[order[a]];
    sharding.devices.push_back(device_ids_[source]);
    for (int a = axes - 1; a >= 0; --a) {
      if (++coords[a] < shape_[order[a]]) break;
      coords[a] = 0;
    }
  }
  sharding.tile_dims = std::move(tile_dims);
  if (replicated > 1) {
    sharding.tile_dims.push_back(replicated);
    sharding.last_tile_dim_replicate = true;
  }
  return sharding;
}

bool operator==(const Mesh& a, const Mesh& b) noexcept {
  return a.device_ids_ == b.device_ids_ && a.shape_ == b.shape_ && a.names_ == b.names_;
}

}  // namespace axle
