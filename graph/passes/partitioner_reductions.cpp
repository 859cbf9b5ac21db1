// graph/passes: the SPMD partitioner's rules for reductions, and for softmax, argmax, cumsum
// and topk along a split dim without gathering the operand (graph/README.md).
#include "axle/graph/passes/partitioner_internal.h"

#include <algorithm>
#include <utility>

#include "axle/graph/collectives.h"

namespace axle::spmd_partitioning {

std::vector<int> Partitioner::kept_dims(int rank, std::span<const int64_t> ints) {
  std::vector<int> kept;
  for (int d = 0; d < rank; ++d) {
    if (std::find(ints.begin() + 1, ints.end(), d) == ints.end()) kept.push_back(d);
  }
  return kept;
}

int32_t Partitioner::lower_split_normalizer(int32_t id) {
  const Program::Instr& instr = global_[id];
  if (!is_floating(instr.dtype)) return -1;
  const Layout& want = layouts_[id];
  const int32_t operand = global_.operands(id)[0];
  const Shape& in = global_[operand].shape;
  const auto ints = global_.ints(id);
  const bool logsumexp = instr.op == Op::kLogSumExp;
  const bool keepdim = !logsumexp || ints[0] != 0;
  std::vector<int64_t> dims;
  if (logsumexp) {
    dims.assign(ints.begin() + 1, ints.end());
  } else {
    dims.push_back(ints[0]);
  }
  const Layout& current = layouts_[operand];
  Layout need = replicated(in.rank(), devices_);
  std::vector<int> split;
  for (int j = 0, i = 0; i < in.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) {
      copy_dim(need, i, want, j++);
      continue;
    }
    if (keepdim) ++j;
    if (current.sharded(i)) {
      copy_dim(need, i, current, i);
      split.push_back(i);
    }
  }
  if (split.empty()) return -1;
  const auto groups = groups_over(need, split);
  if (!groups) return -1;
  const DType dtype = instr.dtype;
  const int32_t x = operand_as(operand, need);
  const Shape shape = out_[x].shape;
  Shape reduced = shape;
  std::vector<int64_t> reduce_ints{1};
  for (int64_t d : dims) {
    reduced[static_cast<int>(d)] = 1;
    reduce_ints.push_back(d);
  }
  std::sort(reduce_ints.begin() + 1, reduce_ints.end());
  const int32_t x_operand[] = {x};
  const int32_t local_max = emit(Op::kReduceMax, dtype, reduced, x_operand, reduce_ints);
  const int32_t max = combine(local_max, ReduceType::kMax, 1.0, *groups, -1);
  const int32_t zero = scalar(dtype, 0);
  const int32_t max_twice[] = {max, max};
  const int32_t difference = emit(Op::kSub, dtype, reduced, max_twice);
  const int32_t compare[] = {difference, zero};
  const int32_t finite = emit(Op::kEq, DType::kBool, reduced, compare);
  const int32_t pick[] = {finite, max, zero};
  const int32_t shift = emit(Op::kWhere, dtype, reduced, pick);
  const int32_t centre[] = {x, shift};
  const int32_t centred = emit(Op::kSub, dtype, shape, centre);
  const int32_t centred_operand[] = {centred};
  const int32_t exps = emit(Op::kExp, dtype, shape, centred_operand);
  const int32_t exps_operand[] = {exps};
  const int32_t local_sum = emit(Op::kSum, dtype, reduced, exps_operand, reduce_ints);
  const int32_t sum_operand[] = {combine(local_sum, ReduceType::kSum, 1.0, *groups, -1)};
  const int32_t log_sum = emit(Op::kLog, dtype, reduced, sum_operand);
  const int32_t add[] = {log_sum, shift};
  const int32_t lse = emit(Op::kAdd, dtype, reduced, add);
  if (logsumexp) {
    if (keepdim) return lse;
    const int32_t lse_operand[] = {lse};
    return emit(Op::kReshape, dtype, local_shape(instr.shape, want), lse_operand);
  }
  const int32_t subtract[] = {x, lse};
  int32_t result = emit(Op::kSub, dtype, shape, subtract);
  if (instr.op == Op::kSoftmax) {
    const int32_t result_operand[] = {result};
    result = emit(Op::kExp, dtype, shape, result_operand);
  }
  return finish(id, result, need);
}

