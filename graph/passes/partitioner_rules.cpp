// graph/passes: the SPMD partitioner's dispatch over op families and the rules of iota,
// index_select, random ops, gather, scatter_add and reshape (graph/README.md lists them all).
#include "axle/graph/passes/partitioner_internal.h"

#include <algorithm>

#include "axle/graph/collectives.h"

namespace axle::spmd_partitioning {

int32_t Partitioner::whole_along(int32_t id, std::initializer_list<int> dims) {
  const Layout have = unsplit(layouts_[id], dims);
  return local_then_finish(id, have, [&](std::size_t) { return have; });
}

int32_t Partitioner::lower_along_dim(int32_t id) {
  const Op op = global_[id].op;
  if (op == Op::kLayerNorm || op == Op::kLayerNormBackward) {  // each row (the last k dims) whole
    const int rank = global_[id].shape.rank();
    Layout have = layouts_[id];
    for (int d = rank - static_cast<int>(global_.ints(id)[0]); d < rank; ++d) {
      have = unsplit(std::move(have), {d});
    }
    return local_then_finish(id, have, [&](std::size_t) { return have; });
  }
  if (op == Op::kSoftmax || op == Op::kLogSoftmax) {
    if (const int32_t split = lower_split_normalizer(id); split >= 0) return split;
  } else if (const int32_t split = lower_split_scan(id); split >= 0) {
    return split;
  }
  return whole_along(id, {static_cast<int>(global_.ints(id)[0])});
}

// Batch dims split; each operand's batch dims (they broadcast) as the result's.
int32_t Partitioner::lower_attention(int32_t id) {
  const Shape& shape = global_[id].shape;
  const Layout have = unsplit(layouts_[id], {shape.rank() - 2, shape.rank() - 1});
  return local_then_finish(id, have, [&](std::size_t i) {
    return project(have, shape, global_[global_.operands(id)[i]].shape);
  });
}

// The operand laid out as the result, its dims in the permutation's order.
int32_t Partitioner::lower_permute(int32_t id) {
  const Layout& want = layouts_[id];
  const int rank = global_[id].shape.rank();
  const auto order = global_.ints(id);
  Layout need = replicated(rank, devices_);
  for (int i = 0; i < rank; ++i) copy_dim(need, static_cast<int>(order[i]), want, i);
  return local_then_finish(id, want, [&](std::size_t) { return need; });
}

// The classes' dim whole; the index split as the result's other dims.
int32_t Partitioner::lower_one_hot(int32_t id) {
  const int rank = global_[id].shape.rank();
  const Layout have = unsplit(layouts_[id], {rank - 1});
  Layout index = replicated(rank - 1, devices_);
  for (int d = 0; d + 1 < rank; ++d) copy_dim(index, d, have, d);
  return local_then_finish(id, have, [&](std::size_t) { return index; });
}

int32_t Partitioner::lower(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const Shape& shape = instr.shape;
  const auto operands = global_.operands(id);
  const auto ints = global_.ints(id);
  auto operand_shape = [&](std::size_t i) -> const Shape& { return global_[operands[i]].shape; };

  if (laid_out_as_result(instr.op)) {
    return local_then_finish(id, want,
                             [&](std::size_t i) { return project(want, shape, operand_shape(i)); });
  }
  switch (instr.op) {
    case Op::kDeviceData:
    case Op::kParameter:
    case Op::kConstant:
    case Op::kFill:
      return local_op(id, {}, local_shape(shape, want));
    case Op::kIota:
      return lower_iota(id);
    case Op::kSum:
    case Op::kMean:
    case Op::kReduceMax:
    case Op::kReduceMin:
      return lower_reduction(id);
    case Op::kLogSumExp:
    case Op::kArgMax:
      return lower_reduction_to_one(id);
    case Op::kSoftmax:
    case Op::kLogSoftmax:
    case Op::kCumsum:
    case Op::kTopK:
    case Op::kLayerNorm:
    case Op::kLayerNormBackward:
      return lower_along_dim(id);
    case Op::kMatmul:
      return lower_matmul(id);
    case Op::kReshape:
      return lower_reshape(id);
    case Op::kPermute:
      return lower_permute(id);
    case Op::kSlice:
    case Op::kConcat:
      return whole_along(id, {static_cast<int>(ints[0])});
    case Op::kIndexSelect:
      return lower_index_select(id);
    case Op::kScatterAdd:
    case Op::kGather:
      return lower_gather(id);
    case Op::kOneHot:
      return lower_one_hot(id);
    case Op::kConv2d:
    case Op::kConvTranspose2d:
      return lower_conv2d(id);
    case Op::kMaxPool2d:
    case Op::kAvgPool2d:
    case Op::kMaxPool2dBackward:
    case Op::kAvgPool2dBackward:
      return whole_along(id, {2, 3});  // the image dims
    case Op::kScaledDotProductAttention:
    case Op::kScaledDotProductAttentionBackward:
      return lower_attention(id);
    case Op::kRandUniform:
    case Op::kRandNormal:
    case Op::kRandInt:
    case Op::kBernoulli:
      return lower_random(id);
    case Op::kOptimizationBarrier:
      return lower_barrier(id);
    case Op::kAllReduce:
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll:
    case Op::kCollectivePermute:
      fail(id,
           "collectives among replicas do not go in an SPMD program (the partitioner "
           "inserts those the shardings need)");
    default:
      fail(id, "the partitioner has no rule for this op");
  }
}

int32_t Partitioner::lower_reduction_to_one(int32_t id) {
  const Layout& want = layouts_[id];
  const auto ints = global_.ints(id);
  if (global_[id].op == Op::kArgMax) {
    if (const int32_t split = lower_split_scan(id); split >= 0) return split;
  } else if (const int32_t split = lower_split_normalizer(id); split >= 0) {
    return split;
  }
  // [keepdim, dims...]: the reduced dims whole, the kept ones as the result's.
  const Shape& in = global_[global_.operands(id)[0]].shape;
  Layout need = replicated(in.rank(), devices_);
  const std::vector<int> kept = kept_dims(in.rank(), ints);
  for (int j = 0, i = 0; i < in.rank(); ++i) {
    if (std::find(kept.begin(), kept.end(), i) == kept.end()) {
      if (ints[0]) ++j;
      continue;
    }
    copy_dim(need, i, want, j++);
  }
  return local_then_finish(id, want, [&](std::size_t) { return need; });
}

int32_t Partitioner::lower_gather(int32_t id) {
  const Op op = global_[id].op;
  if (op == Op::kScatterAdd) {
    if (const int32_t partial = lower_split_scatter_add(id); partial >= 0) return partial;
  } else if (const int32_t masked = lower_split_gather(id); masked >= 0) {
    return masked;
  }
  // Every operand has the result's rank; dims where the index is shorter than x stay whole,
  // and x stays whole along dim (the index may be split there for a gather).
  const int rank = global_[id].shape.rank();
  const int dim = static_cast<int>(global_.ints(id)[0]);
  const Shape& x = global_[global_.operands(id)[0]].shape;
  const Shape& index = global_[global_.operands(id)[1]].shape;
  std::vector<bool> keep(static_cast<std::size_t>(rank), true);
  for (int d = 0; d < rank; ++d) keep[d] = x[d] == index[d];
  if (op == Op::kScatterAdd) keep[dim] = false;
  const Layout have = keep_only(layouts_[id], keep);
  const Layout x_need = unsplit(have, {dim});
  return local_then_finish(id, have, [&](std::size_t i) { return i == 0 ? x_need : have; });
}

int32_t Partitioner::lower_barrier(int32_t id) {
  const Layout& want = layouts_[id];
  const auto operands = global_.operands(id);
  const std::size_t passed = static_cast<std::size_t>(global_.ints(id)[0]);
  std::vector<int32_t> locals;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    locals.push_back(i == passed ? operand_as(operands[i], want) : local_[operands[i]]);
  }
  return local_op(id, locals, local_shape(global_[id].shape, want));
}

