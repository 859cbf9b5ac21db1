// graph/reference: elementwise ops — arithmetic, comparisons, logical ops, where, unary math,
// cast, fill and iota — with NumPy broadcasting, as the CPU backend's elementwise kernels.
// Floating elements compute in double and round once, as each result is stored; integers in 64
// bits, wrapping to their width; bool arithmetic is logical (add and maximum `or`, mul and
// minimum `and`).
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "axle/graph/ops/float_functions.h"
#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

// ---- Binary ----------------------------------------------------------------------------------

double real_arithmetic(Op op, double a, double b) {
  switch (op) {
    case Op::kAdd:
      return a + b;
    case Op::kSub:
      return a - b;
    case Op::kMul:
      return a * b;
    case Op::kDiv:
      return a / b;
    case Op::kPow:
      return std::pow(a, b);
    case Op::kMaximum:  // NaN propagates from either side, as torch.maximum
      return (a > b || std::isnan(a)) ? a : b;
    case Op::kMinimum:
      return (a < b || std::isnan(a)) ? a : b;
    default:
      return 0;
  }
}

// torch's integer pow: a negative exponent gives 1, -1 or 0; overflow wraps.
int64_t integer_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 ? -1 : 1;
    return 0;
  }
  int64_t result = 1;
  for (int64_t e = exponent, b = base; e; e >>= 1, b = wrapping_mul(b, b)) {
    if (e & 1) result = wrapping_mul(result, b);
  }
  return result;
}

