// graph/ops: tracing collectives — checking groups, dtypes and shapes against the replica count.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "axle/engine/hash.h"

#include "axle/graph/collectives.h"
#include "axle/graph/device.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

using ops::describe;

std::string groups_text(const ReplicaGroups& groups) {
  std::string text = "[";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    text += fmt::format("{}[{}]", i ? ", " : "", fmt::join(groups[i], ", "));
  }
  return text + "]";
}

// [group_size, the groups' ordinals...], the kernels' encoding; throws ShapeError unless the
// groups are equal-sized and hold each of the world's replicas exactly once.
IntAttrs encode_groups(std::string_view op, const ReplicaGroups& groups, const Loc& where) {
  const int world = replica_world_size();
  IntAttrs ints;
  if (groups.empty()) {
    ints.push_back(world);
    for (int r = 0; r < world; ++r) ints.push_back(r);
    return ints;
  }
  auto reject = [&](const std::string& why) {
    ops::fail(op,
              fmt::format("replica groups {} {} ({} replica{})", groups_text(groups), why, world,
                          world == 1 ? "" : "s"),
              where);
  };
  const std::size_t size = groups.front().size();
  if (size == 0) reject("hold an empty group");
  std::vector<int> seen(static_cast<std::size_t>(world), 0);
  ints.push_back(static_cast<int64_t>(size));
  for (const std::vector<int>& group : groups) {
    if (group.size() != size) reject("differ in size");
    for (int r : group) {
      if (r < 0 || r >= world) reject(fmt::format("name replica {}, which does not exist", r));
      if (seen[static_cast<std::size_t>(r)]++) reject(fmt::format("hold replica {} twice", r));
      ints.push_back(r);
    }
  }
  for (int r = 0; r < world; ++r) {
    if (!seen[static_cast<std::size_t>(r)]) reject(fmt::format("leave out replica {}", r));
  }
  return ints;
}

void check_reduce_dtype(std::string_view op, ReduceType type, const Tensor& x, const Loc& where) {
  const bool logical = type == ReduceType::kAnd || type == ReduceType::kOr;
  if (static_cast<int>(type) >= kNumReduceTypes) {
    ops::fail(op, fmt::format("unknown reduce type {} for {}", static_cast<int>(type), describe(x)),
              where);
  }
  if (logical != (x.dtype() == DType::kBool)) {
    ops::fail(
        op,
        fmt::format("reduce type {} cannot combine {}: {}", reduce_type_name(type), describe(x),
                    logical ? "and / or take pred tensors" : "pred tensors take and / or"),
        where);
  }
}

// The size of group in `ints` (see encode_groups).
int64_t group_size(const IntAttrs& groups) { return groups[0]; }

// Group lists outgrow a node's attributes (8 replicas in 2 groups take 11 ints), so a node holds
// a key to them: a hash of their content, the same in every thread and process, so graphs hash
// alike and persistent-cache entries stay valid.
class GroupTable {
 public:
  int64_t intern(const IntAttrs& encoded) {
    uint64_t h = 0x67726f757073ULL;  // "groups"
    for (int64_t v : encoded) h = hash_combine(h, static_cast<uint64_t>(v));
    const auto key = static_cast<int64_t>(h >> 1);  // non-negative
    {
      std::shared_lock lock(mutex_);
      if (table_.contains(key)) return key;
    }
    std::unique_lock lock(mutex_);
    table_.try_emplace(key, encoded.begin(), encoded.end());
    return key;
  }
  std::vector<int64_t> find(int64_t key) const {
    std::shared_lock lock(mutex_);
    auto it = table_.find(key);
    return it == table_.end() ? std::vector<int64_t>{} : it->second;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<int64_t, std::vector<int64_t>> table_;
};

GroupTable& group_table() {
  static GroupTable table;
  return table;
}

Tensor traced(Op op, const Tensor& x, const Shape& shape, IntAttrs ints, RealAttrs reals,
              const Loc& where) {
  return ops::make_result(op, x.dtype(), shape, Operands{ops::value_as(x, x.dtype(), where)},
                          x.device(), where, std::move(ints), std::move(reals));
}

}  // namespace

Tensor all_reduce(ReduceType reduce_type, const Tensor& input, double scale,
                  const ReplicaGroups& groups, Loc where) {
  ops::require_defined("all_reduce", input, "the input", where);
  check_reduce_dtype("all_reduce", reduce_type, input, where);
  const int64_t key = group_table().intern(encode_groups("all_reduce", groups, where));
  return traced(Op::kAllReduce, input, input.shape(),
                IntAttrs{static_cast<int64_t>(reduce_type), key}, RealAttrs{scale}, where);
}

std::vector<Tensor> all_reduce(ReduceType reduce_type, const std::vector<Tensor>& inputs,
                               double scale, const ReplicaGroups& groups, Loc where) {
  std::vector<Tensor> results(inputs.size());
  // Positions of the smaller inputs by dtype, in order: each dtype travels as one flat buffer.
  std::map<DType, std::vector<std::size_t>> buckets;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ops::require_defined("all_reduce", inputs[i], "an input", where);
    check_reduce_dtype("all_reduce", reduce_type, inputs[i], where);
    if (inputs[i].numel() * static_cast<int64_t>(dtype_size(inputs[i].dtype())) >=
        kAllReduceOwnBufferBytes) {
      results[i] = all_reduce(reduce_type, inputs[i], scale, groups, where);
    } else {
      buckets[inputs[i].dtype()].push_back(i);
    }
  }
  for (const auto& [dtype, members] : buckets) {
    if (members.size() == 1) {
      results[members[0]] = all_reduce(reduce_type, inputs[members[0]], scale, groups, where);
      continue;
    }
    std::vector<Tensor> flat;
    flat.reserve(members.size());
    for (std::size_t i : members) flat.push_back(reshape(inputs[i], {inputs[i].numel()}, where));
    const Tensor reduced = all_reduce(reduce_type, cat(flat, 0, where), scale, groups, where);
    int64_t offset = 0;
    for (std::size_t i : members) {
      const int64_t n = inputs[i].numel();
      const auto dims = inputs[i].shape().dims();
      results[i] = reshape(slice(reduced, 0, offset, offset + n, 1, where),
                           std::vector<int64_t>(dims.begin(), dims.end()), where);
      offset += n;
    }
  }
  return results;
}

