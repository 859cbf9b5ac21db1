// graph/nn: FSDP as sharding annotations (see spmd_fsdp.h).
#include "axle/graph/nn/spmd_fsdp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

namespace axle::spmd {

SpmdFullyShardedDataParallel::SpmdFullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                           Mesh mesh, SpmdFsdpOptions options,
                                                           std::source_location where)
    : module_(register_module("module", std::move(module))),
      mesh_(std::move(mesh)),
      options_(std::move(options)) {
  const auto& names = mesh_.axis_names();
  const auto axis = std::ranges::find(names, options_.axis);
  if (axis == names.end()) {
    throw std::invalid_argument(fmt::format(
        "SpmdFullyShardedDataParallel: the mesh has no axis \"{}\" (its axes: {}); name one "
        "\"{}\" or pass SpmdFsdpOptions::axis",
        options_.axis, fmt::join(names, ", "), options_.axis));
  }
  axis_size_ = mesh_.mesh_shape()[static_cast<std::size_t>(axis - names.begin())];
  for (const auto& [name, p] : module_->named_parameters()) {
    const int rank = p.dim();
    int chosen = -1;
    for (int d = 0; d < rank; ++d) {
      if (p.size(d) % axis_size_ != 0) continue;
      if (chosen < 0 || (options_.shard_maximal && p.size(d) > p.size(chosen))) chosen = d;
      if (!options_.shard_maximal && chosen == 0) break;
    }
    if (chosen >= 0) mark_sharding(p, mesh_, along(rank, chosen), where);
  }
}

PartitionSpec SpmdFullyShardedDataParallel::along(int rank, int dim) const {
  PartitionSpec spec(static_cast<std::size_t>(rank), PartitionDim(std::nullopt));
  spec[static_cast<std::size_t>(dim)] = PartitionDim(options_.axis);
  return spec;
}

void SpmdFullyShardedDataParallel::shard_batch(const Tensor& t) const {
  if (t.dim() > 0 && t.size(0) % axis_size_ == 0) mark_sharding(t, mesh_, along(t.dim(), 0));
}

Tensor SpmdFullyShardedDataParallel::forward(const Tensor& input) {
  shard_batch(input);
  Tensor output = (*module_)(input);
  if (options_.shard_output) shard_batch(output);
  return output;
}

Tensor SpmdFullyShardedDataParallel::forward(const Tensor& input, const Tensor& other) {
  shard_batch(input);
  shard_batch(other);
  Tensor output = (*module_)(input, other);
  if (options_.shard_output) shard_batch(output);
  return output;
}

}  // namespace axle::spmd