int32_t Partitioner::lower_iota(int32_t id) {
  const Layout& want = layouts_[id];
  const Program::Instr& instr = global_[id];
  if (!want.sharded(0)) return local_op(id, {}, local_shape(instr.shape, want));
  // The global index of each local element (iota from 0 plus the shard's start), then
  // start + index * step in double, as the op computes it, rounded to the dtype once.
  const int64_t length = instr.shape[0] / want.tiles[0];
  const double iota[] = {0, 1};
  const Shape shape{length};
  const int32_t range = emit(Op::kIota, DType::kInt64, shape, {}, {}, iota);
  std::vector<int64_t> offsets;
  for (int64_t p = 0; p < want.devices; ++p) offsets.push_back(want.at(p, 0) * length);
  const int32_t sum[] = {range, per_device(offsets)};
  int32_t index = emit(Op::kAdd, DType::kInt64, shape, sum);
  const double start = global_.reals(id)[0];
  const double step = global_.reals(id)[1];
  if (instr.dtype == DType::kInt64 && start == 0 && step == 1) return index;
  const int32_t as_double[] = {index};
  index = emit(Op::kCast, DType::kFloat64, shape, as_double);
  const int32_t scaled[] = {index, scalar(DType::kFloat64, step)};
  index = emit(Op::kMul, DType::kFloat64, shape, scaled);
  const int32_t shifted[] = {index, scalar(DType::kFloat64, start)};
  index = emit(Op::kAdd, DType::kFloat64, shape, shifted);
  const int32_t cast[] = {index};
  return emit(Op::kCast, instr.dtype, shape, cast);
}

