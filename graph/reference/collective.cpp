// graph/reference: collectives, evaluated as a group of one replica. A step graph evaluated here
// belongs to a single replica, so a collective whose groups have more than one member cannot be
// evaluated and is an error. With one member the CPU backend's collectives reduce to: all_reduce
// and reduce_scatter give the operand times its scale (integers truncate the scaled value, bool
// ignores the scale), all_gather and all_to_all give the operand, and collective_permute gives
// the operand when a pair sends replica 0 to itself, else zeros.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "axle/engine/reduce_type.h"
#include "axle/graph/collectives.h"
#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

// The node's groups, in the kernel's encoding ([group_size, groups...], or [world_size,
// pairs...] for collective_permute): a node's last int is the key it was traced with.
std::vector<int64_t> groups_of(const OpCall& call) {
  if (call.ints().empty()) fail(call, "has no replica-group key");
  const int64_t key = call.ints().back();
  std::vector<int64_t> groups = axle::detail::collective_group_ints(key);
  if (groups.empty()) fail(call, fmt::format("no replica groups were traced under key {}", key));
  return groups;
}

void expect_one_member(const OpCall& call) {
  const std::vector<int64_t> groups = groups_of(call);
  if (groups[0] != 1) {
    fail(call, fmt::format("its groups (size {}: [{}]) have more than one member; the reference "
                           "evaluates a single replica's graph, as a group of one",
                           groups[0], fmt::join(groups.begin() + 1, groups.end(), ",")));
  }
}

CpuTensor copy_of(const OpCall& call) {
  const CpuTensor& x = call.operand(0);
  expect_dtype(call, "the operand", x.dtype, call.dtype());
  if (!(x.shape == call.shape())) fail(call, "with one member the result has the operand's shape");
  return x;
}

// ints = [reduce, (scatter_dim,) key]; reals = [scale].
CpuTensor scaled(const OpCall& call, std::size_t ints) {
  expect_operands(call, 1);
  expect_ints(call, ints, ints == 2 ? "[reduce, group key]" : "[reduce, scatter_dim, group key]");
  if (call.reals().size() != 1) fail(call, "real attributes must be [scale]");
  if (call.ints()[0] < 0 || call.ints()[0] >= kNumReduceTypes) {
    fail(call, fmt::format("unknown reduce type {}", call.ints()[0]));
  }
  expect_one_member(call);
  CpuTensor out = copy_of(call);
  const double scale = call.reals()[0];
  if (scale == 1.0 || out.dtype == DType::kBool) return out;
  for (int64_t i = 0; i < out.shape.numel(); ++i) store_real(out, i, real_at(out, i) * scale);
  return out;
}

CpuTensor moved(const OpCall& call, std::size_t ints, std::string_view layout) {
  expect_operands(call, 1);
  expect_ints(call, ints, layout);
  expect_one_member(call);
  return copy_of(call);
}

// ints = [key] of [world_size, source0, target0, ...].
CpuTensor collective_permute(const OpCall& call) {
  expect_operands(call, 1);
  const std::vector<int64_t> pairs = groups_of(call);
  if (pairs[0] != 1) {
    fail(call, fmt::format("it permutes among {} replicas; the reference evaluates a single "
                           "replica's graph",
                           pairs[0]));
  }
  CpuTensor out = copy_of(call);
  for (std::size_t i = 1; i + 1 < pairs.size(); i += 2) {
    if (pairs[i + 1] == 0) return out;  // replica 0 sends to itself
  }
  return result_of(call);  // no pair targets this replica: zeros
}

}  // namespace

CpuTensor evaluate_collective(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kAllReduce:
      return scaled(call, 2);
    case Op::kReduceScatter:
      return scaled(call, 3);
    case Op::kAllGather:
      return moved(call, 2, "[dim, group key]");
    case Op::kAllToAll:
      return moved(call, 3, "[split_dim, concat_dim, group key]");
    case Op::kCollectivePermute:
      return collective_permute(call);
    default:
      fail(call, "is not a collective");
  }
}

}  // namespace axle::reference::detail
