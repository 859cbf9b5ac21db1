// graph/ops: elementwise ops — arithmetic, comparison, logical, neg abs relu gelu, casts (the
// float functions, exp and the like, are float_functions.cpp's). Under autocast, pow runs in f32
// (PyTorch's f32 list) and relu in the region's dtype (PyTorch/XLA's lower-precision list); the
// others follow type promotion.
#include <fmt/format.h>
#include <cmath>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

enum class Kind { kArithmetic, kTrueDivision, kComparison, kLogical };

// As torch: ops with no meaning on preds refuse them (subtracting or negating a mask is a
// mistake torch points to logical_not for).
void refuse_pred(std::string_view name, const Tensor& x, const Loc& where) {
  if (x.dtype() != DType::kBool) return;
  const bool inverts = name == "sub" || name == "neg";
  ops::fail(name,
            fmt::format("does not take the pred (bool) tensor {}{}", ops::describe(x),
                        inverts ? "; to invert a mask, use logical_not" : ""),
            where);
}

Tensor binary(Op op, const Tensor& a, const Tensor& b, Kind kind, const Loc& where) {
  const std::string_view name = op_name(op);
  ops::require_defined(name, a, "the first operand", where);
  ops::require_defined(name, b, "the second operand", where);
  if (op == Op::kSub) {
    refuse_pred(name, a, where);
    refuse_pred(name, b, where);
  } else if (op == Op::kPow && b.dtype() == DType::kBool) {
    refuse_pred(name, a, where);  // a pred to a pred's power (a pred exponent of numbers is fine)
  }
  const Device device = ops::common_device(name, {&a, &b}, where);
  const Shape shape = ops::broadcast_shapes(name, a.shape(), b.shape(), where, &a, &b);
  DType compute = promote_types(a.dtype(), b.dtype());
  if (kind == Kind::kTrueDivision && !is_floating(compute)) compute = DType::kFloat32;
  if (kind == Kind::kLogical) compute = DType::kBool;
  const DType result = kind == Kind::kComparison || kind == Kind::kLogical ? DType::kBool : compute;
  Tensor out = ops::make_result(
      op, result, shape,
      Operands{ops::value_as(a, compute, where), ops::value_as(b, compute, where)}, device, where);
  if (autograd::should_record(a, b) && result != DType::kBool) {
    autograd::record(autograd::binary_derivative(op), out, {a, b});
  }
  return out;
}

// The dtype `t op scalar` computes in, as PyTorch types a Python number: a scalar does not widen
// a floating-point tensor; an integer one keeps an integer tensor's dtype (a pred's becomes
// s64); a floating-point one makes an integer or pred tensor f32, the default dtype.
DType scalar_compute_type(const Tensor& t, bool integer_scalar) {
  if (is_floating(t.dtype())) return t.dtype();
  if (integer_scalar) return t.dtype() == DType::kBool ? DType::kInt64 : t.dtype();
  return DType::kFloat32;
}

// Comparisons keep an integer tensor's dtype for a scalar of integral value, so that large
// integers compare exactly (the result is a pred either way).
DType comparison_compute_type(const Tensor& t, double value) {
  return scalar_compute_type(t, std::nearbyint(value) == value);
}

Tensor binary_scalar(Op op, const Tensor& a, double b, Kind kind, bool scalar_first,
                     const Loc& where, bool integer_scalar = false) {
  const std::string_view name = op_name(op);
  ops::require_defined(name, a, "the tensor operand", where);
  if (op == Op::kSub) refuse_pred(name, a, where);
  DType compute = kind == Kind::kComparison ? comparison_compute_type(a, b)
                                            : scalar_compute_type(a, integer_scalar);
  if (kind == Kind::kTrueDivision && !is_floating(compute)) compute = DType::kFloat32;
  const DType result = kind == Kind::kComparison ? DType::kBool : compute;
  NodePtr tensor_value = ops::value_as(a, compute, where);
  NodePtr scalar_value = ops::scalar(b, compute, where);
  Operands operands =
      scalar_first ? Operands{scalar_value, tensor_value} : Operands{tensor_value, scalar_value};
  Tensor out = ops::make_result(op, result, a.shape(), std::move(operands), a.device(), where);
  if (autograd::should_record(a) && kind != Kind::kComparison) {
    autograd::record(autograd::scalar_derivative(op), out, {a}, IntAttrs{scalar_first ? 1 : 0},
                     RealAttrs{b});
  }
  return out;
}

Tensor unary(Op op, const Tensor& x, bool float_only, const Loc& where, IntAttrs ints = {}) {
  const std::string_view name = op_name(op);
  ops::require_defined(name, x, "the operand", where);
  if (op == Op::kNeg || op == Op::kAbs || op == Op::kRelu) refuse_pred(name, x, where);
  DType dtype = x.dtype();
  // Transcendental functions of integers compute in float, as torch does.
  if (float_only && !is_floating(dtype)) dtype = DType::kFloat32;
  const bool record = autograd::should_record(x);
  Tensor out = ops::make_result(op, dtype, x.shape(), Operands{ops::value_as(x, dtype, where)},
                                x.device(), where, record ? ints : std::move(ints));
  if (record) autograd::record(autograd::unary_derivative(op), out, {x}, std::move(ints));
  return out;
}