// Computed in 64 bits; the store wraps to the dtype's width, which gives the same low bits as
// computing in the narrower type.
int64_t integer_arithmetic(const OpCall& call, int64_t a, int64_t b) {
  switch (call.node.op()) {
    case Op::kAdd:
      return wrapping_add(a, b);
    case Op::kSub:
      return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    case Op::kMul:
      return wrapping_mul(a, b);
    case Op::kDiv:  // truncating, as C++ (torch's rounding_mode='trunc')
      if (b == 0) fail(call, "integer division by zero");
      if (b == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
      return a / b;
    case Op::kPow:
      return integer_pow(a, b);
    case Op::kMaximum:
      return a > b ? a : b;
    case Op::kMinimum:
      return a < b ? a : b;
    default:
      return 0;
  }
}

CpuTensor arithmetic(const OpCall& call) {
  expect_operands(call, 2);
  const Op op = call.node.op();
  const DType dtype = call.dtype();
  expect_dtype(call, "operand 0", call.operand(0).dtype, dtype);
  expect_dtype(call, "operand 1", call.operand(1).dtype, dtype);
  const bool defined_on_bool =
      op == Op::kAdd || op == Op::kMul || op == Op::kMaximum || op == Op::kMinimum;
  if (dtype == DType::kBool && !defined_on_bool) fail(call, "not defined for pred");
  CpuTensor out = result_of(call);
  const CpuTensor& a = call.operand(0);
  const CpuTensor& b = call.operand(1);
  broadcast_loop<2>(call, {&a, &b}, [&](int64_t i, const std::array<int64_t, 2>& at) {
    if (is_floating(dtype)) {
      store_real(out, i, real_arithmetic(op, real_at(a, at[0]), real_at(b, at[1])));
    } else if (dtype == DType::kBool) {
      const bool x = int_at(a, at[0]) != 0, y = int_at(b, at[1]) != 0;
      store_int(out, i, (op == Op::kAdd || op == Op::kMaximum) ? (x || y) : (x && y));
    } else {
      store_int(out, i, integer_arithmetic(call, int_at(a, at[0]), int_at(b, at[1])));
    }
  });
  return out;
}

template <class V>
bool compare(Op op, V a, V b) {
  switch (op) {
    case Op::kEq:
      return a == b;
    case Op::kNe:
      return a != b;
    case Op::kLt:
      return a < b;
    case Op::kLe:
      return a <= b;
    case Op::kGt:
      return a > b;
    case Op::kGe:
      return a >= b;
    default:
      return false;
  }
}

CpuTensor comparison(const OpCall& call) {
  expect_operands(call, 2);
  const CpuTensor& a = call.operand(0);
  const CpuTensor& b = call.operand(1);
  expect_dtype(call, "operand 1", b.dtype, a.dtype);
  expect_dtype(call, "the result", call.dtype(), DType::kBool);
  CpuTensor out = result_of(call);
  const Op op = call.node.op();
  broadcast_loop<2>(call, {&a, &b}, [&](int64_t i, const std::array<int64_t, 2>& at) {
    // IEEE comparisons in double (exact for every floating dtype); integers exactly.
    const bool r = is_floating(a.dtype) ? compare(op, real_at(a, at[0]), real_at(b, at[1]))
                                        : compare(op, int_at(a, at[0]), int_at(b, at[1]));
    store_int(out, i, r);
  });
  return out;
}

// Any dtype read as pred: `!= 0` (NaN is true).
bool truth(const CpuTensor& t, int64_t i) {
  return is_floating(t.dtype) ? real_at(t, i) != 0 : int_at(t, i) != 0;
}

CpuTensor logical(const OpCall& call) {
  expect_operands(call, 2);
  expect_dtype(call, "the result", call.dtype(), DType::kBool);
  const CpuTensor& a = call.operand(0);
  const CpuTensor& b = call.operand(1);
  CpuTensor out = result_of(call);
  const bool is_and = call.node.op() == Op::kLogicalAnd;
  broadcast_loop<2>(call, {&a, &b}, [&](int64_t i, const std::array<int64_t, 2>& at) {
    const bool x = truth(a, at[0]), y = truth(b, at[1]);
    store_int(out, i, is_and ? (x && y) : (x || y));
  });
  return out;
}

CpuTensor where(const OpCall& call) {
  expect_operands(call, 3);
  const CpuTensor& condition = call.operand(0);
  const CpuTensor& a = call.operand(1);
  const CpuTensor& b = call.operand(2);
  expect_dtype(call, "operand 1", a.dtype, call.dtype());
  expect_dtype(call, "operand 2", b.dtype, call.dtype());
  CpuTensor out = result_of(call);
  broadcast_loop<3>(call, {&condition, &a, &b}, [&](int64_t i, const std::array<int64_t, 3>& at) {
    if (truth(condition, at[0])) {
      copy_element(a, at[1], out, i);
    } else {
      copy_element(b, at[2], out, i);
    }
  });
  return out;
}

// ---- Unary -----------------------------------------------------------------------------------

double float_math(Op op, double x, bool gelu_tanh) {
  if (op == Op::kGelu) {
    if (gelu_tanh) {
      const double k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
      return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
  }
  return ops::float_function(op).reference(x);
}

CpuTensor unary(const OpCall& call) {
  expect_operands(call, 1);
  const Op op = call.node.op();
  const CpuTensor& x = call.operand(0);
  const DType dtype = call.dtype();
  const bool float_only = op != Op::kNeg && op != Op::kAbs && op != Op::kRelu;
  expect_dtype(call, "the operand", x.dtype, dtype);
  if (dtype == DType::kBool || (float_only && !is_floating(dtype))) {
    fail(call, fmt::format("not defined for {}", dtype_name(dtype)));
  }
  const bool gelu_tanh = op == Op::kGelu && !call.ints().empty() && call.ints()[0] != 0;
  CpuTensor out = result_of(call);
  broadcast_loop<1>(call, {&x}, [&](int64_t i, const std::array<int64_t, 1>& at) {
    if (float_only) {
      store_real(out, i, float_math(op, real_at(x, at[0]), gelu_tanh));
    } else if (is_floating(dtype)) {
      const double v = real_at(x, at[0]);
      // relu keeps NaN (NaN < 0 is false) and -0.
      store_real(out, i, op == Op::kNeg ? -v : op == Op::kAbs ? std::fabs(v) : (v < 0 ? 0.0 : v));
    } else {
      const int64_t v = int_at(x, at[0]);
      const int64_t negated = static_cast<int64_t>(0 - static_cast<uint64_t>(v));  // wraps
      store_int(out, i,
                op == Op::kNeg   ? negated
                : op == Op::kAbs ? (v < 0 ? negated : v)
                                 : (v < 0 ? 0 : v));
    }
  });
  return out;
}

// grad * gelu'(x) in double, rounded once.
CpuTensor gelu_backward(const OpCall& call) {
  expect_operands(call, 2);
  const CpuTensor& grad = call.operand(0);
  const CpuTensor& x = call.operand(1);
  expect_dtype(call, "grad", grad.dtype, call.dtype());
  expect_dtype(call, "x", x.dtype, call.dtype());
  if (!is_floating(call.dtype()))
    fail(call, fmt::format("not defined for {}", dtype_name(call.dtype())));
  const bool tanh_form = !call.ints().empty() && call.ints()[0] != 0;
  CpuTensor out = result_of(call);
  broadcast_loop<2>(call, {&grad, &x}, [&](int64_t i, const std::array<int64_t, 2>& at) {
    const double v = real_at(x, at[1]);
    double derivative;
    if (tanh_form) {
      const double k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2 / pi)
      const double t = std::tanh(k * (v + 0.044715 * v * v * v));
      derivative = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
    } else {
      derivative = 0.5 * (1 + std::erf(v / std::numbers::sqrt2)) +
                   v * std::exp(-0.5 * v * v) * std::numbers::inv_sqrtpi / std::numbers::sqrt2;
    }
    store_real(out, i, real_at(grad, at[0]) * derivative);
  });
  return out;
}

CpuTensor logical_not(const OpCall& call) {
  expect_operands(call, 1);
  expect_dtype(call, "the result", call.dtype(), DType::kBool);
  const CpuTensor& x = call.operand(0);
  CpuTensor out = result_of(call);
  broadcast_loop<1>(call, {&x}, [&](int64_t i, const std::array<int64_t, 1>& at) {
    store_int(out, i, !truth(x, at[0]));
  });
  return out;
}

// Floating to integer truncates; integer to floating rounds once; to bool is `!= 0`.
CpuTensor cast(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  CpuTensor out = result_of(call);
  broadcast_loop<1>(call, {&x}, [&](int64_t i, const std::array<int64_t, 1>& at) {
    if (is_floating(x.dtype)) {
      store_real(out, i, real_at(x, at[0]));
    } else {
      store_int(out, i, int_at(x, at[0]));
    }
  });
  return out;
}

CpuTensor fill(const OpCall& call) {
  expect_operands(call, 0);
  if (call.reals().empty()) fail(call, "real attributes must be [value]");
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape().numel(); ++i) store_real(out, i, call.reals()[0]);
  return out;
}

