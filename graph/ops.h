// graph: tensor operations. Each traces one or a few IR nodes, checking shapes as it goes: a
// mismatch throws ShapeError naming the op, the shapes and the caller's source line. Binary ops
// broadcast as NumPy does and promote dtypes as PyTorch does; a C++ scalar operand becomes a
// graph parameter (0 and 1 become constants), so changing it never recompiles.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <source_location>
#include <span>
#include <type_traits>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle {

/// The caller's source line, which an op names in its errors.
using Loc = std::source_location;

/// A tensor operand of an overloaded operator, carrying the caller's source line (operators
/// cannot take a defaulted source_location; a converting constructor can).
struct Operand {
  /// Wraps `t`, with the caller's line `where`.
  Operand(const Tensor& t, Loc where = Loc::current()) : tensor(t), where(where) {}  // NOLINT
  const Tensor& tensor;  ///< the operand
  Loc where;             ///< the caller's source line
};

// --- creation -------------------------------------------------------------------------------
/// A tensor of `shape` filled with `value`, as torch.full.
Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32, Device device = {},
            Loc where = Loc::current());
namespace detail {
/// torch.full's dtype: s64 for an integer value, pred for a bool, f32 for a floating-point one.
template <class Value>
inline constexpr DType kFullDType = std::is_same_v<Value, bool> ? DType::kBool
                                    : std::is_integral_v<Value> ? DType::kInt64
                                                                : DType::kFloat32;
/// Values the inferring full() takes: a double goes to the full() whose dtype defaults to f32.
template <class Value>
inline constexpr bool kInfersFullDType =
    std::is_arithmetic_v<Value> && !std::is_same_v<Value, double>;
}  // namespace detail
/// As torch.full without a dtype, whose dtype follows the value: `full(shape, 3)` is s64,
/// `full(shape, true)` pred, `full(shape, 2.5)` f32.
template <class Value>
  requires detail::kInfersFullDType<Value>
Tensor full(const Shape& shape, Value value, Loc where = Loc::current()) {
  return full(shape, static_cast<double>(value), detail::kFullDType<Value>, Device{}, where);
}
/// A tensor of `shape` filled with 0, as torch.zeros.
Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32, Device device = {},
             Loc where = Loc::current());
/// A tensor of `shape` filled with 1, as torch.ones.
Tensor ones(const Shape& shape, DType dtype = DType::kFloat32, Device device = {},
            Loc where = Loc::current());
/// 0-d tensor holding `value` (a parameter, so its value may change without recompiling).
Tensor scalar_tensor(double value, DType dtype = DType::kFloat32, Device device = {},
                     Loc where = Loc::current());
/// [start, end) in steps of `step`, as torch.arange, in `dtype`.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::kFloat32,
              Device device = {}, Loc where = Loc::current());
namespace detail {
/// torch.arange's dtype: s64 when every argument is an integer, else f32.
template <class... Args>
inline constexpr DType kArangeDType = (std::is_integral_v<Args> && ...) ? DType::kInt64
                                                                        : DType::kFloat32;
}  // namespace detail
/// As torch.arange, whose dtype follows its arguments: s64 when they are all integers,
/// f32 when any is floating point.
template <class Start, class End>
  requires std::is_arithmetic_v<Start> && std::is_arithmetic_v<End>
Tensor arange(Start start, End end, Loc where = Loc::current()) {
  return arange(static_cast<double>(start), static_cast<double>(end), 1,
                detail::kArangeDType<Start, End>, Device{}, where);
}
/// As above, in steps of `step`.
template <class Start, class End, class Step>
  requires std::is_arithmetic_v<Start> && std::is_arithmetic_v<End> && std::is_arithmetic_v<Step>
Tensor arange(Start start, End end, Step step, Loc where = Loc::current()) {
  return arange(static_cast<double>(start), static_cast<double>(end), static_cast<double>(step),
                detail::kArangeDType<Start, End, Step>, Device{}, where);
}
/// [0, end), as torch.arange(end): s64 for an integer `end`, f32 for a floating-point one.
template <class End>
  requires std::is_arithmetic_v<End>
Tensor arange(End end, Loc where = Loc::current()) {
  return arange(0.0, static_cast<double>(end), 1, detail::kArangeDType<End>, Device{}, where);
}
/// Zeros with `t`'s shape, dtype and device, as torch.zeros_like.
Tensor zeros_like(const Tensor& t, Loc where = Loc::current());
/// Ones with `t`'s shape, dtype and device, as torch.ones_like.
Tensor ones_like(const Tensor& t, Loc where = Loc::current());