int32_t Partitioner::gather_along(int32_t local, int dim,
                                  const std::vector<std::vector<int64_t>>& groups) {
  const Program::Instr& instr = out_[local];
  const auto g = static_cast<int64_t>(groups.front().size());
  bytes_ += bytes_of(instr.shape, instr.dtype) * (g - 1);
  Shape shape = instr.shape;
  shape[dim] *= g;
  const int64_t ints[] = {dim, group_key(groups)};
  const int32_t operand[] = {local};
  return emit(Op::kAllGather, instr.dtype, shape, operand, ints);
}

// cumsum split along its dim d: each device scans its part (`x`, laid out as `need`) and adds
// the totals of the parts before it (after it, reversed), gathered over `groups`; `coords` is
// each device's part along d, `picked` the shape of one part's total.
int32_t Partitioner::scan_with_prefixes(int32_t id, int32_t x, const Layout& need,
                                        const Shape& picked, int d,
                                        const std::vector<std::vector<int64_t>>& groups,
                                        const std::vector<int64_t>& coords) {
  const DType dtype = global_[global_.operands(id)[0]].dtype;  // the operand's, as the parts'
  const int64_t g = need.tiles[d];
  const int32_t operand[] = {x};
  const Shape local = out_[x].shape;
  const int32_t scanned = local_op(id, operand, local);
  const int64_t sum_ints[] = {1, d};
  const int32_t totals = gather_along(emit(Op::kSum, dtype, picked, operand, sum_ints), d, groups);
  const double iota[] = {0, 1};
  const int32_t before[] = {emit(Op::kIota, DType::kInt64, Shape{g}, {}, {}, iota),
                            per_device(coords)};
  const bool reverse = global_.ints(id)[1] != 0;
  const int32_t chosen[] = {emit(reverse ? Op::kGt : Op::kLt, DType::kBool, Shape{g}, before)};
  Shape mask_shape = local;
  for (int i = 0; i < mask_shape.rank(); ++i) mask_shape[i] = i == d ? g : 1;
  const int32_t masked[] = {emit(Op::kReshape, DType::kBool, mask_shape, chosen), totals,
                            scalar(dtype, 0)};
  const int32_t kept[] = {emit(Op::kWhere, dtype, out_[totals].shape, masked)};
  const int32_t add[] = {scanned, emit(Op::kSum, dtype, picked, kept, sum_ints)};
  return finish(id, emit(Op::kAdd, dtype, local, add), need);
}

int32_t Partitioner::lower_split_scan(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const auto ints = global_.ints(id);
  const int32_t operand = global_.operands(id)[0];
  const Shape& in = global_[operand].shape;
  const DType dtype = global_[operand].dtype;
  const Layout& current = layouts_[operand];
  const bool argmax = instr.op == Op::kArgMax;
  if ((argmax && ints.size() != 2) || (!argmax && ints.size() < 2)) return -1;
  const int d = static_cast<int>(argmax ? ints[1] : ints[0]);
  if (d < 0 || d >= in.rank() || !current.sharded(d) || dtype == DType::kBool) return -1;
  const bool keepdim = argmax && ints[0] != 0;
  Layout need = replicated(in.rank(), devices_);
  if (argmax) {
    for (int j = 0, i = 0; i < in.rank(); ++i) {
      if (i != d) {
        copy_dim(need, i, want, j++);
      } else if (keepdim) {
        ++j;
      }
    }
  } else {
    need = unsplit(want, {d});
  }
  const Layout whole = need;  // the operand as the gathering way needs it
  copy_dim(need, d, current, d);
  const int dims[] = {d};
  const auto groups = groups_over(need, dims);
  if (!groups) return -1;
  const int64_t g = need.tiles[d];
  const int64_t length = in[d] / g;
  const int64_t k = instr.op == Op::kTopK ? ints[1] : 1;
  if (k < 1 || k > length) return -1;
  Shape picked = local_shape(in, need);  // k (or 1) entries along d
  picked[d] = k;
  const int64_t entries = picked.numel() * (g - 1);
  const int64_t cost =
      reshard_cost(operand, need) + 2 * kCollectiveLatencyBytes +
      entries * static_cast<int64_t>(dtype_size(dtype) + (instr.op == Op::kCumsum ? 0 : 8));
  if (cost >= reshard_cost(operand, whole)) return -1;
  std::vector<int64_t> starts;
  std::vector<int64_t> coords;
  for (int64_t p = 0; p < devices_; ++p) {
    coords.push_back(need.at(p, d));
    starts.push_back(need.at(p, d) * length);
  }
  const int32_t x[] = {operand_as(operand, need)};
  const int64_t along[] = {d};
  const int64_t first_along[] = {1, d};  // argmax's [keepdim, dim]
  if (instr.op == Op::kCumsum)
    return scan_with_prefixes(id, x[0], need, picked, d, *groups, coords);
  const int32_t positions =
      argmax ? emit(Op::kArgMax, DType::kInt64, picked, x, first_along) : local_op(id, x, picked);
  const int32_t at[] = {x[0], positions};
  const int32_t values = gather_along(emit(Op::kGather, dtype, picked, at, along), d, *groups);
  const int32_t shift[] = {positions, per_device(starts)};
  const int32_t global_positions =
      gather_along(emit(Op::kAdd, DType::kInt64, picked, shift), d, *groups);
  Shape best_shape = out_[values].shape;
  best_shape[d] = k;
  const int32_t candidates[] = {values};
  const int32_t best = argmax
                           ? emit(Op::kArgMax, DType::kInt64, best_shape, candidates, first_along)
                           : emit(Op::kTopK, DType::kInt64, best_shape, candidates, ints);
  const int32_t pick[] = {global_positions, best};
  int32_t result = emit(Op::kGather, DType::kInt64, best_shape, pick, along);
  if (argmax && !keepdim) {
    const int32_t operand_of[] = {result};
    result = emit(Op::kReshape, DType::kInt64, local_shape(instr.shape, want), operand_of);
    return finish(id, result, want);
  }
  return finish(id, result, argmax ? want : whole);
}

