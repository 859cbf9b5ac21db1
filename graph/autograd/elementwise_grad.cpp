// graph/autograd: derivatives of the elementwise ops. Gradients are left in the result's
// (broadcast) shape and dtype; backward() sums and casts them to each operand's. Values the
// derivative needs from the forward pass (exp(x), tanh(x), ...) are traced again from the saved
// operands: the same op on the same operands is the same IR, which the compiler's CSE merges
// with the forward's, so they cost nothing when forward and backward run in one step.
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"

namespace axle::autograd {
namespace {

// g where `keep` holds, else 0.
Tensor masked(const Tensor& keep, const Tensor& g) { return where(keep, g, scalar_zero(g)); }

// ---- two tensors ----

void add_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  if (fn.needs_grad(0)) grads[0] = g;
  if (fn.needs_grad(1)) grads[1] = g;
}

void sub_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  if (fn.needs_grad(0)) grads[0] = g;
  if (fn.needs_grad(1)) grads[1] = neg(g);
}

void mul_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  if (fn.needs_grad(0)) grads[0] = mul(g, fn.input(1));
  if (fn.needs_grad(1)) grads[1] = mul(g, fn.input(0));
}

void div_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& a = fn.input(0);
  const Tensor& b = fn.input(1);
  const Tensor ga = div(g, b);
  if (fn.needs_grad(0)) grads[0] = ga;
  if (fn.needs_grad(1)) grads[1] = neg(div(mul(ga, a), b));  // -g a / b^2
}

void pow_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& a = fn.input(0);
  const Tensor& b = fn.input(1);
  // As torch: a zero exponent has a zero gradient for the base (even at a = 0, where
  // b * a^(b-1) is nan), and a zero base with a non-negative exponent has a zero gradient for
  // the exponent (log 0 is -inf).
  if (fn.needs_grad(0)) {
    grads[0] = masked(logical_not(eq(b, 0.0)), mul(g, mul(b, pow(a, sub(b, 1.0)))));
  }
  if (fn.needs_grad(1)) {
    const Tensor zero_base = logical_and(eq(a, 0.0), logical_not(lt(b, 0.0)));
    grads[1] = masked(logical_not(zero_base), mul(g, mul(pow(a, b), log(a))));
  }
}

// Ties split the gradient in half between the operands, as torch does.
void extremum_backward(const GradFn& fn, const Tensor& g, GradList& grads, bool is_max) {
  const Tensor& a = fn.input(0);
  const Tensor& b = fn.input(1);
  const Tensor tie = eq(a, b);
  const Tensor half = mul(g, 0.5);
  auto share = [&](const Tensor& wins) { return where(wins, g, masked(tie, half)); };
  if (fn.needs_grad(0)) grads[0] = share(is_max ? gt(a, b) : lt(a, b));
  if (fn.needs_grad(1)) grads[1] = share(is_max ? gt(b, a) : lt(b, a));
}

void maximum_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  extremum_backward(fn, g, grads, true);
}
void minimum_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  extremum_backward(fn, g, grads, false);
}

// ---- a tensor and a scalar: reals = [scalar], ints = [scalar_first] ----

void scalar_add_backward(const GradFn&, const Tensor& g, GradList& grads) { grads[0] = g; }

void scalar_sub_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = fn.ints()[0] ? neg(g) : g;
}

void scalar_mul_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = mul(g, fn.reals()[0]);
}

void scalar_div_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const double s = fn.reals()[0];
  if (!fn.ints()[0]) {
    grads[0] = div(g, s);
    return;
  }
  const Tensor& x = fn.input(0);  // s / x
  grads[0] = neg(div(mul(g, s), mul(x, x)));
}

void scalar_pow_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const double e = fn.reals()[0];
  const Tensor& x = fn.input(0);
  grads[0] = e == 0 ? mul(g, 0.0) : mul(g, mul(pow(x, e - 1), e));
}

// ---- one tensor ----

void neg_backward(const GradFn&, const Tensor& g, GradList& grads) { grads[0] = neg(g); }

void relu_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = relu_grad_through_max_pool(fn.input(0), g);
  if (!grads[0].defined()) grads[0] = masked(gt(fn.input(0), 0.0), g);
}

void abs_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);  // sign(x) g, 0 at 0 (as torch)
  grads[0] = where(gt(x, 0.0), g, masked(lt(x, 0.0), neg(g)));
}

void gelu_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = axle::gelu_backward(g, fn.input(0), fn.ints()[0] == 0 ? "none" : "tanh");
}

// The derivative of grad * gelu'(x): gelu'(x) for grad (one more gelu_backward), grad * gelu''(x)
// for x, with gelu''(x) = phi(x) (2 - x^2) in the erf form, and in the tanh form (u = k (x + c
// x^3), t = tanh(u)) (1 - t^2) (u' - x t u'^2 + x u'' / 2).
void gelu_backward_backward(const GradFn& fn, const Tensor& h, GradList& grads) {
  const Tensor& grad = fn.input(0);
  const Tensor& x = fn.input(1);
  const bool tanh_form = fn.ints()[0] != 0;
  if (fn.needs_grad(0)) grads[0] = axle::gelu_backward(h, x, tanh_form ? "tanh" : "none");
  if (!fn.needs_grad(1)) return;
  const Tensor x2 = mul(x, x);
  Tensor second;
  if (!tanh_form) {
    const Tensor pdf = mul(exp(mul(x2, -0.5)), 1 / std::sqrt(2 * std::numbers::pi));
    second = mul(pdf, 2.0 - x2);
  } else {
    const double k = std::sqrt(2 / std::numbers::pi);
    constexpr double c = 0.044715;
    const Tensor t = tanh(mul(add(x, mul(mul(x2, x), c)), k));
    const Tensor du = mul(add(mul(x2, 3 * c), 1.0), k);
    const Tensor d2u = mul(x, 6 * c * k);
    second = mul(1.0 - mul(t, t), add(sub(du, mul(mul(x, t), mul(du, du))), mul(mul(x, d2u), 0.5)));
  }
  grads[1] = mul(mul(h, grad), second);
}