int32_t Partitioner::lower_index_select(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const int dim = static_cast<int>(global_.ints(id)[0]);
  const int32_t x = global_.operands(id)[0];
  const int32_t index = global_.operands(id)[1];
  const Shape& xs = global_[x].shape;
  Layout index_need = replicated(1, devices_);
  copy_dim(index_need, 0, want, dim);
  const Layout x_whole = unsplit(want, {dim});
  const Layout& x_now = layouts_[x];
  if (x_now.sharded(dim)) {
    const int64_t k = x_now.tiles[dim];
    std::vector<int64_t> k_coords;
    for (int64_t p = 0; p < x_now.devices; ++p) k_coords.push_back(x_now.at(p, dim));
    const int extra[] = {instr.shape.rank()};
    const auto groups = groups_over(with_extra(want, k_coords, k), extra);
    Layout x_split = x_whole;
    x_split.tiles[dim] = k;
    for (int64_t p = 0; p < x_split.devices; ++p) x_split.at(p, dim) = k_coords[p];
    const int64_t out_bytes = bytes_of(local_shape(instr.shape, want), instr.dtype);
    if (groups && reshard_cost(x, x_split) + 2 * out_bytes * (k - 1) / k + kCollectiveLatencyBytes <
                      reshard_cost(x, x_whole)) {
      const int32_t table = operand_as(x, x_split);
      const int32_t rows = operand_as(index, index_need);
      const DType index_dtype = global_[index].dtype;
      const Shape rows_shape = out_[rows].shape;
      const int64_t length = xs[dim] / k;
      std::vector<int64_t> offsets;
      for (int64_t c : k_coords) offsets.push_back(c * length);
      const auto [mask, safe] = block_indices(rows, index_dtype, rows_shape, length, offsets);
      const Shape shape = local_shape(instr.shape, want);
      const int32_t lookup[] = {table, safe};
      const int32_t picked = local_op(id, lookup, shape);
      Shape mask_shape = shape;
      for (int d = 0; d < mask_shape.rank(); ++d) mask_shape[d] = d == dim ? shape[d] : 1;
      const int32_t mask_operand[] = {mask};
      const int32_t mask_b = emit(Op::kReshape, DType::kBool, mask_shape, mask_operand);
      const int32_t kept[] = {mask_b, picked, scalar(instr.dtype, 0)};
      const int32_t masked = emit(Op::kWhere, instr.dtype, shape, kept);
      return combine(masked, ReduceType::kSum, 1.0, *groups, -1);
    }
  }
  const int32_t locals[] = {operand_as(x, x_whole), operand_as(index, index_need)};
  return local_op(id, locals, local_shape(instr.shape, want));
}