// Each element from its index, in double (no running sum that could drift).
CpuTensor iota(const OpCall& call) {
  expect_operands(call, 0);
  if (call.reals().size() < 2) fail(call, "real attributes must be [start, step]");
  if (call.shape().rank() != 1) fail(call, "makes a 1-d result");
  const double start = call.reals()[0], step = call.reals()[1];
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape()[0]; ++i) {
    store_real(out, i, start + static_cast<double>(i) * step);
  }
  return out;
}

}  // namespace

CpuTensor evaluate_elementwise(const OpCall& call) {
  if (op_family(call.node.op()) == OpFamily::kFloatFunction) return unary(call);
  switch (call.node.op()) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kPow:
    case Op::kMaximum:
    case Op::kMinimum:
      return arithmetic(call);
    case Op::kEq:
    case Op::kNe:
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe:
      return comparison(call);
    case Op::kLogicalAnd:
    case Op::kLogicalOr:
      return logical(call);
    case Op::kWhere:
      return where(call);
    case Op::kNeg:
    case Op::kAbs:
    case Op::kRelu:
    case Op::kGelu:
      return unary(call);
    case Op::kGeluBackward:
      return gelu_backward(call);
    case Op::kLogicalNot:
      return logical_not(call);
    case Op::kCast:
      return cast(call);
    case Op::kFill:
      return fill(call);
    case Op::kIota:
      return iota(call);
    default:
      fail(call, "is not an elementwise op");
  }
}

}  // namespace axle::reference::detail