// As torch: x takes the gradient where min <= x <= max (a NaN x takes none). A tensor min takes
// it where x < min < max, a tensor max where x > max or max < min (min > max makes every element
// max).
void clamp_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  Tensor inside = eq(x, x);  // not NaN
  if (fn.ints()[0] != 0) inside = logical_and(inside, logical_not(lt(x, fn.reals()[0])));
  if (fn.ints()[1] != 0) inside = logical_and(inside, logical_not(gt(x, fn.reals()[1])));
  grads[0] = masked(inside, g);
}

void clamp_tensor_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  const bool has_min = fn.ints()[0] != 0, has_max = fn.ints()[1] != 0;
  const Tensor* min = has_min ? &fn.input(1) : nullptr;
  const Tensor* max = has_max ? &fn.input(has_min ? 2 : 1) : nullptr;
  if (fn.needs_grad(0)) {
    Tensor inside;
    if (min) inside = ge(x, *min);
    if (max) inside = inside.defined() ? logical_and(inside, le(x, *max)) : le(x, *max);
    grads[0] = masked(inside, g);
  }
  if (min && fn.needs_grad(1)) {
    grads[1] = masked(max ? logical_and(lt(x, *min), lt(*min, *max)) : lt(x, *min), g);
  }
  if (max && fn.needs_grad(has_min ? 2 : 1)) {
    grads[has_min ? 2 : 1] = masked(min ? logical_or(gt(x, *max), lt(*max, *min)) : gt(x, *max), g);
  }
}

void where_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& condition = fn.input(0);
  if (fn.needs_grad(1)) grads[1] = masked(condition, g);
  if (fn.needs_grad(2)) grads[2] = where(condition, scalar_zero(g), g);
}

// The cast back to the operand's dtype is backward()'s, as for every gradient.
void cast_backward(const GradFn&, const Tensor& g, GradList& grads) { grads[0] = g; }

[[noreturn]] void no_derivative(Op op) {
  throw std::logic_error(std::string("autograd: no derivative for ") + std::string(op_name(op)));
}

}  // namespace

const Derivative kWhereBackward{"WhereBackward", where_backward};
const Derivative kCastBackward{"CastBackward", cast_backward};
const Derivative kClampBackward{"ClampBackward", clamp_backward};
const Derivative kClampTensorBackward{"ClampBackward", clamp_tensor_backward};

const Derivative& binary_derivative(Op op) {
  static const Derivative kAdd{"AddBackward", add_backward};
  static const Derivative kSub{"SubBackward", sub_backward};
  static const Derivative kMul{"MulBackward", mul_backward};
  static const Derivative kDiv{"DivBackward", div_backward};
  static const Derivative kPow{"PowBackward", pow_backward};
  static const Derivative kMaximum{"MaximumBackward", maximum_backward};
  static const Derivative kMinimum{"MinimumBackward", minimum_backward};
  switch (op) {
    case Op::kAdd:
      return kAdd;
    case Op::kSub:
      return kSub;
    case Op::kMul:
      return kMul;
    case Op::kDiv:
      return kDiv;
    case Op::kPow:
      return kPow;
    case Op::kMaximum:
      return kMaximum;
    case Op::kMinimum:
      return kMinimum;
    default:
      no_derivative(op);
  }
}

const Derivative& scalar_derivative(Op op) {
  static const Derivative kAdd{"AddBackward", scalar_add_backward};
  static const Derivative kSub{"SubBackward", scalar_sub_backward};
  static const Derivative kMul{"MulBackward", scalar_mul_backward};
  static const Derivative kDiv{"DivBackward", scalar_div_backward};
  static const Derivative kPow{"PowBackward", scalar_pow_backward};
  switch (op) {
    case Op::kAdd:
      return kAdd;
    case Op::kSub:
      return kSub;
    case Op::kMul:
      return kMul;
    case Op::kDiv:
      return kDiv;
    case Op::kPow:
      return kPow;
    default:
      no_derivative(op);
  }
}

const Derivative kGeluBackwardBackward{"GeluBackwardBackward", gelu_backward_backward};

const Derivative& unary_derivative(Op op) {
  static const Derivative kNeg{"NegBackward", neg_backward};
  static const Derivative kRelu{"ReluBackward", relu_backward};
  static const Derivative kGelu{"GeluBackward", gelu_backward};
  static const Derivative kAbs{"AbsBackward", abs_backward};
  switch (op) {
    case Op::kNeg:
      return kNeg;
    case Op::kRelu:
      return kRelu;
    case Op::kGelu:
      return kGelu;
    case Op::kAbs:
      return kAbs;
    default:
      no_derivative(op);
  }
}

}  // namespace axle::autograd
