// graph/reference: scaled_dot_product_attention and its gradient as plain loops in double: each
// query's whole row of scores, its softmax shifted by the row's maximum, then the products. The
// backward ignores the logsumexp the forward kept and recomputes the softmax from scratch, so
// the CPU kernels' online softmax is checked against an independent computation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

// The shapes and broadcast strides of one attention call. q [..., L, E], k [..., S, E],
// v [..., S, Ev]; batch dims broadcast to the result's.
struct Problem {
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  Shape batch;
  Index q_strides{}, k_strides{}, v_strides{};  // in matrices, over the batch dims
  const CpuTensor* mask = nullptr;
  Index mask_strides{};  // over [batch..., L, S]
  bool causal = false, bool_mask = false;
  double scale = 1;
};

Shape batch_of(const Shape& shape) {
  Shape batch;
  for (int d = 0; d + 2 < shape.rank(); ++d) batch.push_back(shape[d]);
  return batch;
}

Problem problem_of(const OpCall& call, std::size_t mask_operand) {
  expect_ints(call, 2, "[is_causal, mask]");
  if (call.reals().size() != 1) fail(call, "reals must be [scale]");
  const CpuTensor& q = call.operand(0);
  const CpuTensor& k = call.operand(1);
  const CpuTensor& v = call.operand(2);
  for (const CpuTensor* t : {&q, &k, &v}) {
    if (t->shape.rank() < 2) fail(call, "q, k and v need rank >= 2");
    if (!is_floating(t->dtype) || t->dtype != q.dtype) {
      fail(call, "q, k and v must share one floating dtype");
    }
  }
  Problem p;
  p.L = q.shape[q.shape.rank() - 2];
  p.E = q.shape[q.shape.rank() - 1];
  p.S = k.shape[k.shape.rank() - 2];
  p.Ev = v.shape[v.shape.rank() - 1];
  if (k.shape[k.shape.rank() - 1] != p.E || v.shape[v.shape.rank() - 2] != p.S) {
    fail(call, "expects q [..., L, E], k [..., S, E] and v [..., S, Ev]");
  }
  // The forward's result is [batch..., L, Ev + 1], the backward's [batch..., L + 2 S, W].
  for (int d = 0; d + 2 < call.shape().rank(); ++d) p.batch.push_back(call.shape()[d]);
  for (const CpuTensor* t : {&q, &k, &v}) {
    if (!broadcasts_to(batch_of(t->shape), p.batch)) {
      fail(call, "the batch dims of q, k and v do not broadcast to the result's");
    }
  }
  p.q_strides = broadcast_strides(batch_of(q.shape), p.batch);
  p.k_strides = broadcast_strides(batch_of(k.shape), p.batch);
  p.v_strides = broadcast_strides(batch_of(v.shape), p.batch);
  p.causal = call.ints()[0] != 0;
  const int64_t mask_kind = call.ints()[1];
  if (mask_kind < 0 || mask_kind > 2) fail(call, "the mask kind must be 0, 1 or 2");
  if ((mask_kind != 0) != (call.operands.size() == mask_operand + 1)) {
    fail(call, "a mask kind needs the mask as the last operand, and only then");
  }
  if (mask_kind != 0) {
    p.mask = &call.operand(mask_operand);
    p.bool_mask = mask_kind == 1;
    if ((p.mask->dtype == DType::kBool) != p.bool_mask)
      fail(call, "the mask's dtype and kind differ");
    Shape scores = p.batch;
    scores.push_back(p.L);
    scores.push_back(p.S);
    if (!broadcasts_to(p.mask->shape, scores))
      fail(call, "the mask does not broadcast to [.., L, S]");
    p.mask_strides = broadcast_strides(p.mask->shape, scores);
  }
  p.scale = call.reals()[0];
  return p;
}

// The softmax of batch entry `index`'s scores ([L, S], row by row) and each row's logsumexp.
// A row that keeps no key has NaN probabilities and a logsumexp of -inf.
struct Softmax {
  std::vector<double> probs, lse;
};

Softmax softmax_of(const OpCall& call, const Problem& p, const Index& index) {
  const int rank = p.batch.rank();
  const CpuTensor& q = call.operand(0);
  const CpuTensor& k = call.operand(1);
  const int64_t q_base = offset_of(index, p.q_strides, rank) * p.L * p.E;
  const int64_t k_base = offset_of(index, p.k_strides, rank) * p.S * p.E;
  int64_t mask_base = 0;
  if (p.mask) mask_base = offset_of(index, p.mask_strides, rank);
  const int64_t mask_row = p.mask ? p.mask_strides[static_cast<std::size_t>(rank)] : 0;
  const int64_t mask_col = p.mask ? p.mask_strides[static_cast<std::size_t>(rank) + 1] : 0;
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  Softmax out{std::vector<double>(static_cast<std::size_t>(p.L * p.S)),
              std::vector<double>(static_cast<std::size_t>(p.L))};
  for (int64_t i = 0; i < p.L; ++i) {
    double* row = out.probs.data() + i * p.S;
    double top = kMinusInf;
    for (int64_t j = 0; j < p.S; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < p.E; ++e) {
        dot += real_at(q, q_base + i * p.E + e) * real_at(k, k_base + j * p.E + e);
      }
      double s = dot * p.scale;
      if (p.causal && j > i) s = kMinusInf;
      if (p.mask) {
        const int64_t at = mask_base + i * mask_row + j * mask_col;
        if (p.bool_mask) {
          if (int_at(*p.mask, at) == 0) s = kMinusInf;
        } else {
          s += real_at(*p.mask, at);
        }
      }
      row[j] = s;
      top = std::max(top, s);
    }
    double z = 0;
    for (int64_t j = 0; j < p.S; ++j) z += (row[j] = std::exp(row[j] - top));
    for (int64_t j = 0; j < p.S; ++j) row[j] /= z;
    out.lse[static_cast<std::size_t>(i)] = top == kMinusInf ? kMinusInf : top + std::log(z);
  }
  return out;
}

