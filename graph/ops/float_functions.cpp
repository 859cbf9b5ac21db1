// graph/ops: the floating-point functions of one tensor, one row each. A function of an integer
// or bool tensor computes in f32, as torch's do. Derivatives trace the values they need again
// from the saved operand (exp(x), tanh(x), ...): the same op on the same operand is the same IR,
// which the compiler's CSE merges with the forward's.
#include "axle/graph/ops/float_functions.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "axle/graph/op_util.h"

namespace axle {
namespace {

using autograd::GradList;

void exp_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = mul(g, exp(fn.input(0)));
}

void log_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = div(g, fn.input(0));
}

void sqrt_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = div(g, mul(sqrt(fn.input(0)), 2.0));
}

void rsqrt_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor r = rsqrt(fn.input(0));  // d/dx x^(-1/2) = -r^3 / 2
  grads[0] = mul(g, mul(mul(r, mul(r, r)), -0.5));
}

void tanh_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor t = tanh(fn.input(0));
  grads[0] = mul(g, 1.0 - mul(t, t));
}

void sigmoid_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor s = sigmoid(fn.input(0));
  grads[0] = mul(g, mul(s, 1.0 - s));
}

void sin_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = mul(g, cos(fn.input(0)));
}

void cos_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = neg(mul(g, sin(fn.input(0))));
}

void erf_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);  // d/dx erf(x) = 2 / sqrt(pi) exp(-x^2)
  grads[0] = mul(g, mul(exp(neg(mul(x, x))), std::numbers::inv_sqrtpi * 2));
}

void log1p_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = div(g, add(fn.input(0), 1.0));
}

// softplus with torch's defaults (beta 1, threshold 20), the kernel's.
constexpr double kSoftplusThreshold = 20;

void softplus_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);  // sigmoid(x), and exactly 1 past the threshold
  grads[0] = where(gt(x, kSoftplusThreshold), g, mul(g, sigmoid(x)));
}

// clang-format off
constexpr ops::FloatFunction kRows[] = {
    {Op::kExp,     true,  {"ExpBackward", exp_backward},         [](double x) { return std::exp(x); }},
    {Op::kLog,     true,  {"LogBackward", log_backward},         [](double x) { return std::log(x); }},
    {Op::kSqrt,    false, {"SqrtBackward", sqrt_backward},       [](double x) { return std::sqrt(x); }},
    {Op::kRsqrt,   true,  {"RsqrtBackward", rsqrt_backward},     [](double x) { return 1 / std::sqrt(x); }},
    {Op::kTanh,    false, {"TanhBackward", tanh_backward},       [](double x) { return std::tanh(x); }},
    {Op::kSigmoid, false, {"SigmoidBackward", sigmoid_backward}, [](double x) { return 1 / (1 + std::exp(-x)); }},
    {Op::kSin,     false, {"SinBackward", sin_backward},         [](double x) { return std::sin(x); }},
    {Op::kCos,     false, {"CosBackward", cos_backward},         [](double x) { return std::cos(x); }},
    {Op::kErf,     false, {"ErfBackward", erf_backward},         [](double x) { return std::erf(x); }},
    {Op::kLog1p,   true,  {"Log1PBackward", log1p_backward},     [](double x) { return std::log1p(x); }},
    {Op::kSoftplus, true, {"SoftplusBackward", softplus_backward},
     [](double x) { return x > kSoftplusThreshold ? x : std::log1p(std::exp(x)); }},
};
// clang-format on

constexpr std::size_t kNumOps = static_cast<std::size_t>(Op::kCount);

// Each float function's row by op number; a function of the list without a row is a build
// mistake reported on first use.
const std::array<const ops::FloatFunction*, kNumOps>& rows_by_op() {
  static const std::array<const ops::FloatFunction*, kNumOps> kByOp = [] {
    std::array<const ops::FloatFunction*, kNumOps> by_op{};
    for (const ops::FloatFunction& row : kRows) by_op[static_cast<std::size_t>(row.op)] = &row;
    for (std::size_t i = 0; i < kNumOps; ++i) {
      const auto op = static_cast<Op>(i);
      if (op_family(op) == OpFamily::kFloatFunction && !by_op[i]) {
        throw std::logic_error(fmt::format(
            "float function {} has no row in graph/ops/float_functions.cpp", op_name(op)));
      }
    }
    return by_op;
  }();
  return kByOp;
}

Tensor traced(Op op, const Tensor& x, const Loc& where) {
  const ops::FloatFunction& row = ops::float_function(op);
  ops::require_defined(op_name(op), x, "the operand", where);
  if (row.autocast_f32 && ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return traced(op, ops::autocast_cast(x, DType::kFloat32, where), where);
  }
  const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::kFloat32;
  Tensor out = ops::make_result(op, dtype, x.shape(), Operands{ops::value_as(x, dtype, where)},
                                x.device(), where);
  if (autograd::should_record(x)) autograd::record(row.derivative, out, {x});
  return out;
}

}  // namespace

const ops::FloatFunction& ops::float_function(Op op) {
  const auto i = static_cast<std::size_t>(op);
  const FloatFunction* row = i < kNumOps ? rows_by_op()[i] : nullptr;
  if (!row) throw std::logic_error(fmt::format("{} is not a float function", op_name(op)));
  return *row;
}

Tensor exp(const Tensor& x, Loc where) { return traced(Op::kExp, x, where); }
Tensor log(const Tensor& x, Loc where) { return traced(Op::kLog, x, where); }
Tensor sqrt(const Tensor& x, Loc where) { return traced(Op::kSqrt, x, where); }
Tensor rsqrt(const Tensor& x, Loc where) { return traced(Op::kRsqrt, x, where); }
Tensor tanh(const Tensor& x, Loc where) { return traced(Op::kTanh, x, where); }
Tensor sigmoid(const Tensor& x, Loc where) { return traced(Op::kSigmoid, x, where); }
Tensor sin(const Tensor& x, Loc where) { return traced(Op::kSin, x, where); }
Tensor cos(const Tensor& x, Loc where) { return traced(Op::kCos, x, where); }
Tensor erf(const Tensor& x, Loc where) { return traced(Op::kErf, x, where); }
Tensor log1p(const Tensor& x, Loc where) { return traced(Op::kLog1p, x, where); }

Tensor softplus(const Tensor& x, double beta, double threshold, Loc where) {
  if (beta == 1 && threshold == kSoftplusThreshold) return traced(Op::kSoftplus, x, where);
  // Other parameters compose, as torch computes them: x where beta x > threshold, else
  // log1p(exp(beta x)) / beta, whose exp never sees more than the threshold (no inf whose
  // gradient, masked by where, would be NaN).
  const Tensor scaled = mul(x, beta, where);
  const Tensor soft =
      div(log1p(exp(clamp(scaled, std::nullopt, threshold, where), where), where), beta, where);
  return axle::where(gt(scaled, threshold, where), x, soft, where);
}

}  // namespace axle
