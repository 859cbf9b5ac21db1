// graph/passes: a value's layout over the devices, for the SPMD partitioner (see
// partitioner_internal.h): building, projecting and grouping layouts.
#include "axle/graph/passes/partitioner_internal.h"

#include <utility>

#include "axle/graph/collectives.h"

namespace axle::spmd_partitioning {

Layout replicated(int rank, int64_t devices) {
  return Layout{std::vector<int64_t>(static_cast<std::size_t>(rank), 1),
                std::vector<int64_t>(static_cast<std::size_t>(rank * devices), 0), devices};
}

Layout layout_of(const ShardingSpec& sharding, int rank, int64_t devices) {
  Layout layout = replicated(rank, devices);
  if (sharding.is_replicated()) return layout;
  for (int d = 0; d < rank; ++d) layout.tiles[d] = sharding.tiles(d);
  // The tile assignment lists the devices row-major over tile_dims (the replicate dim last).
  const std::vector<int64_t>& tile_dims = sharding.tile_dims;
  for (std::size_t i = 0; i < sharding.devices.size(); ++i) {
    const int64_t device = sharding.devices[i];
    if (device < 0 || device >= devices) continue;  // the caller rejects these
    auto linear = static_cast<int64_t>(i);
    for (std::size_t d = tile_dims.size(); d-- > 0;) {
      if (static_cast<int>(d) < rank)
        layout.at(device, static_cast<int>(d)) = linear % tile_dims[d];
      linear /= tile_dims[d];
    }
  }
  return layout;
}

Layout unsplit(Layout layout, std::initializer_list<int> dims) {
  for (int d : dims) {
    if (d < 0 || d >= layout.rank()) continue;
    layout.tiles[d] = 1;
    for (int64_t p = 0; p < layout.devices; ++p) layout.at(p, d) = 0;
  }
  return layout;
}

Layout keep_only(const Layout& layout, const std::vector<bool>& keep) {
  Layout out = layout;
  for (int d = 0; d < out.rank(); ++d) {
    if (!keep[d]) out = unsplit(std::move(out), {d});
  }
  return out;
}

Layout project(const Layout& layout, const Shape& out, const Shape& in) {
  const int64_t devices = layout.devices;
  Layout result = replicated(in.rank(), devices);
  const int shift = out.rank() - in.rank();
  for (int i = 0; i < in.rank(); ++i) {
    const int j = i + shift;
    if (j < 0 || in[i] != out[j] || !layout.sharded(j)) continue;
    result.tiles[i] = layout.tiles[j];
    for (int64_t p = 0; p < devices; ++p) result.at(p, i) = layout.at(p, j);
  }
  return result;
}

Shape local_shape(const Shape& global, const Layout& layout) {
  Shape shape = global;
  for (int d = 0; d < global.rank(); ++d) shape[d] = global[d] / layout.tiles[d];
  return shape;
}

int64_t bytes_of(const Shape& shape, DType dtype) {
  return shape.numel() * static_cast<int64_t>(dtype_size(dtype));
}

std::optional<std::vector<std::vector<int64_t>>> groups_over(const Layout& layout,
                                                             std::span<const int> dims) {
  int64_t combos = 1;
  for (int d : dims) combos *= layout.tiles[d];
  std::map<std::vector<int64_t>, std::vector<std::vector<int64_t>>> buckets;
  for (int64_t p = 0; p < layout.devices; ++p) {
    const auto coords = layout.of(p);
    std::vector<int64_t> key(coords.begin(), coords.end());
    int64_t combo = 0;
    for (int d : dims) {
      combo = combo * layout.tiles[d] + key[d];
      key[d] = -1;
    }
    auto& bucket = buckets[key];
    bucket.resize(static_cast<std::size_t>(combos));
    bucket[combo].push_back(p);
  }
  std::vector<std::vector<int64_t>> groups;
  for (const auto& [key, bucket] : buckets) {
    const std::size_t count = bucket[0].size();
    for (const auto& members : bucket) {
      if (members.size() != count || count == 0) return std::nullopt;
    }
    for (std::size_t j = 0; j < count; ++j) {
      std::vector<int64_t> group;
      for (const auto& members : bucket) group.push_back(members[j]);
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

Layout with_extra(const Layout& layout, const std::vector<int64_t>& extra, int64_t extra_tiles) {
  Layout out = replicated(layout.rank() + 1, layout.devices);
  for (int d = 0; d < layout.rank(); ++d) out.tiles[d] = layout.tiles[d];
  out.tiles.back() = extra_tiles;
  for (int64_t p = 0; p < layout.devices; ++p) {
    for (int d = 0; d < layout.rank(); ++d) out.at(p, d) = layout.at(p, d);
    out.at(p, layout.rank()) = extra[static_cast<std::size_t>(p)];
  }
  return out;
}

bool laid_out_as_result(Op op) {
  return is_elementwise(op) || op == Op::kCustomSharding || op == Op::kExpand;
}

void copy_dim(Layout& to, int to_dim, const Layout& from, int from_dim) {
  to.tiles[to_dim] = from.tiles[from_dim];
  for (int64_t p = 0; p < to.devices; ++p) {
    to.at(p, to_dim) = from.at(p, from_dim);
  }
}

}  // namespace axle::spmd_partitioning