// [q, k, v (, mask)] -> [batch..., L, Ev + 1]: outputs, then each row's logsumexp.
CpuTensor attention(const OpCall& call) {
  const Problem p = problem_of(call, 3);
  Shape expected = p.batch;
  expected.push_back(p.L);
  expected.push_back(p.Ev + 1);
  if (!(expected == call.shape())) fail(call, "the result must be [batch..., L, Ev + 1]");
  const CpuTensor& v = call.operand(2);
  const int rank = p.batch.rank();
  CpuTensor out = result_of(call);
  int64_t entry = 0;
  for_each_index(p.batch, [&](const Index& index) {
    const Softmax softmax = softmax_of(call, p, index);
    const int64_t v_base = offset_of(index, p.v_strides, rank) * p.S * p.Ev;
    const int64_t out_base = entry++ * p.L * (p.Ev + 1);
    for (int64_t i = 0; i < p.L; ++i) {
      for (int64_t d = 0; d < p.Ev; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < p.S; ++j) {
          acc += softmax.probs[i * p.S + j] * real_at(v, v_base + j * p.Ev + d);
        }
        store_real(out, out_base + i * (p.Ev + 1) + d, acc);
      }
      store_real(out, out_base + i * (p.Ev + 1) + p.Ev, softmax.lse[static_cast<std::size_t>(i)]);
    }
  });
  return out;
}

// [q, k, v, forward output, grad (, mask)] -> [batch..., L + 2 S, max(E, Ev)]: per batch entry
// the rows of dq, dk and dv, each padded with zeros. With P the softmax and dO the grad: dv_j =
// sum_i P_ij dO_i; dS_ij = P_ij (dO_i . v_j - sum_l P_il dO_i . v_l); dq_i = scale sum_j dS_ij k_j;
// dk_j = scale sum_i dS_ij q_i.
CpuTensor attention_backward(const OpCall& call) {
  expect_operands(call, call.ints().size() >= 2 && call.ints()[1] != 0 ? 6 : 5);
  const Problem p = problem_of(call, 5);
  const CpuTensor& q = call.operand(0);
  const CpuTensor& k = call.operand(1);
  const CpuTensor& v = call.operand(2);
  const CpuTensor& grad = call.operand(4);
  Shape expected = p.batch;
  const int64_t width = std::max(p.E, p.Ev);
  expected.push_back(p.L + 2 * p.S);
  expected.push_back(width);
  if (!(expected == call.shape())) {
    fail(call, "the result must be [batch..., L + 2 S, max(E, Ev)]");
  }
  Shape grad_shape = p.batch;
  grad_shape.push_back(p.L);
  grad_shape.push_back(p.Ev);
  if (!(grad.shape == grad_shape)) fail(call, "the grad must be [batch..., L, Ev]");
  const int rank = p.batch.rank();
  CpuTensor out = result_of(call);
  int64_t entry = 0;
  for_each_index(p.batch, [&](const Index& index) {
    const std::vector<double> probs = softmax_of(call, p, index).probs;
    const int64_t q_base = offset_of(index, p.q_strides, rank) * p.L * p.E;
    const int64_t k_base = offset_of(index, p.k_strides, rank) * p.S * p.E;
    const int64_t v_base = offset_of(index, p.v_strides, rank) * p.S * p.Ev;
    const int64_t g_base = entry * p.L * p.Ev;
    const int64_t dq_base = entry * (p.L + 2 * p.S) * width;
    const int64_t dk_base = dq_base + p.L * width, dv_base = dk_base + p.S * width;
    ++entry;
    // dS, row by row.
    std::vector<double> ds(static_cast<std::size_t>(p.L * p.S));
    for (int64_t i = 0; i < p.L; ++i) {
      double d = 0;
      for (int64_t j = 0; j < p.S; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < p.Ev; ++c) {
          dp += real_at(grad, g_base + i * p.Ev + c) * real_at(v, v_base + j * p.Ev + c);
        }
        ds[i * p.S + j] = dp;
        d += probs[i * p.S + j] * dp;
      }
      for (int64_t j = 0; j < p.S; ++j)
        ds[i * p.S + j] = probs[i * p.S + j] * (ds[i * p.S + j] - d);
    }
    for (int64_t i = 0; i < p.L; ++i) {
      for (int64_t e = 0; e < p.E; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < p.S; ++j) acc += ds[i * p.S + j] * real_at(k, k_base + j * p.E + e);
        store_real(out, dq_base + i * width + e, acc * p.scale);
      }
    }
    for (int64_t j = 0; j < p.S; ++j) {
      for (int64_t e = 0; e < p.E; ++e) {
        double acc = 0;
        for (int64_t i = 0; i < p.L; ++i) acc += ds[i * p.S + j] * real_at(q, q_base + i * p.E + e);
        store_real(out, dk_base + j * width + e, acc * p.scale);
      }
      for (int64_t c = 0; c < p.Ev; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < p.L; ++i) {
          acc += probs[i * p.S + j] * real_at(grad, g_base + i * p.Ev + c);
        }
        store_real(out, dv_base + j * width + c, acc);
      }
    }
  });
  return out;
}

}  // namespace

CpuTensor evaluate_attention(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kScaledDotProductAttention:
      expect_operands(call, call.ints().size() >= 2 && call.ints()[1] != 0 ? 4 : 3);
      return attention(call);
    case Op::kScaledDotProductAttentionBackward:
      return attention_backward(call);
    default:
      fail(call, "is not an attention op");
  }
}

}  // namespace axle::reference::detail
