// graph/reference: reductions (sum, mean, max, min, logsumexp, argmax), softmax / log_softmax,
// and the ops along one dim (cumsum, topk), as the CPU backend's kernels: sums in double
// (integers and bool in wrapping 64 bits), NaN wins max and min, the mean of nothing is NaN,
// logsumexp and softmax are shifted by the maximum, topk puts NaN above every number and equal
// values in index order.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

// Calls f(o, terms) for every output element o in row-major order, with `terms` the flat indices
// of the input elements it reduces, in row-major order. `dims` are sorted, unique and in range.
template <class F>
void for_each_output(const Shape& in, std::span<const int64_t> dims, F&& f) {
  Shape kept, reduced;
  for (int d = 0; d < in.rank(); ++d) {
    const bool is_reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    kept.push_back(is_reduced ? 1 : in[d]);
    reduced.push_back(is_reduced ? in[d] : 1);
  }
  const Index strides = strides_of(in);
  std::vector<int64_t> terms;
  int64_t o = 0;
  for_each_index(kept, [&](const Index& k) {
    const int64_t base = offset_of(k, strides, in.rank());
    terms.clear();
    for_each_index(
        reduced, [&](const Index& r) { terms.push_back(base + offset_of(r, strides, in.rank())); });
    f(o++, std::span<const int64_t>(terms));
  });
}

// Checks `dims` against the input and the node's shape (which reflects keepdim).
void check_reduction(const OpCall& call, std::span<const int64_t> dims, bool keepdim) {
  const Shape& in = call.operand(0).shape;
  Shape expected;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= in.rank() || (i > 0 && dims[i] <= dims[i - 1])) {
      fail(call, fmt::format("reduced dims [{}] must be sorted, unique and in [0, {})",
                             fmt::join(dims, ","), in.rank()));
    }
  }
  for (int d = 0; d < in.rank(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced || keepdim) expected.push_back(reduced ? 1 : in[d]);
  }
  if (!(expected == call.shape())) {
    fail(call,
         fmt::format("reducing dims [{}] gives {}", fmt::join(dims, ","), expected.to_string()));
  }
}

// NaN wins; otherwise the first of equal values stays.
double extreme_step(bool is_max, double acc, double x) {
  return ((is_max ? x > acc : x < acc) || std::isnan(x)) ? x : acc;
}

double max_of(const CpuTensor& x, std::span<const int64_t> terms) {
  double acc = -std::numeric_limits<double>::infinity();
  for (int64_t t : terms) acc = extreme_step(true, acc, real_at(x, t));
  return acc;
}

double sum_of_exp(const CpuTensor& x, std::span<const int64_t> terms, double shift) {
  double total = 0;
  for (int64_t t : terms) total += std::exp(real_at(x, t) - shift);
  return total;
}

// kSum kMean kReduceMax kReduceMin kLogSumExp; ints = [keepdim, dims...].
CpuTensor reduce(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 1, "[keepdim, dims...]");
  const Op op = call.node.op();
  const CpuTensor& x = call.operand(0);
  const std::span<const int64_t> dims = call.ints().subspan(1);
  check_reduction(call, dims, call.ints()[0] != 0);
  // sum may widen (torch sums bool and s32 into s64); the others keep the input's dtype.
  if (op != Op::kSum) expect_dtype(call, "the result", call.dtype(), x.dtype);
  if ((op == Op::kMean || op == Op::kLogSumExp) && !is_floating(x.dtype)) {
    fail(call, fmt::format("not defined for {}", dtype_name(x.dtype)));
  }
  const bool is_max = op == Op::kReduceMax;
  CpuTensor out = result_of(call);
  for_each_output(x.shape, dims, [&](int64_t o, std::span<const int64_t> terms) {
    if ((op == Op::kReduceMax || op == Op::kReduceMin) && terms.empty()) {
      fail(call, "cannot reduce over a dim of size 0 (max and min have no identity)");
    }
    if (op == Op::kSum && !is_floating(x.dtype)) {
      int64_t total = 0;
      for (int64_t t : terms) total = wrapping_add(total, int_at(x, t));
      return store_int(out, o, total);
    }
    if ((op == Op::kReduceMax || op == Op::kReduceMin) && !is_floating(x.dtype)) {
      int64_t best = int_at(x, terms[0]);
      for (int64_t t : terms)
        best = is_max ? std::max(best, int_at(x, t)) : std::min(best, int_at(x, t));
      return store_int(out, o, best);
    }
    double value = 0;
    if (op == Op::kSum || op == Op::kMean) {
      for (int64_t t : terms) value += real_at(x, t);
      // 0 / 0 is NaN: the mean of nothing, as torch.
      if (op == Op::kMean) value /= static_cast<double>(terms.size());
    } else if (op == Op::kReduceMax || op == Op::kReduceMin) {
      value = is_max ? -std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::infinity();
      for (int64_t t : terms) value = extreme_step(is_max, value, real_at(x, t));
    } else {
      // Shifting by an infinite maximum would give inf - inf; shifting by 0 gives the right
      // +inf, or -inf for an all -inf (or empty) set.
      const double max = max_of(x, terms);
      const double shift = std::isinf(max) ? 0.0 : max;
      value = std::log(sum_of_exp(x, terms, shift)) + shift;
    }
    store_real(out, o, value);
  });
  return out;
}