int32_t Partitioner::lower_random(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const Shape& shape = instr.shape;
  const auto operands = global_.operands(id);
  int lead = -1;
  for (int d = 0; d < shape.rank() && lead < 0; ++d) {
    if (shape[d] > 1) lead = d;
  }
  Layout have = replicated(shape.rank(), devices_);
  if (lead >= 0 && want.sharded(lead) && operands.size() >= 2 &&
      global_[operands[1]].dtype == DType::kInt64 && global_[operands[1]].shape.rank() == 0) {
    copy_dim(have, lead, want, lead);
  }
  std::vector<int32_t> locals;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const Shape& operand = global_[operands[i]].shape;
    locals.push_back(operand_as(operands[i], i >= 2 ? project(have, shape, operand)
                                                    : replicated(operand.rank(), devices_)));
  }
  if (lead >= 0 && have.sharded(lead)) {
    const int64_t rows = shape[lead] / have.tiles[lead];
    const int64_t inner = shape.numel() / shape[lead];
    std::vector<int64_t> first;
    for (int64_t p = 0; p < devices_; ++p) first.push_back(have.at(p, lead) * rows * inner);
    const int32_t start[] = {per_device(first)};
    const int32_t start_scalar[] = {locals[1], emit(Op::kReshape, DType::kInt64, Shape{}, start)};
    locals[1] = emit(Op::kAdd, DType::kInt64, Shape{}, start_scalar);
  }
  return finish(id, local_op(id, locals, local_shape(shape, have)), have);
}

int32_t Partitioner::lower_split_gather(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const int dim = static_cast<int>(global_.ints(id)[0]);
  const auto operands = global_.operands(id);
  const Shape& xs = global_[operands[0]].shape;
  const Shape& is = global_[operands[1]].shape;
  const Layout& x_now = layouts_[operands[0]];
  const int rank = instr.shape.rank();
  if (!x_now.sharded(dim) || instr.dtype == DType::kBool) return -1;
  std::vector<bool> keep(static_cast<std::size_t>(rank), true);
  for (int d = 0; d < rank; ++d) keep[d] = d != dim && xs[d] == is[d];
  const Layout have = keep_only(want, keep);
  const Layout x_whole = unsplit(have, {dim});
  Layout x_split = x_whole;
  copy_dim(x_split, dim, x_now, dim);
  const int64_t k = x_now.tiles[dim];
  std::vector<int64_t> k_coords;
  for (int64_t p = 0; p < devices_; ++p) k_coords.push_back(x_now.at(p, dim));
  const int extra[] = {rank};
  const auto groups = groups_over(with_extra(have, k_coords, k), extra);
  if (!groups || !groups_over(x_split, std::span<const int>(&dim, 1))) return -1;
  const int64_t out_bytes = bytes_of(local_shape(instr.shape, have), instr.dtype);
  if (reshard_cost(operands[0], x_split) + sum_cost(out_bytes, k, false) >=
      reshard_cost(operands[0], x_whole)) {
    return -1;
  }
  const int32_t table = operand_as(operands[0], x_split);
  const int32_t positions = operand_as(operands[1], have);
  const Shape shape = out_[positions].shape;
  const DType index_dtype = global_[operands[1]].dtype;
  const int64_t length = xs[dim] / k;
  std::vector<int64_t> starts;
  for (int64_t c : k_coords) starts.push_back(c * length);
  const auto [mask, safe] = block_indices(positions, index_dtype, shape, length, starts);
  const int32_t pick[] = {table, safe};
  const int32_t picked = local_op(id, pick, shape);
  const int32_t kept[] = {mask, picked, scalar(instr.dtype, 0)};
  const int32_t masked = emit(Op::kWhere, instr.dtype, shape, kept);
  return finish(id, combine(masked, ReduceType::kSum, 1.0, *groups, -1), have);
}

