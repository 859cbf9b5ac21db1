// actors/parallel: what a checkpoint and gradient clipping see of a FullyShardedDataParallel —
// the full parameters gathered, the global gradient norm over shards, the shard metadata
// (torch_xla's get_shard_metadata) and the sharded state dict.
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "axle/actors/host/replicas.h"
#include "axle/actors/parallel/fsdp_internal.h"
#include "axle/actors/parallel/fully_sharded_data_parallel.h"
#include "axle/graph/autograd.h"
#include "axle/graph/collectives.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle {

using fsdp::child_prefix;
using fsdp::dims_of;
using fsdp::Flat;
using fsdp::kWrapped;
using fsdp::Slot;

nn::StateDict FullyShardedDataParallel::full_parameters() const {
  const NoGradGuard no_grad;
  const std::vector<Tensor> full = gather(shards());
  nn::StateDict out;
  std::size_t i = 0;
  for (const auto& flat : flats_) {
    for (const Slot& slot : flat->slots) out.emplace_back(slot.names.front(), full[i++]);
  }
  return out;
}

Tensor FullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type,
                                                 std::source_location where) {
  const NoGradGuard no_grad;
  const bool infinity = std::isinf(norm_type);
  if (!(norm_type > 0)) {
    ops::fail("clip_grad_norm_", fmt::format("norm_type {} is not positive", norm_type), where);
  }
  const std::vector<Tensor> params = parameters();
  Tensor local;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor gf = cast(g, DType::kFloat32, where);
    const Tensor part = infinity ? amax(abs(gf, where), {}, false, where)
                                 : sum(pow(abs(gf, where), norm_type, where), {}, false, where);
    local = !local.defined() ? part
            : infinity       ? maximum(local, part, where)
                             : add(local, part, where);
  }
  if (!local.defined()) {
    Device device = params.empty() ? Device{} : params.front().device();
    local = scalar_tensor(0.0, DType::kFloat32, device, where);
  }
  // Every replica's shards together: the sum of p-th powers (or the max) over the group.
  Tensor total = world_size_ == 1 ? local
                                  : all_reduce(infinity ? ReduceType::kMax : ReduceType::kSum,
                                               local, 1.0, {}, where);
  if (!infinity) total = pow(total, 1.0 / norm_type, where);
  const Tensor coef = div(scalar_tensor(max_norm, total.dtype(), total.device(), where),
                          add(total, 1e-6, where), where);
  const Tensor scale = axle::where(lt(coef, 1.0, where), coef, ones_like(coef, where), where);
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined())
      p.set_grad(mul(g, cast(scale, g.dtype(), where), where), where);
  }
  return total;
}

ShardMetadata FullyShardedDataParallel::get_shard_metadata() const {
  ShardMetadata meta{.world_size = world_size_, .rank = rank_};
  // Names in this wrapper's state_dict (prefix) and in the unwrapped model (no wrapper names).
  auto strip = [](std::string name) {
    const std::string wrapped = fmt::format("{}.", kWrapped);
    for (std::size_t at; (at = name.find(wrapped)) != std::string::npos;)
      name.erase(at, wrapped.size());
    return name;
  };
  auto walk = [&](auto& self, const nn::Module& at, const std::string& prefix) -> void {
    if (const auto* unit = dynamic_cast<const FullyShardedDataParallel*>(&at)) {
      const std::string inside = strip(prefix + std::string(kWrapped) + ".");
      for (std::size_t f = 0; f < unit->flats_.size(); ++f) {
        const Flat& flat = *unit->flats_[f];
        FlatParameterInfo info{.name = prefix + unit->own_parameters()[f].first,
                               .dtype = flat.dtype,
                               .padded_numel = flat.padded_numel,
                               .shard_shape = dims_of(unit->own_parameters()[f].second),
                               .dim_0 = flat.dim_0};
        for (const Slot& slot : flat.slots) {
          ShardedParameterInfo p{.shape = slot.shape, .offset = slot.offset, .numel = slot.numel};
          for (const std::string& n : slot.names) p.names.push_back(inside + n);
          info.params.push_back(std::move(p));
        }
        meta.flat_params.push_back(std::move(info));
      }
    }
    for (const auto& [name, child] : at.named_children()) {
      self(self, *child, child_prefix(prefix, name));
    }
  };
  walk(walk, *this, "");
  return meta;
}

nn::StateDict FullyShardedDataParallel::sharded_checkpoint() const {
  nn::StateDict state = state_dict();
  const std::string text = get_shard_metadata().to_text();
  std::vector<int32_t> chars(text.begin(), text.end());
  Device device = own_parameters().empty() ? Device{} : own_parameters().front().second.device();
  state.emplace_back("shard_metadata",
                     tensor(chars, Shape({static_cast<int64_t>(chars.size())}), device));
  return state;
}

}  // namespace axle