// --- random (per-device counter-based stream; see set_rng_state) ------------------------------
/// Seeds `device`'s random stream on this replica (the same seed gives the same numbers on
/// every run), as torch_xla's xm.set_rng_state.
void set_rng_state(uint64_t seed, Device device = {});
/// The seed `device`'s random stream on this replica was last given (101 until then).
[[nodiscard]] uint64_t get_rng_state(Device device = {});
/// Uniform samples in [0, 1) of a floating-point `dtype`, as torch.rand.
Tensor rand(const Shape& shape, DType dtype = DType::kFloat32, Device device = {},
            Loc where = Loc::current());
/// Standard normal samples of a floating-point `dtype`, as torch.randn.
Tensor randn(const Shape& shape, DType dtype = DType::kFloat32, Device device = {},
             Loc where = Loc::current());
/// Uniform integers in [low, high) (which must fit `dtype`), as torch.randint.
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::kInt64,
               Device device = {}, Loc where = Loc::current());
/// 1 with probability p (elementwise), else 0; same shape and dtype as p.
Tensor bernoulli(const Tensor& p, Loc where = Loc::current());
/// As above, with the one probability `p` (in [0, 1]) for every element of `shape`.
Tensor bernoulli(const Shape& shape, double p, DType dtype = DType::kFloat32, Device device = {},
                 Loc where = Loc::current());
/// Indices (s64) of `num_samples` draws per row of `probs` ([C] or [N, C], weights that need not
/// sum to 1), with or without replacement, as torch.multinomial. Without replacement a row never
/// gives an index twice nor, while it has enough non-zero weights, one of weight 0.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Loc where = Loc::current());

// --- elementwise ------------------------------------------------------------------------------
/// a + b (broadcast, dtypes promoted), as torch.add.
Tensor add(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a - b, as torch.sub; pred operands are refused.
Tensor sub(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a * b, as torch.mul.
Tensor mul(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// True division: integer operands give a float result, as torch.div.
Tensor div(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a to the power b elementwise, as torch.pow.
Tensor pow(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a to the power `exponent`, a floating-point scalar (see below).
Tensor pow(const Tensor& a, double exponent, Loc where = Loc::current());
/// The elementwise maximum, as torch.maximum.
Tensor maximum(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// The elementwise minimum, as torch.minimum.
Tensor minimum(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// A scalar operand is typed as a Python number is: a floating-point one (these double forms)
/// makes an integer or pred tensor's result f32 (torch's default dtype), an integer one (the
/// forms below) keeps an integer tensor's dtype (a pred's becomes s64). A scalar never widens a
/// floating-point tensor: bf16 * 2.5 is bf16.
Tensor add(const Tensor& a, double b, Loc where = Loc::current());
/// As above, a - b.
Tensor sub(const Tensor& a, double b, Loc where = Loc::current());
/// As above, a * b.
Tensor mul(const Tensor& a, double b, Loc where = Loc::current());
/// As above, a / b (true division).
Tensor div(const Tensor& a, double b, Loc where = Loc::current());

/// Integer scalars (int, int64_t, ...; not bool, which is a number here only as a double).
template <class I>
concept IntegerScalar = std::is_integral_v<I> && !std::is_same_v<I, bool>;
namespace detail {
enum class ScalarArithmetic : uint8_t { kAdd, kSub, kMul, kDiv, kPow };
/// `a op b` (or `b op a` with `scalar_first`) for an integer scalar `b`.
Tensor integer_scalar_op(ScalarArithmetic op, const Tensor& a, int64_t b, bool scalar_first,
                         Loc where);
}  // namespace detail
/// a + b for an integer scalar `b`.
template <IntegerScalar I>
Tensor add(const Tensor& a, I b, Loc where = Loc::current()) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kAdd, a, static_cast<int64_t>(b),
                                   false, where);
}
/// a - b for an integer scalar `b`.
template <IntegerScalar I>
Tensor sub(const Tensor& a, I b, Loc where = Loc::current()) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kSub, a, static_cast<int64_t>(b),
                                   false, where);
}
/// a * b for an integer scalar `b`.
template <IntegerScalar I>
Tensor mul(const Tensor& a, I b, Loc where = Loc::current()) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kMul, a, static_cast<int64_t>(b),
                                   false, where);
}
/// True division: f32 for integer operands, as torch's `/`.
template <IntegerScalar I>
Tensor div(const Tensor& a, I b, Loc where = Loc::current()) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kDiv, a, static_cast<int64_t>(b),
                                   false, where);
}
/// An integer tensor to an integer power stays integer (pow(x, 2.0) is f32).
template <IntegerScalar I>
Tensor pow(const Tensor& a, I exponent, Loc where = Loc::current()) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kPow, a,
                                   static_cast<int64_t>(exponent), false, where);
}