Tensor all_gather(const Tensor& value, int64_t dim, const ReplicaGroups& groups, Loc where) {
  ops::require_defined("all_gather", value, "the value", where);
  if (value.dim() == 0) ops::fail("all_gather", "cannot gather 0-d tensors along a dim", where);
  const int64_t d = ops::normalize_dim("all_gather", value, dim, value.dim(), where);
  IntAttrs group_ints = encode_groups("all_gather", groups, where);
  Shape shape = value.shape();
  shape[static_cast<int>(d)] *= group_size(group_ints);
  return traced(Op::kAllGather, value, shape, IntAttrs{d, group_table().intern(group_ints)}, {},
                where);
}

Tensor reduce_scatter(ReduceType reduce_type, const Tensor& input, double scale,
                      int64_t scatter_dim, int64_t shard_count, const ReplicaGroups& groups,
                      Loc where) {
  ops::require_defined("reduce_scatter", input, "the input", where);
  check_reduce_dtype("reduce_scatter", reduce_type, input, where);
  if (input.dim() == 0) ops::fail("reduce_scatter", "cannot scatter a 0-d tensor", where);
  const int64_t d = ops::normalize_dim("reduce_scatter", input, scatter_dim, input.dim(), where);
  IntAttrs group_ints = encode_groups("reduce_scatter", groups, where);
  if (shard_count != group_size(group_ints)) {
    ops::fail("reduce_scatter",
              fmt::format("shard_count {} differs from the group size {}", shard_count,
                          group_size(group_ints)),
              where);
  }
  Shape shape = input.shape();
  if (shape[static_cast<int>(d)] % shard_count != 0) {
    ops::fail(
        "reduce_scatter",
        fmt::format("dim {} of {} does not split into {} shards", d, describe(input), shard_count),
        where);
  }
  shape[static_cast<int>(d)] /= shard_count;
  return traced(Op::kReduceScatter, input, shape,
                IntAttrs{static_cast<int64_t>(reduce_type), d, group_table().intern(group_ints)},
                RealAttrs{scale}, where);
}

Tensor all_to_all(const Tensor& value, int64_t split_dimension, int64_t concat_dimension,
                  int64_t split_count, const ReplicaGroups& groups, Loc where) {
  ops::require_defined("all_to_all", value, "the value", where);
  if (value.dim() == 0) ops::fail("all_to_all", "cannot split a 0-d tensor", where);
  const int64_t split =
      ops::normalize_dim("all_to_all", value, split_dimension, value.dim(), where);
  const int64_t join =
      ops::normalize_dim("all_to_all", value, concat_dimension, value.dim(), where);
  IntAttrs group_ints = encode_groups("all_to_all", groups, where);
  if (split_count != group_size(group_ints)) {
    ops::fail("all_to_all",
              fmt::format("split_count {} differs from the group size {}", split_count,
                          group_size(group_ints)),
              where);
  }
  Shape shape = value.shape();
  if (shape[static_cast<int>(split)] % split_count != 0) {
    ops::fail("all_to_all",
              fmt::format("dim {} of {} does not split into {} blocks", split, describe(value),
                          split_count),
              where);
  }
  shape[static_cast<int>(split)] /= split_count;
  shape[static_cast<int>(join)] *= split_count;
  return traced(Op::kAllToAll, value, shape,
                IntAttrs{split, join, group_table().intern(group_ints)}, {}, where);
}

Tensor collective_permute(const Tensor& value,
                          const std::vector<std::pair<int, int>>& source_target_pairs, Loc where) {
  ops::require_defined("collective_permute", value, "the value", where);
  const int world = replica_world_size();
  IntAttrs ints{world};
  std::vector<bool> source_seen(static_cast<std::size_t>(world), false);
  std::vector<bool> target_seen(static_cast<std::size_t>(world), false);
  for (const auto& [source, target] : source_target_pairs) {
    auto reject = [&](const std::string& why) {
      ops::fail("collective_permute",
                fmt::format("pair ({}, {}) {} ({} replica{})", source, target, why, world,
                            world == 1 ? "" : "s"),
                where);
    };
    if (source < 0 || source >= world || target < 0 || target >= world) {
      reject("names a replica that does not exist");
    }
    if (source_seen[static_cast<std::size_t>(source)]) reject("repeats its source");
    if (target_seen[static_cast<std::size_t>(target)]) reject("repeats its target");
    source_seen[static_cast<std::size_t>(source)] = true;
    target_seen[static_cast<std::size_t>(target)] = true;
    ints.push_back(source);
    ints.push_back(target);
  }
  return traced(Op::kCollectivePermute, value, value.shape(), IntAttrs{group_table().intern(ints)},
                {}, where);
}

namespace detail {

std::vector<int64_t> collective_group_ints(int64_t key) { return group_table().find(key); }

int64_t intern_collective_group_ints(std::span<const int64_t> encoded) {
  return group_table().intern(IntAttrs(encoded));
}

}  // namespace detail
}  // namespace axle