// ints = [keepdim, dim]: the index of the first maximum; a NaN counts as the maximum, so the
// first NaN wins.
CpuTensor argmax(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 2, "[keepdim, dim]");
  const CpuTensor& x = call.operand(0);
  check_reduction(call, call.ints().subspan(1, 1), call.ints()[0] != 0);
  expect_dtype(call, "the result", call.dtype(), DType::kInt64);
  CpuTensor out = result_of(call);
  for_each_output(x.shape, call.ints().subspan(1, 1),
                  [&](int64_t o, std::span<const int64_t> terms) {
                    if (terms.empty()) fail(call, "the reduced dim has size 0");
                    int64_t at = 0;
                    for (std::size_t r = 1; r < terms.size(); ++r) {
                      const bool take = is_floating(x.dtype)
                                            ? !std::isnan(real_at(x, terms[at])) &&
                                                  (real_at(x, terms[r]) > real_at(x, terms[at]) ||
                                                   std::isnan(real_at(x, terms[r])))
                                            : int_at(x, terms[r]) > int_at(x, terms[at]);
                      if (take) at = static_cast<int64_t>(r);
                    }
                    store_int(out, o, at);
                  });
  return out;
}

// ints = [dim]. Shifted by the plain maximum, as torch: a row that is all -inf, or holds +inf or
// NaN, comes out NaN.
CpuTensor softmax(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 1, "[dim]");
  const CpuTensor& x = call.operand(0);
  expect_dtype(call, "the result", call.dtype(), x.dtype);
  if (!is_floating(x.dtype)) fail(call, fmt::format("not defined for {}", dtype_name(x.dtype)));
  const int64_t dim = call.ints()[0];
  if (!(x.shape == call.shape()) || dim < 0 || dim >= std::max(x.shape.rank(), 1)) {
    fail(call,
         fmt::format("dim {} is out of range, or the result's shape is not the input's", dim));
  }
  const bool is_log = call.node.op() == Op::kLogSoftmax;
  // A 0-d input is one row of one element.
  const Shape shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  CpuTensor out = result_of(call);
  const int64_t dims[] = {dim};
  for_each_output(shape, dims, [&](int64_t, std::span<const int64_t> terms) {
    const double max = max_of(x, terms);
    const double total = sum_of_exp(x, terms, max);
    for (int64_t t : terms) {
      const double shifted = real_at(x, t) - max;
      store_real(out, t, is_log ? shifted - std::log(total) : std::exp(shifted) / total);
    }
  });
  return out;
}

// layer_norm's normalisation of x over its last k dims, or (kLayerNormBackward, operands
// [grad, x]) the gradient of x given the normalisation's: all in double, each row two-pass.
CpuTensor layer_norm(const OpCall& call) {
  const bool backward = call.node.op() == Op::kLayerNormBackward;
  expect_operands(call, backward ? 2 : 1);
  expect_ints(call, 1, "[k]");
  const CpuTensor& x = call.operand(backward ? 1 : 0);
  expect_dtype(call, "the result", call.dtype(), x.dtype);
  if (!is_floating(x.dtype)) fail(call, fmt::format("not defined for {}", dtype_name(x.dtype)));
  const int64_t k = call.ints()[0];
  if (!(x.shape == call.shape()) || k < 1 || k > x.shape.rank() || call.reals().size() != 1 ||
      (backward && !(call.operand(0).shape == x.shape))) {
    fail(call, fmt::format("k = {} must be in [1, rank], with reals = [eps] and every operand of "
                           "the result's shape",
                           k));
  }
  std::vector<int64_t> dims;
  for (int64_t d = x.shape.rank() - k; d < x.shape.rank(); ++d) dims.push_back(d);
  CpuTensor out = result_of(call);
  for_each_output(x.shape, dims, [&](int64_t, std::span<const int64_t> terms) {
    const auto n = static_cast<double>(terms.size());
    double mean = 0, squares = 0;
    for (int64_t t : terms) mean += real_at(x, t);
    mean /= n;
    for (int64_t t : terms) squares += (real_at(x, t) - mean) * (real_at(x, t) - mean);
    const double rstd = 1 / std::sqrt(squares / n + call.reals()[0]);
    double g_mean = 0, gx_mean = 0;
    if (backward) {
      for (int64_t t : terms) {
        g_mean += real_at(call.operand(0), t) / n;
        gx_mean += real_at(call.operand(0), t) * (real_at(x, t) - mean) * rstd / n;
      }
    }
    for (int64_t t : terms) {
      const double xhat = (real_at(x, t) - mean) * rstd;
      store_real(out, t,
                 backward ? rstd * (real_at(call.operand(0), t) - g_mean - xhat * gx_mean) : xhat);
    }
  });
  return out;
}