/// a == b elementwise (broadcast) as a pred tensor, as torch.eq.
Tensor eq(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a != b elementwise (broadcast) as a pred tensor, as torch.ne.
Tensor ne(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a < b elementwise (broadcast) as a pred tensor, as torch.lt.
Tensor lt(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a <= b elementwise (broadcast) as a pred tensor, as torch.le.
Tensor le(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a > b elementwise (broadcast) as a pred tensor, as torch.gt.
Tensor gt(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a >= b elementwise (broadcast) as a pred tensor, as torch.ge.
Tensor ge(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor eq(const Tensor& a, double b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor ne(const Tensor& a, double b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor lt(const Tensor& a, double b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor le(const Tensor& a, double b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor gt(const Tensor& a, double b, Loc where = Loc::current());
/// As above, with a scalar b.
Tensor ge(const Tensor& a, double b, Loc where = Loc::current());
/// a and b elementwise, nonzero being true, as a pred tensor, as torch.logical_and.
Tensor logical_and(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// a or b elementwise, nonzero being true, as a pred tensor, as torch.logical_or.
Tensor logical_or(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// not a elementwise, nonzero being true, as a pred tensor, as torch.logical_not.
Tensor logical_not(const Tensor& a, Loc where = Loc::current());
/// `a` where the pred `condition` is true, else `b` (all broadcast), as torch.where.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b, Loc where = Loc::current());

/// -x, as torch.neg; pred tensors are refused.
Tensor neg(const Tensor& x, Loc where = Loc::current());
/// e^x, as torch.exp; integers give f32.
Tensor exp(const Tensor& x, Loc where = Loc::current());
/// The natural logarithm, as torch.log; integers give f32.
Tensor log(const Tensor& x, Loc where = Loc::current());
/// log(1 + x), accurate for small x, as torch.log1p.
Tensor log1p(const Tensor& x, Loc where = Loc::current());
/// The square root, as torch.sqrt; integers give f32.
Tensor sqrt(const Tensor& x, Loc where = Loc::current());
/// 1 / sqrt(x), as torch.rsqrt; integers give f32.
Tensor rsqrt(const Tensor& x, Loc where = Loc::current());
/// The hyperbolic tangent, as torch.tanh; integers give f32.
Tensor tanh(const Tensor& x, Loc where = Loc::current());
/// 1 / (1 + e^-x), as torch.sigmoid; integers give f32.
Tensor sigmoid(const Tensor& x, Loc where = Loc::current());
/// max(x, 0), as torch.relu.
Tensor relu(const Tensor& x, Loc where = Loc::current());
/// approximate: "none" (erf) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const char* approximate = "none", Loc where = Loc::current());
/// grad_output times gelu's derivative at self, as torch.ops.aten.gelu_backward (the gradient
/// gelu's backward pass computes, one op); both of one shape.
Tensor gelu_backward(const Tensor& grad_output, const Tensor& self,
                     const char* approximate = "none", Loc where = Loc::current());
/// The absolute value, as torch.abs.
Tensor abs(const Tensor& x, Loc where = Loc::current());
/// The sine, as torch.sin; integers give f32.
Tensor sin(const Tensor& x, Loc where = Loc::current());
/// The cosine, as torch.cos; integers give f32.
Tensor cos(const Tensor& x, Loc where = Loc::current());
/// The error function, as torch.erf.
Tensor erf(const Tensor& x, Loc where = Loc::current());
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold, as
/// torch.nn.functional.softplus.
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20,
                Loc where = Loc::current());
/// x * sigmoid(x), as torch.nn.functional.silu.
Tensor silu(const Tensor& x, Loc where = Loc::current());
/// x converted to `dtype`, as torch's x.to(dtype); a new tensor even when x has that dtype.
Tensor cast(const Tensor& x, DType dtype, Loc where = Loc::current());
/// x limited to [min, max] (a missing bound does not limit), as torch.clamp; where min > max every
/// element is max. The gradient passes where min <= x <= max.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt,
             Loc where = Loc::current());
/// clamp with tensor bounds that broadcast (an undefined Tensor is a missing bound).
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max, Loc where = Loc::current());
/// x with `value` wherever the bool `mask` is true (mask and x broadcast), as torch.masked_fill.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Loc where = Loc::current());
/// x with the elements above diagonal `diagonal` of its last two dims zeroed, as torch.tril.
Tensor tril(const Tensor& x, int64_t diagonal = 0, Loc where = Loc::current());
/// x with the elements below diagonal `diagonal` of its last two dims zeroed, as torch.triu.
Tensor triu(const Tensor& x, int64_t diagonal = 0, Loc where = Loc::current());

/// add(a, b), at the caller's line.
Tensor operator+(Operand a, const Tensor& b);
/// sub(a, b), at the caller's line.
Tensor operator-(Operand a, const Tensor& b);
/// mul(a, b), at the caller's line.
Tensor operator*(Operand a, const Tensor& b);
/// div(a, b), at the caller's line.
Tensor operator/(Operand a, const Tensor& b);
/// As above, with a floating-point scalar b.
Tensor operator+(Operand a, double b);
/// As above, with a floating-point scalar b.
Tensor operator-(Operand a, double b);
/// As above, with a floating-point scalar b.
Tensor operator*(Operand a, double b);
/// As above, with a floating-point scalar b.
Tensor operator/(Operand a, double b);
/// As above, with a floating-point scalar a.
Tensor operator+(double a, Operand b);
/// As above, with a floating-point scalar a.
Tensor operator-(double a, Operand b);
/// As above, with a floating-point scalar a.
Tensor operator*(double a, Operand b);
/// As above, with a floating-point scalar a.
Tensor operator/(double a, Operand b);
/// neg(a), at the caller's line.
Tensor operator-(Operand a);
/// As above, with an integer scalar b.
template <IntegerScalar I>
Tensor operator+(Operand a, I b) {
  return add(a.tensor, b, a.where);
}
/// As above, with an integer scalar b.
template <IntegerScalar I>
Tensor operator-(Operand a, I b) {
  return sub(a.tensor, b, a.where);
}
/// As above, with an integer scalar b.
template <IntegerScalar I>
Tensor operator*(Operand a, I b) {
  return mul(a.tensor, b, a.where);
}
/// As above, with an integer scalar b.
template <IntegerScalar I>
Tensor operator/(Operand a, I b) {
  return div(a.tensor, b, a.where);
}
/// As above, with an integer scalar a.
template <IntegerScalar I>
Tensor operator+(I a, Operand b) {
  return add(b.tensor, a, b.where);
}
/// As above, with an integer scalar a.
template <IntegerScalar I>
Tensor operator*(I a, Operand b) {
  return mul(b.tensor, a, b.where);
}
/// As above, with an integer scalar a.
template <IntegerScalar I>
Tensor operator-(I a, Operand b) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kSub, b.tensor,
                                   static_cast<int64_t>(a), true, b.where);
}
/// As above, with an integer scalar a.
template <IntegerScalar I>
Tensor operator/(I a, Operand b) {
  return detail::integer_scalar_op(detail::ScalarArithmetic::kDiv, b.tensor,
                                   static_cast<int64_t>(a), true, b.where);
}

// --- reductions (dims may be negative; an empty dims list reduces over every dim) ------------
/// The sum over `dims`, as torch.sum: integers and pred give s64.
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false,
           Loc where = Loc::current());
/// The mean over `dims` of a floating-point tensor, as torch.mean.
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false,
            Loc where = Loc::current());
/// The maximum over `dims`, as torch.amax; no reduced dim may be empty.
Tensor amax(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false,
            Loc where = Loc::current());
/// The minimum over `dims`, as torch.amin; no reduced dim may be empty.
Tensor amin(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false,
            Loc where = Loc::current());
/// log(sum(exp(x))) over `dims`, as torch.logsumexp; integers give f32.
Tensor logsumexp(const Tensor& x, std::vector<int64_t> dims, bool keepdim = false,
                 Loc where = Loc::current());
/// Index of the first maximum along `dim` (s64); over the flattened tensor when dim is empty.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
              Loc where = Loc::current());
/// Softmax along `dim` of a floating-point tensor, as torch.softmax.
Tensor softmax(const Tensor& x, int64_t dim, Loc where = Loc::current());
/// log(softmax) along `dim` of a floating-point tensor, as torch.log_softmax.
Tensor log_softmax(const Tensor& x, int64_t dim, Loc where = Loc::current());
/// Variance over `dims` (every dim when empty) from the mean and squared deviations, divided by
/// n - 1 when `unbiased` (torch.var's default), else by n.
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, bool unbiased = true,
           bool keepdim = false, Loc where = Loc::current());
/// sqrt(var(x, dims, unbiased, keepdim)), as torch.std.
Tensor std(const Tensor& x, std::vector<int64_t> dims = {}, bool unbiased = true,
           bool keepdim = false, Loc where = Loc::current());
/// torch.var's and torch.std's keyword form: the sum of squared deviations is divided by
/// max(n - correction, 0).
struct VarOptions {
  double correction = 1;  ///< subtracted from the count n
  bool keepdim = false;   ///< keep the reduced dims, with size 1
};
/// As var above, with torch.var's keyword arguments.
Tensor var(const Tensor& x, std::vector<int64_t> dims, const VarOptions& options,
           Loc where = Loc::current());
/// As std above, with torch.std's keyword arguments.
Tensor std(const Tensor& x, std::vector<int64_t> dims, const VarOptions& options,
           Loc where = Loc::current());
/// Running sums along `dim`, as torch.cumsum: floating inputs keep their dtype (accumulated in
/// f64), integers and bool give s64.
Tensor cumsum(const Tensor& x, int64_t dim, Loc where = Loc::current());
/// The values and positions (s64) of torch.topk.
struct TopK {
  Tensor values;   ///< the k elements, best first
  Tensor indices;  ///< their positions along the dim (s64)
};
/// The k largest (smallest when !largest) elements along `dim`, best first, as torch.topk. NaN
/// ranks above every number; equal values come in index order. Results are always sorted, which
/// torch allows for sorted = false too.
TopK topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true,
          Loc where = Loc::current());

// --- linear algebra, convolution, pooling ----------------------------------------------------
/// torch.matmul: 1-d operands are promoted (and the added dim removed), batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// The product of two matrices, as torch.mm: both operands must be 2-d (matmul broadcasts).
Tensor mm(const Tensor& a, const Tensor& b, Loc where = Loc::current());
/// x @ weight^T + bias, weight [out, in], as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Loc where = Loc::current());
/// torch.nn.functional.conv2d's keyword arguments; a size is one value (both dims) or two
/// (height, width).
struct Conv2dOptions {
  std::vector<int64_t> stride = {1, 1};    ///< the kernel's step over the input
  std::vector<int64_t> padding = {0, 0};   ///< zeros added on each side
  std::vector<int64_t> dilation = {1, 1};  ///< spacing between kernel elements
  int64_t groups = 1;  ///< input and output channels split into this many groups
};
/// The 2-d convolution of x [N, C, H, W] with weight [O, C / groups, KH, KW], plus bias [O],
/// as torch.nn.functional.conv2d.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dOptions& options = {}, Loc where = Loc::current());
/// torch.nn.functional.conv_transpose2d's keyword arguments; a size is one value (both dims) or
/// two (height, width).
struct ConvTranspose2dOptions {
  std::vector<int64_t> stride = {1, 1};          ///< the step between the input's positions
  std::vector<int64_t> padding = {0, 0};         ///< dilation * (kernel - 1) - padding zeros
  std::vector<int64_t> output_padding = {0, 0};  ///< added to one side of the output
  int64_t groups = 1;  ///< input and output channels split into this many groups
  std::vector<int64_t> dilation = {1, 1};  ///< spacing between kernel elements
};
/// The 2-d transposed convolution of x [N, C, H, W] with weight [C, O / groups, KH, KW], plus
/// bias [O], as torch.nn.functional.conv_transpose2d: the gradient of conv2d with respect to its
/// input. The output is [N, O, (H - 1) * stride - 2 * padding + dilation * (KH - 1) +
/// output_padding + 1, ...].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        const ConvTranspose2dOptions& options = {}, Loc where = Loc::current());
/// The keyword arguments of torch.nn.functional.max_pool2d and avg_pool2d; a size is one value
/// (both dims) or two (height, width).
struct Pool2dOptions {
  std::vector<int64_t> kernel_size;  ///< the window
  /// The window's step.
  std::vector<int64_t> stride = {};       // empty: same as kernel_size
  std::vector<int64_t> padding = {0, 0};  ///< padding on each side, at most half the window
  /// Spacing between window elements.
  std::vector<int64_t> dilation = {1, 1};  // max_pool2d only
  bool ceil_mode = false;  ///< round the output size up (keep a last, partial window)
  /// Whether padding counts in the divisor of the mean.
  bool count_include_pad = true;  // avg_pool2d only
};
/// The maximum of each window of x [N, C, H, W], as torch.nn.functional.max_pool2d.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options, Loc where = Loc::current());
/// The mean of each window of x [N, C, H, W], as torch.nn.functional.avg_pool2d.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options, Loc where = Loc::current());

// --- shape and data movement -----------------------------------------------------------------
/// New shape with the same elements; one dim may be -1 (inferred). `view` is the same.
Tensor reshape(const Tensor& x, std::vector<int64_t> shape, Loc where = Loc::current());
/// Same as reshape, as torch.Tensor.view.
Tensor view(const Tensor& x, std::vector<int64_t> shape, Loc where = Loc::current());
/// Dims `start_dim` to `end_dim` merged into one, as torch.flatten (0-d gives [1]).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1,
               Loc where = Loc::current());
/// x without dim `dim` if its size is 1 (else x's dims), as torch.squeeze.
Tensor squeeze(const Tensor& x, int64_t dim, Loc where = Loc::current());
/// x with a dim of size 1 inserted at `dim`, as torch.unsqueeze.
Tensor unsqueeze(const Tensor& x, int64_t dim, Loc where = Loc::current());
/// x with its dims reordered to `dims`, as torch.permute.
Tensor permute(const Tensor& x, std::vector<int64_t> dims, Loc where = Loc::current());
/// x with dims `dim0` and `dim1` swapped, as torch.transpose.
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1, Loc where = Loc::current());
/// Broadcast to `shape` (-1 keeps a dim), as torch.Tensor.expand.
Tensor expand(const Tensor& x, std::vector<int64_t> shape, Loc where = Loc::current());
/// Elements start, start+step, ... < end along dim (negative start/end count from the end,
/// clamped like Python slicing), as x[..., start:end:step, ...].
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1,
             Loc where = Loc::current());