int32_t Partitioner::lower_split_scatter_add(int32_t id) {
  const Program::Instr& instr = global_[id];
  const Layout& want = layouts_[id];
  const int dim = static_cast<int>(global_.ints(id)[0]);
  const auto operands = global_.operands(id);
  const Shape& x = global_[operands[0]].shape;
  const Shape& index = global_[operands[1]].shape;
  const int rank = instr.shape.rank();
  std::vector<bool> keep(static_cast<std::size_t>(rank), true);
  for (int d = 0; d < rank; ++d) keep[d] = d != dim && x[d] == index[d];
  const Layout have = keep_only(want, keep);
  const Layout* split = nullptr;
  for (std::size_t i = 1; i < 3 && !split; ++i) {
    if (layouts_[operands[i]].sharded(dim)) split = &layouts_[operands[i]];
  }
  if (!split) return -1;
  const Contraction c = contraction(*split, dim, want);
  const Layout result = c.scatter_dim >= 0 ? unsplit(have, {c.scatter_dim}) : have;
  const int extra[] = {rank};
  const auto groups = groups_over(with_extra(result, c.coords, c.tiles), extra);
  if (!groups) return -1;
  Layout rows = result;
  split_as(rows, dim, c);
  const int64_t partial = bytes_of(local_shape(instr.shape, result), instr.dtype);
  const Layout after = combined_layout(result, c);
  const bool zero_base = global_.is_zero(operands[0]);
  const int64_t cost = reshard_cost(operands[1], rows) + reshard_cost(operands[2], rows) +
                       sum_cost(partial, c.tiles, c.scatter_dim >= 0) +
                       (zero_base ? 0 : reshard_cost(operands[0], after));
  const int64_t gather_cost = reshard_cost(operands[0], have) + reshard_cost(operands[1], have) +
                              reshard_cost(operands[2], have);
  if (cost >= gather_cost) return -1;
  const Shape shape = local_shape(instr.shape, result);
  const double zero = 0;
  const int32_t zeros =
      emit(Op::kFill, instr.dtype, shape, {}, {}, std::span<const double>(&zero, 1));
  const int32_t locals[] = {zeros, operand_as(operands[1], rows), operand_as(operands[2], rows)};
  int32_t sum = combine(local_op(id, locals, shape), ReduceType::kSum, 1.0, *groups, c.scatter_dim);
  if (!zero_base) {
    const int32_t add[] = {operand_as(operands[0], after), sum};
    sum = emit(Op::kAdd, instr.dtype, local_shape(instr.shape, after), add);
  }
  return finish(id, sum, after);
}

int32_t Partitioner::lower_reshape(int32_t id) {
  const Layout& want = layouts_[id];
  const Shape& out = global_[id].shape;
  const int32_t operand = global_.operands(id)[0];
  const Shape& in = global_[operand].shape;
  Layout need = replicated(in.rank(), devices_);
  std::vector<bool> keep(static_cast<std::size_t>(out.rank()), false);
  if (in.numel() > 0) {
    int i = 0;
    int j = 0;
    while (i < in.rank() || j < out.rank()) {
      const int i0 = i;
      const int j0 = j;
      int64_t pin = 1;
      int64_t pout = 1;
      if (i < in.rank()) pin *= in[i++];
      if (j < out.rank()) pout *= out[j++];
      while (pin != pout) {
        if (pin < pout && i < in.rank()) {
          pin *= in[i++];
        } else if (j < out.rank()) {
          pout *= out[j++];
        } else {
          break;
        }
      }
      int major_in = -1;
      int major_out = -1;
      for (int d = i0; d < i && major_in < 0; ++d) {
        if (in[d] > 1) major_in = d;
      }
      for (int d = j0; d < j && major_out < 0; ++d) {
        if (out[d] > 1) major_out = d;
      }
      if (major_in >= 0 && major_out >= 0 && want.sharded(major_out) &&
          in[major_in] % want.tiles[major_out] == 0) {
        keep[major_out] = true;
        copy_dim(need, major_in, want, major_out);
      }
    }
  }
  const Layout have = keep_only(want, keep);
  return local_then_finish(id, have, [&](std::size_t) { return need; });
}

}  // namespace axle::spmd_partitioning
