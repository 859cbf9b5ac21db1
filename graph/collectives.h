// graph: in-graph collectives among spawn's replicas, as torch_xla's xm.all_reduce, all_gather,
// reduce_scatter, all_to_all and collective_permute. Each traces one op like any other; the
// replicas' devices meet when they execute it (actors/runtime/device_actor.h). Every replica must
// trace the same collectives in the same order; before the first execution of a graph with
// collectives the replicas compare graphs, and a replica that traced something else fails them
// all with an error naming it and where its graph diverged.
//
// Groups are lists of replica ordinals, as in torch_xla: every group the same size, together
// holding each replica once; empty means one group of every replica. Bad groups throw ShapeError
// naming the op, the groups and the caller's line as the op is traced. Collectives do not take
// part in autograd (their results do not require grad).
#pragma once

#include <source_location>
#include <span>
#include <utility>
#include <vector>

#include "axle/engine/reduce_type.h"
#include "axle/graph/tensor.h"

namespace axle {

/// Replica groups: lists of replica ordinals (see above); empty means one group of every replica.
using ReplicaGroups = std::vector<std::vector<int>>;

/// A tensor of this size or more is all-reduced on its own: flattening it into a shared buffer
/// (reshape, concatenation, slice and reshape back, each a copy) costs more than one more meeting
/// of the replicas. Each element's fold is the same either way, and so are its bits.
inline constexpr int64_t kAllReduceOwnBufferBytes = int64_t{256} << 10;

/// Each element combined across the replicas of the caller's group, then times `scale`.
Tensor all_reduce(ReduceType reduce_type, const Tensor& input, double scale = 1.0,
                  const ReplicaGroups& groups = {},
                  std::source_location where = std::source_location::current());
/// all_reduce of many tensors at once: those of one dtype travel as one flat buffer (one
/// collective per dtype, not one per tensor), but for those of kAllReduceOwnBufferBytes or more.
/// Returns the results in order. (The compiler combines a step's independent small all_reduces
/// so too: graph/passes/passes.h.)
std::vector<Tensor> all_reduce(ReduceType reduce_type, const std::vector<Tensor>& inputs,
                               double scale = 1.0, const ReplicaGroups& groups = {},
                               std::source_location where = std::source_location::current());
/// The group's values concatenated along `dim` in group order.
Tensor all_gather(const Tensor& value, int64_t dim = 0, const ReplicaGroups& groups = {},
                  std::source_location where = std::source_location::current());
/// all_reduce, then each replica keeps its block of `scatter_dim` split in `shard_count` (the
/// group's size): block i to the group's i-th member.
Tensor reduce_scatter(ReduceType reduce_type, const Tensor& input, double scale,
                      int64_t scatter_dim, int64_t shard_count, const ReplicaGroups& groups = {},
                      std::source_location where = std::source_location::current());
/// Splits the value in `split_count` (the group's size) blocks along `split_dimension`, sends
/// block i to the group's i-th member, and concatenates what arrives along `concat_dimension`
/// in group order.
Tensor all_to_all(const Tensor& value, int64_t split_dimension, int64_t concat_dimension,
                  int64_t split_count, const ReplicaGroups& groups = {},
                  std::source_location where = std::source_location::current());
/// Each (source, target) pair sends the source replica's value to the target; a replica no
/// pair targets gets zeros. Sources and targets are each distinct.
Tensor collective_permute(const Tensor& value,
                          const std::vector<std::pair<int, int>>& source_target_pairs,
                          std::source_location where = std::source_location::current());

namespace detail {
/// A collective node's groups (or permute pairs) hold too many ints for a node, so its last int
/// is a key to them; this gives them back in the kernel's encoding (backends/executable.h:
/// [group_size, groups...], or [world_size, pairs...] for collective_permute). Empty for a key
/// no collective traced in this process.
[[nodiscard]] std::vector<int64_t> collective_group_ints(int64_t key);
/// Registers groups (or permute pairs) in that encoding, unchecked, and returns the key a
/// collective node carries as its last int: what compiler passes that insert collectives (the
/// SPMD partitioner) use, for device positions instead of replica ordinals.
[[nodiscard]] int64_t intern_collective_group_ints(std::span<const int64_t> encoded);
}  // namespace detail

}  // namespace axle
