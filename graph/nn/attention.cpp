// graph/nn: scaled_dot_product_attention. One fused kScaledDotProductAttention node computes it
// block by block (the scores of one block of queries against one block of keys at a time, the
// softmax online), so the [L, S] scores are never stored; its gradient is one
// kScaledDotProductAttentionBackward node, which recomputes the scores block by block from q, k
// and the logsumexp the forward kept. Torch's math reference (matmul, masking, softmax, matmul)
// stays for what the fused op does not cover: a mask that requires grad, empty dims, and a mask
// that broadcasts the result to more dims than q, k and v have.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle::nn {
namespace {

constexpr std::string_view kOp = "scaled_dot_product_attention";

// Mask kinds as the kernels' ints take them.
constexpr int64_t kNoMask = 0, kBoolMask = 1, kAddedMask = 2;

void check_arguments(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                     bool is_causal, const Loc& where) {
  ops::require_defined(kOp, q, "the query", where);
  ops::require_defined(kOp, k, "the key", where);
  ops::require_defined(kOp, v, "the value", where);
  (void)ops::common_device(kOp, {&q, &k, &v, &attn_mask}, where);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2 || q.size(-1) != k.size(-1) ||
      k.size(-2) != v.size(-2)) {
    ops::fail(kOp,
              fmt::format("expects q [..., L, E], k [..., S, E] and v [..., S, Ev], got {}, {} "
                          "and {}",
                          ops::describe(q), ops::describe(k), ops::describe(v)),
              where);
  }
  if (!is_floating(q.dtype()) || !is_floating(k.dtype()) || !is_floating(v.dtype())) {
    ops::fail(kOp,
              fmt::format("q, k and v must be floating-point, got {}, {} and {}", ops::describe(q),
                          ops::describe(k), ops::describe(v)),
              where);
  }
  if (is_causal && attn_mask.defined()) {
    ops::fail(kOp,
              fmt::format("takes is_causal or an attn_mask, not both (mask {})",
                          ops::describe(attn_mask)),
              where);
  }
  if (attn_mask.defined() && attn_mask.dtype() != DType::kBool && !is_floating(attn_mask.dtype())) {
    ops::fail(kOp,
              fmt::format("the attn_mask must be bool or floating-point, not {}",
                          ops::describe(attn_mask)),
              where);
  }
}

double scale_of(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1 / std::sqrt(static_cast<double>(q.size(-1)));
}

// The batch dims of q, k and v broadcast together, or a ShapeError naming all three.
Shape batch_shape(const Tensor& q, const Tensor& k, const Tensor& v, const Loc& where) {
  const int rank = std::max({q.dim(), k.dim(), v.dim()}) - 2;
  Shape batch;
  for (int d = 0; d < rank; ++d) {
    int64_t size = 1;
    for (const Tensor* t : {&q, &k, &v}) {
      const int own = d - (rank - (t->dim() - 2));
      const int64_t dim = own >= 0 ? t->size(own) : 1;
      if (dim != 1 && size != 1 && dim != size) {
        ops::fail(kOp,
                  fmt::format("the batch dims of q {}, k {} and v {} do not broadcast",
                              ops::describe(q), ops::describe(k), ops::describe(v)),
                  where);
      }
      if (dim != 1) size = dim;
    }
    batch.push_back(size);
  }
  return batch;
}

Shape with_dims(Shape shape, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) shape.push_back(d);
  return shape;
}

// Whether `mask` broadcasts to `shape` without adding dims or growing any.
bool fits(const Shape& mask, const Shape& shape) {
  if (mask.rank() > shape.rank()) return false;
  for (int d = mask.rank() - 1, o = shape.rank() - 1; d >= 0; --d, --o) {
    if (mask[d] != 1 && mask[d] != shape[o]) return false;
  }
  return true;
}

// The attributes both fused nodes carry: ints = [is_causal, mask kind], reals = [scale].
struct FusedAttributes {
  IntAttrs ints;
  RealAttrs reals;
};