// An operand of an op on autocast's f32 list: a bf16 one is computed in f32.
Tensor in_f32(const Tensor& t, const Loc& where) {
  return ops::autocast_cast(t, DType::kFloat32, where);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kAdd, a, b, Kind::kArithmetic, where);
}
Tensor sub(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kSub, a, b, Kind::kArithmetic, where);
}
Tensor mul(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kMul, a, b, Kind::kArithmetic, where);
}
Tensor div(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kDiv, a, b, Kind::kTrueDivision, where);
}
Tensor pow(const Tensor& a, const Tensor& b, Loc where) {
  if (ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return pow(in_f32(a, where), in_f32(b, where), where);
  }
  return binary(Op::kPow, a, b, Kind::kArithmetic, where);
}
Tensor pow(const Tensor& a, double exponent, Loc where) {
  if (ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return pow(in_f32(a, where), exponent, where);
  }
  return binary_scalar(Op::kPow, a, exponent, Kind::kArithmetic, false, where);
}
Tensor maximum(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kMaximum, a, b, Kind::kArithmetic, where);
}
Tensor minimum(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kMinimum, a, b, Kind::kArithmetic, where);
}
Tensor add(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kAdd, a, b, Kind::kArithmetic, false, where);
}
Tensor sub(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kSub, a, b, Kind::kArithmetic, false, where);
}
Tensor mul(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kMul, a, b, Kind::kArithmetic, false, where);
}
Tensor div(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kDiv, a, b, Kind::kTrueDivision, false, where);
}

Tensor eq(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kEq, a, b, Kind::kComparison, where);
}
Tensor ne(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kNe, a, b, Kind::kComparison, where);
}
Tensor lt(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kLt, a, b, Kind::kComparison, where);
}
Tensor le(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kLe, a, b, Kind::kComparison, where);
}
Tensor gt(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kGt, a, b, Kind::kComparison, where);
}
Tensor ge(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kGe, a, b, Kind::kComparison, where);
}
Tensor eq(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kEq, a, b, Kind::kComparison, false, where);
}
Tensor ne(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kNe, a, b, Kind::kComparison, false, where);
}
Tensor lt(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kLt, a, b, Kind::kComparison, false, where);
}
Tensor le(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kLe, a, b, Kind::kComparison, false, where);
}
Tensor gt(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kGt, a, b, Kind::kComparison, false, where);
}
Tensor ge(const Tensor& a, double b, Loc where) {
  return binary_scalar(Op::kGe, a, b, Kind::kComparison, false, where);
}
Tensor logical_and(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kLogicalAnd, a, b, Kind::kLogical, where);
}
Tensor logical_or(const Tensor& a, const Tensor& b, Loc where) {
  return binary(Op::kLogicalOr, a, b, Kind::kLogical, where);
}
Tensor logical_not(const Tensor& a, Loc where) {
  ops::require_defined("logical_not", a, "the operand", where);
  return ops::make_result(Op::kLogicalNot, DType::kBool, a.shape(),
                          Operands{ops::value_as(a, DType::kBool, where)}, a.device(), where);
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b, Loc loc) {
  ops::require_defined("where", condition, "the condition", loc);
  ops::require_defined("where", a, "the first value", loc);
  ops::require_defined("where", b, "the second value", loc);
  const Device device = ops::common_device("where", {&condition, &a, &b}, loc);
  if (condition.dtype() != DType::kBool) {
    ops::fail(
        "where",
        fmt::format("the condition must be a pred (bool) tensor, not {}", ops::describe(condition)),
        loc);
  }
  Shape shape = ops::broadcast_shapes("where", a.shape(), b.shape(), loc, &a, &b);
  shape = ops::broadcast_shapes("where", condition.shape(), shape, loc, &condition);
  const DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor out =
      ops::make_result(Op::kWhere, dtype, shape,
                       Operands{ops::value_as(condition, DType::kBool, loc),
                                ops::value_as(a, dtype, loc), ops::value_as(b, dtype, loc)},
                       device, loc);
  if (autograd::should_record(a, b)) {
    autograd::record(autograd::kWhereBackward, out, {condition, a, b});
  }
  return out;
}