int32_t Partitioner::lower_reduction(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const int32_t operand = global_.operands(id)[0];
  const Shape& in = global_[operand].shape;
  const auto ints = global_.ints(id);
  const bool keepdim = ints[0] != 0;
  const Layout& current = layouts_[operand];
  auto is_reduced = [&](int i) { return std::find(ints.begin() + 1, ints.end(), i) != ints.end(); };
  std::vector<int> source;  // result dim -> operand dim
  std::vector<int> split_reduced;
  for (int i = 0; i < in.rank(); ++i) {
    if (!is_reduced(i) || keepdim) source.push_back(i);
    if (is_reduced(i) && current.sharded(i)) split_reduced.push_back(i);
  }
  // A sum over one split dim whose result is wanted split on the very same devices (along a dim
  // the operand holds whole), as a data-parallel bias gradient kept sharded (FSDP): summed and
  // split at once by reduce_scatter instead of all_reduce and a slice.
  Layout result = want;
  int scatter_dim = -1;
  if ((instr.op == Op::kSum || instr.op == Op::kMean) && split_reduced.size() == 1) {
    const Contraction c = contraction(current, split_reduced[0], want);
    if (c.scatter_dim >= 0 && !current.sharded(source[c.scatter_dim])) {
      scatter_dim = c.scatter_dim;
      result = unsplit(want, {scatter_dim});
    }
  }
  Layout need = replicated(in.rank(), devices_);
  std::vector<int> reduced_split;
  for (int j = 0, i = 0; i < in.rank(); ++i) {
    if (!is_reduced(i)) {
      copy_dim(need, i, result, j++);
      continue;
    }
    if (keepdim) ++j;
    if (current.sharded(i)) {
      copy_dim(need, i, current, i);
      reduced_split.push_back(i);
    }
  }
  std::optional<std::vector<std::vector<int64_t>>> groups;
  if (!reduced_split.empty()) {
    groups = groups_over(need, reduced_split);
    if (!groups) {
      for (int d : reduced_split) need = unsplit(std::move(need), {d});
      reduced_split.clear();
    }
  }
  const int32_t local_operand = operand_as(operand, need);
  const int32_t operands[] = {local_operand};
  const int32_t partial = local_op(id, operands, local_shape(instr.shape, result));
  if (reduced_split.empty()) return finish(id, partial, result);
  int64_t parts = 1;
  for (int d : reduced_split) parts *= need.tiles[d];
  ReduceType type = ReduceType::kSum;
  double scale = 1.0;
  if (instr.op == Op::kMean) scale = 1.0 / static_cast<double>(parts);
  if (instr.op == Op::kReduceMax) type = ReduceType::kMax;
  if (instr.op == Op::kReduceMin) type = ReduceType::kMin;
  const int32_t combined = combine(partial, type, scale, *groups, scatter_dim);
  return scatter_dim >= 0 ? combined : finish(id, combined, result);
}

}  // namespace axle::spmd_partitioning