/// The tensors joined along `dim` (other dims match; dtypes promote), as torch.cat.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0, Loc where = Loc::current());
/// Pieces of `split_size` along `dim`, the last smaller if the size does not divide, as
/// torch.split.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0,
                          Loc where = Loc::current());
/// Pieces of the given sizes along `dim` (they sum to its size), as torch.split with a list.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0,
                          Loc where = Loc::current());
/// At most `chunks` pieces of ceil(size / chunks) along `dim`, as torch.chunk (fewer when the
/// size runs out first).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0,
                          Loc where = Loc::current());
/// The tensors, of one shape, joined along a new dim `dim`, as torch.stack.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0, Loc where = Loc::current());
/// x's entries at the positions `index` (0-d or 1-d, s32 or s64) along `dim`, as
/// torch.index_select.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Loc where = Loc::current());
/// x's elements at `index` along `dim` (index has x's rank; the result its shape), as torch.gather.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Loc where = Loc::current());
/// x with src[i] added at position i with dim `dim` replaced by index[i], as torch.scatter_add
/// (repeated indices add up). index and src have one shape, of x's rank; outside `dim` it fits
/// in x's. src has x's dtype.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   Loc where = Loc::current());
/// `index` as s64 one-hot vectors of `num_classes` (> 0) in a new last dim, as
/// torch.nn.functional.one_hot.
Tensor one_hot(const Tensor& index, int64_t num_classes, Loc where = Loc::current());

// --- compiler control --------------------------------------------------------------------------
/// Keeps the compiler from looking through these values, as torch_xla's
/// xm.optimization_barrier_: each tensor keeps its value (and its autograd state) but now reads
/// it from a barrier that waits for every tensor of the list, in place, so every handle of it
/// sees the barrier. No pass merges, folds or fuses computation across a barrier, and what reads
/// a barrier's value runs only once all of the list is computed. For activation checkpointing
/// (utils::checkpoint), and to keep two equal computations apart. The tensors share one device.
void optimization_barrier_(std::span<const Tensor> tensors, Loc where = Loc::current());
/// As above, for a braced list of tensors.
inline void optimization_barrier_(std::initializer_list<Tensor> tensors,
                                  Loc where = Loc::current()) {
  optimization_barrier_(std::span<const Tensor>(tensors.begin(), tensors.size()), where);
}

}  // namespace axle