Tensor neg(const Tensor& x, Loc where) { return unary(Op::kNeg, x, false, where); }
Tensor relu(const Tensor& x, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {  // PyTorch/XLA's lower-precision list
    const ops::AutocastSuspended off;
    return relu(ops::autocast_cast(x, *amp, where), where);
  }
  return unary(Op::kRelu, x, false, where);
}
Tensor abs(const Tensor& x, Loc where) { return unary(Op::kAbs, x, false, where); }
Tensor silu(const Tensor& x, Loc where) {
  ops::require_defined("silu", x, "the operand", where);
  ops::require_floating("silu", x, where);
  return mul(x, sigmoid(x, where), where);
}
Tensor gelu(const Tensor& x, const char* approximate, Loc where) {
  const std::string_view mode = approximate ? approximate : "none";
  if (mode != "none" && mode != "tanh") {
    ops::fail("gelu", fmt::format("approximate must be \"none\" or \"tanh\", not \"{}\"", mode),
              where);
  }
  ops::require_defined("gelu", x, "the operand", where);
  ops::require_floating("gelu", x, where);
  return unary(Op::kGelu, x, true, where, IntAttrs{mode == "tanh" ? 1 : 0});
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& self, const char* approximate,
                     Loc where) {
  constexpr std::string_view kName = "gelu_backward";
  const std::string_view mode = approximate ? approximate : "none";
  if (mode != "none" && mode != "tanh") {
    ops::fail(kName, fmt::format("approximate must be \"none\" or \"tanh\", not \"{}\"", mode),
              where);
  }
  ops::require_defined(kName, grad_output, "grad_output", where);
  ops::require_defined(kName, self, "self", where);
  ops::require_floating(kName, self, where);
  const Device device = ops::common_device(kName, {&grad_output, &self}, where);
  if (!(grad_output.shape() == self.shape())) {
    ops::fail(kName,
              fmt::format("grad_output {} and self {} must have one shape", describe(grad_output),
                          describe(self)),
              where);
  }
  const DType dtype = promote_types(grad_output.dtype(), self.dtype());
  IntAttrs ints{mode == "tanh" ? 1 : 0};
  const bool record = autograd::should_record(grad_output, self);
  Tensor out = ops::make_result(
      Op::kGeluBackward, dtype, self.shape(),
      Operands{ops::value_as(grad_output, dtype, where), ops::value_as(self, dtype, where)}, device,
      where, ints);
  if (record) autograd::record(autograd::kGeluBackwardBackward, out, {grad_output, self}, ints);
  return out;
}

Tensor cast(const Tensor& x, DType dtype, Loc where) {
  ops::require_defined("cast", x, "the operand", where);
  Tensor out = ops::make_result(Op::kCast, dtype, x.shape(), Operands{x.impl()->value_node(where)},
                                x.device(), where);
  if (autograd::should_record(x)) autograd::record(autograd::kCastBackward, out, {x});
  return out;
}

Tensor operator+(Operand a, const Tensor& b) { return add(a.tensor, b, a.where); }
Tensor operator-(Operand a, const Tensor& b) { return sub(a.tensor, b, a.where); }
Tensor operator*(Operand a, const Tensor& b) { return mul(a.tensor, b, a.where); }
Tensor operator/(Operand a, const Tensor& b) { return div(a.tensor, b, a.where); }
Tensor operator+(Operand a, double b) { return add(a.tensor, b, a.where); }
Tensor operator-(Operand a, double b) { return sub(a.tensor, b, a.where); }
Tensor operator*(Operand a, double b) { return mul(a.tensor, b, a.where); }
Tensor operator/(Operand a, double b) { return div(a.tensor, b, a.where); }
Tensor operator+(double a, Operand b) { return add(b.tensor, a, b.where); }
Tensor operator*(double a, Operand b) { return mul(b.tensor, a, b.where); }
Tensor operator-(double a, Operand b) {
  return binary_scalar(Op::kSub, b.tensor, a, Kind::kArithmetic, true, b.where);
}
Tensor operator/(double a, Operand b) {
  return binary_scalar(Op::kDiv, b.tensor, a, Kind::kTrueDivision, true, b.where);
}
Tensor operator-(Operand a) { return neg(a.tensor, a.where); }

Tensor detail::integer_scalar_op(ScalarArithmetic op, const Tensor& a, int64_t b, bool scalar_first,
                                 Loc where) {
  const auto value = static_cast<double>(b);
  switch (op) {
    case ScalarArithmetic::kAdd:
      return binary_scalar(Op::kAdd, a, value, Kind::kArithmetic, scalar_first, where, true);
    case ScalarArithmetic::kSub:
      return binary_scalar(Op::kSub, a, value, Kind::kArithmetic, scalar_first, where, true);
    case ScalarArithmetic::kMul:
      return binary_scalar(Op::kMul, a, value, Kind::kArithmetic, scalar_first, where, true);
    case ScalarArithmetic::kDiv:
      return binary_scalar(Op::kDiv, a, value, Kind::kTrueDivision, scalar_first, where, true);
    case ScalarArithmetic::kPow:
      if (ops::autocast_dtype()) [[unlikely]] {
        const ops::AutocastSuspended off;
        return binary_scalar(Op::kPow, in_f32(a, where), value, Kind::kArithmetic, false, where,
                             true);
      }
      return binary_scalar(Op::kPow, a, value, Kind::kArithmetic, false, where, true);
  }
  return {};
}

}  // namespace axle
