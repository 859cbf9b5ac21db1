// graph/passes: the SPMD partitioner's rules for matmul and conv2d, whose contracting dims
// may be split: partial products summed by all_reduce or reduce_scatter (graph/README.md).
#include "axle/graph/passes/partitioner_internal.h"

#include <algorithm>
#include <utility>

#include "axle/graph/collectives.h"

namespace axle::spmd_partitioning {

namespace {

// The contracting dim of a matmul operand and, when it is split, how (coordinates per device).
struct KSplit {
  int dim;
  const std::vector<int64_t>* coords;  // null: K whole
  int64_t tiles;
};

// A matmul operand's layout for a product laid out as `result` (of shape `out`): batch dims as
// broadcast from the result, its free dim as the result's `out_free`, and K as `k` says.
Layout matmul_operand_layout(const Layout& result, const Shape& out, const Shape& shape,
                             int free_dim, int out_free, const KSplit& k) {
  const int r = out.rank();
  Layout batch = unsplit(result, {r - 2, r - 1});
  // Batch dims broadcast as elementwise operands do; the last two are set below.
  Shape probe = shape;
  for (int d = shape.rank() - 2; d < shape.rank(); ++d) probe[d] = 1;
  Layout layout = project(batch, out, probe);
  copy_dim(layout, free_dim, result, out_free);
  if (k.coords) {
    layout.tiles[k.dim] = k.tiles;
    for (int64_t p = 0; p < layout.devices; ++p) layout.at(p, k.dim) = (*k.coords)[p];
  }
  return layout;
}

// The first dim `want` splits in `tiles` on exactly the devices' `coords`, or -1.
int dim_split_as(const Layout& want, const std::vector<int64_t>& coords, int64_t tiles) {
  for (int d = 0; d < want.rank(); ++d) {
    if (want.tiles[d] != tiles) continue;
    bool same = true;
    for (int64_t p = 0; p < want.devices && same; ++p) same = want.at(p, d) == coords[p];
    if (same) return d;
  }
  return -1;
}

}  // namespace

int32_t Partitioner::lower_matmul(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const Shape& out = instr.shape;
  const int r = out.rank();
  const auto ints = global_.ints(id);
  const int32_t a = global_.operands(id)[0];
  const int32_t b = global_.operands(id)[1];
  const Shape& as = global_[a].shape;
  const Shape& bs = global_[b].shape;
  const int ra = as.rank();
  const int rb = bs.rank();
  const int a_m = ints[0] ? ra - 1 : ra - 2;
  const int a_k = ints[0] ? ra - 2 : ra - 1;
  const int b_k = ints[1] ? rb - 1 : rb - 2;
  const int b_n = ints[1] ? rb - 2 : rb - 1;

  struct Plan {
    Layout result;  // the local product's layout (without the partial index)
    Layout a, b;
    std::optional<std::vector<std::vector<int64_t>>> groups;  // partial sums' groups
    int scatter_dim = -1;
    int64_t cost = 0;
    bool in_place = false;  // neither operand needs resharding
  };
  auto operand_layout = [&](const Layout& result, const Shape& shape, int free_dim, int out_free,
                            int k_dim, const std::vector<int64_t>* k_coords, int64_t k_tiles) {
    return matmul_operand_layout(result, out, shape, free_dim, out_free,
                                 KSplit{k_dim, k_coords, k_tiles});
  };
  std::vector<Plan> plans;
  {
    Plan plan{want, operand_layout(want, as, a_m, r - 2, a_k, nullptr, 1),
              operand_layout(want, bs, b_n, r - 1, b_k, nullptr, 1)};
    plan.cost = reshard_cost(a, plan.a) + reshard_cost(b, plan.b);
    plans.push_back(std::move(plan));
  }
  for (int side = 0; side < 2; ++side) {
    const Layout& split = layouts_[side == 0 ? a : b];
    const int k_dim = side == 0 ? a_k : b_k;
    if (!split.sharded(k_dim)) continue;
    const int64_t k_tiles = split.tiles[k_dim];
    std::vector<int64_t> k_coords;
    for (int64_t p = 0; p < split.devices; ++p) k_coords.push_back(split.at(p, k_dim));
    const int scatter_dim = dim_split_as(want, k_coords, k_tiles);
    Plan plan;
    plan.result = scatter_dim >= 0 ? unsplit(want, {scatter_dim}) : want;
    plan.scatter_dim = scatter_dim;
    const int extra[] = {r};
    plan.groups = groups_over(with_extra(plan.result, k_coords, k_tiles), extra);
    if (!plan.groups) continue;
    plan.a = operand_layout(plan.result, as, a_m, r - 2, a_k, &k_coords, k_tiles);
    plan.b = operand_layout(plan.result, bs, b_n, r - 1, b_k, &k_coords, k_tiles);
    const int64_t partial = bytes_of(local_shape(out, plan.result), instr.dtype);
    const int64_t g = k_tiles;
    const int64_t operands_cost = reshard_cost(a, plan.a) + reshard_cost(b, plan.b);
    plan.in_place = operands_cost == 0;
    plan.cost = operands_cost + kCollectiveLatencyBytes +
                (scatter_dim >= 0 ? partial * (g - 1) / g : 2 * partial * (g - 1) / g);
    plans.push_back(std::move(plan));
  }
  // Operands already split alike along K: the partial products are summed as they are (as
  // XLA's dot handler does), even where gathering small operands would move fewer bytes, for
  // that would have every device compute the whole product.
  const auto in_place =
      std::find_if(plans.begin() + 1, plans.end(), [](const Plan& plan) { return plan.in_place; });
  const Plan& best =
      plans[0].cost > 0 && in_place != plans.end()
          ? *in_place
          : *std::min_element(plans.begin(), plans.end(),
                              [](const Plan& x, const Plan& y) { return x.cost < y.cost; });
  const int32_t locals[] = {operand_as(a, best.a), operand_as(b, best.b)};
  int32_t result = local_op(id, locals, local_shape(out, best.result));
  if (best.groups) {
    result = combine(result, ReduceType::kSum, 1.0, *best.groups, best.scatter_dim);
    if (best.scatter_dim >= 0) return result;
  }
  return finish(id, result, best.result);
}

Partitioner::Contraction Partitioner::contraction(const Layout& split, int dim,
                                                  const Layout& want) const {
  Contraction c;
  c.tiles = split.tiles[dim];
  for (int64_t p = 0; p < split.devices; ++p) c.coords.push_back(split.at(p, dim));
  for (int d = 0; d < want.rank() && c.scatter_dim < 0; ++d) {
    if (want.tiles[d] != c.tiles) continue;
    bool same = true;
    for (int64_t p = 0; p < want.devices && same; ++p) same = want.at(p, d) == c.coords[p];
    if (same) c.scatter_dim = d;
  }
  return c;
}

void Partitioner::split_as(Layout& layout, int dim, const Contraction& c) {
  layout.tiles[dim] = c.tiles;
  for (int64_t p = 0; p < layout.devices; ++p) layout.at(p, dim) = c.coords[p];
}

int64_t Partitioner::sum_cost(int64_t bytes, int64_t g, bool scatter) {
  return kCollectiveLatencyBytes + (scatter ? bytes * (g - 1) / g : 2 * bytes * (g - 1) / g);
}

Layout Partitioner::combined_layout(Layout result, const Contraction& c) {
  if (c.scatter_dim >= 0) split_as(result, c.scatter_dim, c);
  return result;
}

int32_t Partitioner::lower_conv2d(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const auto ints = global_.ints(id);
  const auto operands = global_.operands(id);
  const bool ungrouped = ints.size() > 6 && ints[6] == 1;
  // conv2d's w is [O, C / G, ...], conv_transpose2d's [C, O / G, ...]: the dims of the output's
  // channels and of the summed ones.
  const bool transposed = instr.op == Op::kConvTranspose2d;
  const int w_out = transposed ? 1 : 0, w_summed = transposed ? 0 : 1;
  const Layout have = keep_only(want, {true, ungrouped, false, false});
  auto needs = [&](const Layout& result, const Contraction* c) {
    std::vector<Layout> need;
    for (int32_t operand : operands) {
      need.push_back(replicated(global_[operand].shape.rank(), devices_));
    }
    copy_dim(need[0], 0, result, 0);
    copy_dim(need[1], w_out, result, 1);
    if (c) {
      split_as(need[0], 1, *c);
      split_as(need[1], w_summed, *c);
    }
    if (need.size() > 2 && need[2].rank() == 1) copy_dim(need[2], 0, result, 1);  // a bias
    return need;
  };
  auto cost_of = [&](const std::vector<Layout>& need) {
    int64_t cost = 0;
    for (std::size_t i = 0; i < need.size(); ++i) cost += reshard_cost(operands[i], need[i]);
    return cost;
  };
  std::vector<Layout> best = needs(have, nullptr);
  int64_t best_cost = cost_of(best);
  std::optional<Contraction> best_split;
  std::optional<std::vector<std::vector<int64_t>>> best_groups;
  Layout best_result = have;
  bool in_place = false;
  // A bias would be added once per partial sum: only a bare convolution sums partials.
  for (std::size_t side = 0; side < 2 && ungrouped && operands.size() == 2; ++side) {
    const Layout& split = layouts_[operands[side]];
    const int summed = side == 0 ? 1 : w_summed;
    if (!split.sharded(summed)) continue;
    Contraction c = contraction(split, summed, want);
    const Layout result = c.scatter_dim >= 0 ? unsplit(have, {c.scatter_dim}) : have;
    const int extra[] = {4};
    auto groups = groups_over(with_extra(result, c.coords, c.tiles), extra);
    if (!groups) continue;
    std::vector<Layout> need = needs(result, &c);
    const int64_t operands_cost = cost_of(need);
    const int64_t partial = bytes_of(local_shape(instr.shape, result), instr.dtype);
    const int64_t cost = operands_cost + sum_cost(partial, c.tiles, c.scatter_dim >= 0);
    if ((operands_cost == 0 && !in_place && best_cost > 0) || (cost < best_cost && !in_place)) {
      in_place = operands_cost == 0;
      best = std::move(need);
      best_cost = cost;
      best_split = std::move(c);
      best_groups = std::move(groups);
      best_result = result;
    }
  }
  std::vector<int32_t> locals;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    locals.push_back(operand_as(operands[i], best[i]));
  }
  int32_t result = local_op(id, locals, local_shape(instr.shape, best_result));
  if (!best_split) return finish(id, result, best_result);
  result = combine(result, ReduceType::kSum, 1.0, *best_groups, best_split->scatter_dim);
  return finish(id, result, combined_layout(best_result, *best_split));
}

}  // namespace axle::spmd_partitioning
