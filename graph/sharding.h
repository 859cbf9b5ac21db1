// graph: how a tensor of the SPMD program is laid out over a device mesh, as XLA's HloSharding
// (the layout torch_xla.distributed.spmd hands the compiler). A sharding splits each tensor
// dimension into tiles and assigns every tile to a device; with `last_tile_dim_replicate` one
// extra tile dimension lists devices that hold the same tile. These are plain values: the
// propagation pass (graph/passes/sharding_propagation.cpp) decides one per instruction and the
// partitioner (graph/passes/partitioner.cpp) turns them into per-device programs.
//
// Shards are even: a sharded dimension must divide by its tile count (an error names the shape
// and the sharding otherwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "axle/engine/shape.h"

namespace axle {

struct CpuTensor;  // graph/tensor.h, which includes this header through the IR

/// One tensor's layout over devices. Replicated when `tile_dims` is empty (or all ones).
struct ShardingSpec {
  /// Tiles per tensor dimension (the tensor's rank entries), then, with
  /// `last_tile_dim_replicate`, how many devices hold each tile.
  std::vector<int64_t> tile_dims;
  /// The tile assignment: device ids in row-major order over `tile_dims`.
  std::vector<int64_t> devices;
  /// The last entry of `tile_dims` counts the devices holding each tile (XLA's
  /// last_tile_dim_replicate) rather than tiles of a tensor dimension.
  bool last_tile_dim_replicate = false;

  /// Every device holds the whole tensor.
  [[nodiscard]] static ShardingSpec replicated() { return {}; }

  /// Whether every tensor dimension has one tile (every device holds the whole tensor).
  [[nodiscard]] bool is_replicated() const noexcept;
  /// Tiles along tensor dimension `dim` (1 for replicated ones and for `dim` ≥ the tiled rank).
  [[nodiscard]] int64_t tiles(int dim) const noexcept;
  /// The tensor rank the sharding tiles (tile_dims without the replicate dimension).
  [[nodiscard]] int tiled_rank() const noexcept;
  /// Devices holding each tile (the replicate dimension, or 1).
  [[nodiscard]] int64_t replication() const noexcept;
  /// The tile coordinates (one per tensor dimension) `device` holds; throws when the sharding
  /// does not name the device.
  [[nodiscard]] std::vector<int64_t> tile_of(int64_t device) const;

  /// Equal fields, or both replicated (whatever their fields).
  friend bool operator==(const ShardingSpec& a, const ShardingSpec& b) noexcept;
};

/// XLA's text: "{replicated}", "{devices=[2,1]0,1}",
/// "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}".
[[nodiscard]] std::string to_string(const ShardingSpec& sharding);

/// The shape of one device's shard of a `global` tensor; throws ShapeError naming both when a
/// sharded dimension does not divide evenly or the ranks disagree.
[[nodiscard]] Shape shard_shape(const Shape& global, const ShardingSpec& sharding);
/// Checks that `sharding` can lay out a tensor of `shape` (ranks agree, dimensions divide, the
/// tile assignment names tile_dims' product of distinct devices); throws ShapeError naming what
/// is wrong and `what` (e.g. the op and the user's line).
void check_sharding(const Shape& shape, const ShardingSpec& sharding, std::string_view what);

/// Device `device`'s tile of a value of `shape` held as row-major bytes (`element_size` each)
/// under `sharding`: shard_shape(shape, sharding) elements, row-major.
[[nodiscard]] std::vector<std::byte> shard_bytes(std::span<const std::byte> value,
                                                 std::size_t element_size, const Shape& shape,
                                                 const ShardingSpec& sharding, int64_t device);
/// Writes `shard`, device `device`'s tile, into its place in `value` (shard_bytes reversed).
void place_shard(std::span<std::byte> value, std::span<const std::byte> shard,
                 std::size_t element_size, const Shape& shape, const ShardingSpec& sharding,
                 int64_t device);

/// A sharding as the ints of an IR node (for the annotation op and program dumps), and back.
[[nodiscard]] std::vector<int64_t> encode_sharding(const ShardingSpec& sharding);
/// encode_sharding's ints back to the sharding.
[[nodiscard]] ShardingSpec decode_sharding(std::span<const int64_t> ints);

/// Shardings outgrow an IR node's attributes, so nodes hold a key to them: a hash of the
/// sharding (the same in every thread and process, so graph hashes stay stable). Interning
/// keeps the sharding for `interned_sharding`, which throws for a key never interned here.
[[nodiscard]] int64_t intern_sharding(const ShardingSpec& sharding);
/// The sharding interned under `key`; throws std::invalid_argument for a key never interned.
[[nodiscard]] ShardingSpec interned_sharding(int64_t key);

/// A mesh axis in a partition spec: by index or by name.
using MeshAxis = std::variant<int, std::string>;

/// One tensor dimension of a partition spec: the mesh axes it is sharded over (several for a
/// tuple, as ("data", "model")), or none (`std::nullopt`) for a replicated dimension.
class PartitionDim {
 public:
  /// A replicated dimension (Python's None).
  PartitionDim(std::nullopt_t) {}  // NOLINT(google-explicit-constructor): as Python's None
  /// Sharded over the mesh axis of index `axis`.
  PartitionDim(int axis) : axes_{axis} {}  // NOLINT(google-explicit-constructor)
  /// Sharded over the mesh axis named `axis`.
  PartitionDim(const char* axis) : axes_{std::string(axis)} {}  // NOLINT
  /// As above, for a std::string name.
  PartitionDim(std::string axis) : axes_{std::move(axis)} {}  // NOLINT
  /// Sharded over several mesh axes at once, as a Python tuple ("data", "model").
  PartitionDim(std::initializer_list<MeshAxis> axes) : axes_(axes) {}