FusedAttributes attributes_of(const Tensor& attn_mask, bool is_causal, double scale) {
  const int64_t mask = !attn_mask.defined()                ? kNoMask
                       : attn_mask.dtype() == DType::kBool ? kBoolMask
                                                           : kAddedMask;
  return {IntAttrs{is_causal ? 1 : 0, mask}, RealAttrs{scale}};
}

DType attention_dtype(const Tensor& q, const Tensor& k, const Tensor& v) {
  return promote_types(promote_types(q.dtype(), k.dtype()), v.dtype());
}

// A bool mask stays bool; an added one takes the operands' dtype (the backward's node reads it
// the same way).
NodePtr attention_mask_value(const Tensor& attn_mask, DType dtype, const Loc& where) {
  return ops::value_as(attn_mask, attn_mask.dtype() == DType::kBool ? DType::kBool : dtype, where);
}

// The logical dtype the fused kernels compute and keep the logsumexp in: f64 for f64 operands,
// else f32 (bf16 operands accumulate in f32).
DType compute_dtype(DType dtype) {
  return dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

}  // namespace

Tensor scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& attn_mask, bool is_causal,
                                         std::optional<double> scale, Loc where) {
  check_arguments(q, k, v, attn_mask, is_causal, where);
  const int64_t queries = q.size(-2), keys = k.size(-2);
  Tensor scores = mul(matmul(q, transpose(k, -2, -1, where), where), scale_of(q, scale), where);
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor causal = tril(ones({queries, keys}, DType::kBool, q.device(), where), 0, where);
    scores = masked_fill(scores, logical_not(causal, where), kMinusInf, where);
  } else if (attn_mask.defined()) {
    (void)ops::broadcast_shapes(kOp, attn_mask.shape(), scores.shape(), where, &attn_mask);
    if (attn_mask.dtype() == DType::kBool) {
      scores = masked_fill(scores, logical_not(attn_mask, where), kMinusInf, where);
    } else {
      scores = add(scores, attn_mask, where);
    }
  }
  return matmul(softmax(scores, -1, where), v, where);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale, Loc where) {
  check_arguments(q, k, v, attn_mask, is_causal, where);
  const Shape batch = batch_shape(q, k, v, where);
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  if (attn_mask.defined()) {
    (void)ops::broadcast_shapes(kOp, attn_mask.shape(), with_dims(batch, {L, S}), where,
                                &attn_mask);
  }
  const bool fused = batch.numel() > 0 && L > 0 && S > 0 && E > 0 && Ev > 0 &&
                     (!attn_mask.defined() || (!attn_mask.requires_grad() &&
                                               fits(attn_mask.shape(), with_dims(batch, {L, S}))));
  if (!fused) return scaled_dot_product_attention_math(q, k, v, attn_mask, is_causal, scale, where);

  const DType dtype = attention_dtype(q, k, v);
  const DType accumulate = compute_dtype(dtype);
  Operands operands{ops::value_as(q, dtype, where), ops::value_as(k, dtype, where),
                    ops::value_as(v, dtype, where)};
  if (attn_mask.defined()) operands.push_back(attention_mask_value(attn_mask, dtype, where));
  FusedAttributes attributes = attributes_of(attn_mask, is_causal, scale_of(q, scale));
  // [batch..., L, Ev + 1]: each query's outputs, then the logsumexp of its scores.
  const Tensor forward =
      ops::make_result(Op::kScaledDotProductAttention, accumulate, with_dims(batch, {L, Ev + 1}),
                       std::move(operands), q.device(), where, attributes.ints, attributes.reals);
  Tensor out = slice(forward, -1, 0, Ev, 1, where);
  if (accumulate != dtype) out = cast(out, dtype, where);
  if (autograd::should_record(q, k, v)) {
    if (attn_mask.defined()) {
      autograd::record(autograd::kScaledDotProductAttentionBackward, out,
                       {q, k, v, forward, attn_mask}, std::move(attributes.ints),
                       std::move(attributes.reals));
    } else {
      autograd::record(autograd::kScaledDotProductAttentionBackward, out, {q, k, v, forward},
                       std::move(attributes.ints), std::move(attributes.reals));
    }
  }
  return out;
}

}  // namespace axle::nn