// Checks that `dim` is a dim of x, of size at least 1 (0-d x: treated as [1]).
int64_t dim_of(const OpCall& call, int64_t dim) {
  const CpuTensor& x = call.operand(0);
  if (dim < 0 || dim >= std::max(x.shape.rank(), 1)) {
    fail(call, fmt::format("dim {} is out of range for {}", dim, x.shape.to_string()));
  }
  return dim;
}

// ints = [dim, reverse]. Running sums in double (integers in wrapping 64 bits), each stored
// rounded.
CpuTensor cumsum(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 2, "[dim, reverse]");
  const CpuTensor& x = call.operand(0);
  expect_dtype(call, "the result", call.dtype(), x.dtype);
  if (x.dtype == DType::kBool) fail(call, "not defined for pred");
  if (!(x.shape == call.shape())) fail(call, "the result's shape is not the input's");
  const int64_t dims[] = {dim_of(call, call.ints()[0])};
  const bool reverse = call.ints()[1] != 0;
  const Shape shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  CpuTensor out = result_of(call);
  for_each_output(shape, dims, [&](int64_t, std::span<const int64_t> terms) {
    double real = 0;
    int64_t integer = 0;
    const auto n = static_cast<int64_t>(terms.size());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t t = terms[static_cast<std::size_t>(reverse ? n - 1 - j : j)];
      if (is_floating(x.dtype)) {
        real += real_at(x, t);
        store_real(out, t, real);
      } else {
        integer = wrapping_add(integer, int_at(x, t));
        store_int(out, t, integer);
      }
    }
  });
  return out;
}

// ints = [dim, k, largest]; s64 positions along dim, best first.
CpuTensor topk(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 3, "[dim, k, largest]");
  expect_dtype(call, "the result", call.dtype(), DType::kInt64);
  const CpuTensor& x = call.operand(0);
  const int64_t dim = dim_of(call, call.ints()[0]);
  const int64_t k = call.ints()[1];
  const bool largest = call.ints()[2] != 0;
  const Shape shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  Shape expected = shape;
  if (k < 0 || k > shape[static_cast<int>(dim)]) {
    fail(call, fmt::format("k = {} is not in [0, {}]", k, shape[static_cast<int>(dim)]));
  }
  expected[static_cast<int>(dim)] = k;
  if (expected.numel() != call.shape().numel()) {
    fail(call, fmt::format("the result should hold {} elements", expected.numel()));
  }
  // above(a, b): a is the larger, NaN above every number; equal values keep their order.
  auto above = [](double a, double b) { return (std::isnan(a) && !std::isnan(b)) || a > b; };
  CpuTensor out = result_of(call);
  const Index out_strides = strides_of(expected);
  const int64_t dims[] = {dim};
  std::vector<int64_t> order;
  for_each_output(shape, dims, [&](int64_t o, std::span<const int64_t> terms) {
    order.resize(terms.size());
    for (std::size_t j = 0; j < terms.size(); ++j) order[j] = static_cast<int64_t>(j);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double va = real_at(x, terms[static_cast<std::size_t>(a)]);
      const double vb = real_at(x, terms[static_cast<std::size_t>(b)]);
      return largest ? above(va, vb) : above(vb, va);
    });
    // Output o's first element: o counts the kept positions row-major, with dim of size 1.
    Index kept{};
    int64_t rest = o;
    for (int d = shape.rank() - 1; d >= 0; --d) {
      const int64_t size = d == dim ? 1 : shape[d];
      kept[static_cast<std::size_t>(d)] = rest % size;
      rest /= size;
    }
    const int64_t base = offset_of(kept, out_strides, shape.rank());
    for (int64_t j = 0; j < k; ++j) {
      store_int(out, base + j * out_strides[static_cast<std::size_t>(dim)],
                order[static_cast<std::size_t>(j)]);
    }
  });
  return out;
}

}  // namespace

CpuTensor evaluate_reduction(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kSum:
    case Op::kMean:
    case Op::kReduceMax:
    case Op::kReduceMin:
    case Op::kLogSumExp:
      return reduce(call);
    case Op::kArgMax:
      return argmax(call);
    case Op::kSoftmax:
    case Op::kLogSoftmax:
      return softmax(call);
    case Op::kLayerNorm:
    case Op::kLayerNormBackward:
      return layer_norm(call);
    case Op::kCumsum:
      return cumsum(call);
    case Op::kTopK:
      return topk(call);
    default:
      fail(call, "is not a reduction");
  }
}

}  // namespace axle::reference::detail