  /// The mesh axes the dimension is sharded over, in order (empty if replicated).
  [[nodiscard]] const std::vector<MeshAxis>& axes() const noexcept { return axes_; }
  /// Whether the dimension is replicated (sharded over no axis).
  [[nodiscard]] bool replicated() const noexcept { return axes_.empty(); }

 private:
  std::vector<MeshAxis> axes_;
};

/// torch_xla's partition_spec: one entry per tensor dimension.
using PartitionSpec = std::vector<PartitionDim>;

/// A partition spec as Python prints it: "('data', None)".
[[nodiscard]] std::string to_string(const PartitionSpec& spec);

/// A logical device mesh, as torch_xla.distributed.spmd.Mesh: `device_ids` (global ordinals)
/// reshaped row-major to `mesh_shape`, with optional axis names.
class Mesh {
 public:
  /// Throws std::invalid_argument naming the mismatch when the ids do not fill the shape, repeat,
  /// or the names are not one per axis and distinct.
  Mesh(std::vector<int64_t> device_ids, std::vector<int64_t> mesh_shape,
       std::vector<std::string> axis_names = {});

  /// The device ids (global ordinals), row-major over mesh_shape(), as torch_xla's
  /// mesh.device_ids.
  [[nodiscard]] const std::vector<int64_t>& device_ids() const noexcept { return device_ids_; }
  /// The axes' sizes, as torch_xla's mesh.mesh_shape.
  [[nodiscard]] const std::vector<int64_t>& mesh_shape() const noexcept { return shape_; }
  /// (axis name, size) in axis order, as torch_xla's mesh.shape() (an OrderedDict); an axis
  /// without a name is named by its index ("0", "1", ...).
  [[nodiscard]] std::vector<std::pair<std::string, int64_t>> shape() const;
  /// The size of axis `axis` (an index or a name), as mesh.shape()[name].
  [[nodiscard]] int64_t axis_size(const MeshAxis& axis) const {
    return shape_[static_cast<std::size_t>(axis_index(axis))];
  }
  /// The axis names, as torch_xla's mesh.axis_names (empty when the axes are unnamed).
  [[nodiscard]] const std::vector<std::string>& axis_names() const noexcept { return names_; }
  /// The device ids laid out as the mesh: an int64 host tensor of shape mesh_shape(), as
  /// torch_xla's mesh.get_logical_mesh() (a numpy array). Defined in graph/spmd.cpp, where host
  /// tensors are known (graph/tensor.h reaches this header, so sharding.cpp cannot include it).
  [[nodiscard]] CpuTensor get_logical_mesh() const;
  /// The number of devices, as torch_xla's mesh.size().
  [[nodiscard]] int64_t size() const noexcept { return static_cast<int64_t>(device_ids_.size()); }
  /// The axis `axis` names (an index or a name); throws naming the mesh's axes otherwise.
  [[nodiscard]] int axis_index(const MeshAxis& axis) const;

  /// The sharding `spec` gives a tensor of rank `rank`, as Mesh.get_op_sharding: the mesh is
  /// transposed so the axes the spec uses come first in its order, tuple entries merge their
  /// axes into one tile dimension, and axes the spec leaves out (of size > 1) become the
  /// replicate dimension. Throws naming the spec when it has the wrong length, names an axis
  /// twice or an unknown axis.
  [[nodiscard]] ShardingSpec sharding(const PartitionSpec& spec, int rank) const;

  /// Same device ids, shape and axis names.
  friend bool operator==(const Mesh& a, const Mesh& b) noexcept;

 private:
  std::vector<int64_t> device_ids_;
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
};

}  // namespace axle
