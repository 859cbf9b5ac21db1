// backends/cpu: elementwise kernels — arithmetic, comparisons, logical ops, where, unary math,
// cast, fill and iota — with NumPy broadcasting.
//
// Every operand walk goes through one loop nest (plan_loops): size-1 output dims are dropped and
// adjacent dims that every operand walks contiguously are merged, so same-shape operands become
// one flat row and a scalar operand a stride-0 row. Rows are loops in fixed blocks of kBlock
// elements plus a scalar tail: GCC at -O2 uses its "very cheap" vectoriser cost model, which only
// vectorises loops whose trip count it knows, so a plain `for (i < n)` loop would stay scalar.
// Transcendentals go through Eigen arrays, whose exp/log/tanh/sin/cos are vectorised.
#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/broadcast_loops.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/float_math.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/engine/element.h"

namespace axle::cpu {
namespace {

void check_arity(const KernelArgs& args, std::size_t inputs) {
  if (args.inputs.size() != inputs) {
    throw std::invalid_argument(fmt::format(
        "{} takes {} inputs, got {}", kernel_name(args.call.kernel), inputs, args.inputs.size()));
  }
}

// ---- Rows ------------------------------------------------------------------------------------

// How a row walks one operand. kUnit and kScalar are the fast cases the compiler vectorises.
enum class Walk { kUnit, kScalar, kStrided };

template <Walk W>
inline int64_t at(int64_t i, int64_t stride) noexcept {
  if constexpr (W == Walk::kUnit) {
    return i;
  } else if constexpr (W == Walk::kScalar) {
    return 0;
  } else {
    return i * stride;
  }
}

template <Walk WX, class X, class O, class Op>
void unary_loop(const X* __restrict__ x, int64_t sx, O* __restrict__ o, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) o[i + j] = store<O>(op(load(x[at<WX>(i + j, sx)])));
  }
  for (; i < n; ++i) o[i] = store<O>(op(load(x[at<WX>(i, sx)])));
}

template <Walk WA, Walk WB, class A, class B, class O, class Op>
void binary_loop(const A* __restrict__ a, int64_t sa, const B* __restrict__ b, int64_t sb,
                 O* __restrict__ o, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) {
      o[i + j] = store<O>(op(load(a[at<WA>(i + j, sa)]), load(b[at<WB>(i + j, sb)])));
    }
  }
  for (; i < n; ++i) o[i] = store<O>(op(load(a[at<WA>(i, sa)]), load(b[at<WB>(i, sb)])));
}

template <Walk WC, Walk WA, Walk WB, class T>
void where_loop(const bool* __restrict__ c, int64_t sc, const T* __restrict__ a, int64_t sa,
                const T* __restrict__ b, int64_t sb, T* __restrict__ o, int64_t n) {
  // The choice as bit masks over both sides: GCC vectorises neither a load under the condition
  // nor a select on a bool.
  using Bits = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  auto pick = [&](int64_t i) {
    const Bits mask = static_cast<Bits>(Bits(0) - static_cast<Bits>(c[at<WC>(i, sc)]));
    const Bits chosen = static_cast<Bits>((std::bit_cast<Bits>(a[at<WA>(i, sa)]) & mask) |
                                          (std::bit_cast<Bits>(b[at<WB>(i, sb)]) & ~mask));
    o[i] = std::bit_cast<T>(chosen);
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) pick(i + j);
  }
  for (; i < n; ++i) pick(i);
}

// Runs op over x broadcast to `out_shape`, writing o.
template <class X, class O, class Op>
void run_unary(ComputePool& pool, Kernel kernel, const Shape& out_shape, const Shape& x_shape,
               const X* x, O* o, Op op) {
  const auto nest = plan_loops<1>(kernel, out_shape, {&x_shape});
  if (out_shape.numel() == 0) return;
  for_each_row(pool, nest, [&](int64_t out, const auto& off, const auto& step, int64_t n) {
    if (step[0] == 1) {
      unary_loop<Walk::kUnit>(x + off[0], 1, o + out, n, op);
    } else if (step[0] == 0) {
      unary_loop<Walk::kScalar>(x + off[0], 0, o + out, n, op);
    } else {
      unary_loop<Walk::kStrided>(x + off[0], step[0], o + out, n, op);
    }
  });
}

template <class A, class B, class O, class Op>
void run_binary(const KernelArgs& args, const A* a, const B* b, Op op) {
  const Shape& out_shape = args.output.desc->shape;
  const auto nest = plan_loops<2>(args.call.kernel, out_shape,
                                  {&args.inputs[0].desc->shape, &args.inputs[1].desc->shape});
  if (out_shape.numel() == 0) return;
  O* o = args.output.as<O>();
  for_each_row(args.pool, nest, [&](int64_t out, const auto& off, const auto& step, int64_t n) {
    const A* ra = a + off[0];
    const B* rb = b + off[1];
    const int64_t sa = step[0], sb = step[1];
    // Integers and preds (indices, masks: small tensors) take the one strided loop; a loop per
    // operand walk is kept for floating types, where the training step's time goes.
    if constexpr (!kIsFloat<A> || !kIsFloat<B>) {
      binary_loop<Walk::kStrided, Walk::kStrided>(ra, sa, rb, sb, o + out, n, op);
    } else if (sa == 1 && sb == 1) {
      binary_loop<Walk::kUnit, Walk::kUnit>(ra, sa, rb, sb, o + out, n, op);
    } else if (sa == 0 && sb == 1) {
      binary_loop<Walk::kScalar, Walk::kUnit>(ra, sa, rb, sb, o + out, n, op);
    } else if (sa == 1 && sb == 0) {
      binary_loop<Walk::kUnit, Walk::kScalar>(ra, sa, rb, sb, o + out, n, op);
    } else {
      binary_loop<Walk::kStrided, Walk::kStrided>(ra, sa, rb, sb, o + out, n, op);
    }
  });
}

// An input read as pred: bool buffers as they are, any other dtype as `!= 0` into `scratch`.
const bool* as_pred(ComputePool& pool, const ConstView& in, std::unique_ptr<bool[]>& scratch) {
  if (in.desc->dtype == DType::kBool) return in.as<bool>();
  const int64_t n = in.desc->shape.numel();
  scratch = std::make_unique<bool[]>(static_cast<std::size_t>(n));
  visit_dtype(in.desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary(pool, Kernel::kCast, in.desc->shape, in.desc->shape, in.as<T>(), scratch.get(),
              [](compute_t<T> v) { return v != compute_t<T>(0); });
  });
  return scratch.get();
}

// ---- Binary kernels --------------------------------------------------------------------------

// Integer division truncates toward zero (C++ `/`, torch's rounding_mode='trunc'): the tracer
// only reaches here with integer operands when the user asked for integer division.
template <class C>
C int_div(C a, C b) {
  if (b == 0) throw std::domain_error("integer division by zero");
  if (b == -1) return static_cast<C>(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(a));
  return a / b;
}

// As torch's powi: negative exponents give 1, ±1 or 0; overflow wraps.
template <class C>
C int_pow(C base, C exp) {
  using U = std::make_unsigned_t<C>;
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2) ? C(-1) : C(1);
    return 0;
  }
  U result = 1, b = static_cast<U>(base);
  for (C e = exp; e; e >>= 1, b *= b) {
    if (e & 1) result *= b;
  }
  return static_cast<C>(result);
}

template <Kernel K, class T>
constexpr bool kArithmeticDefined =
    !std::is_same_v<T, bool> || K == Kernel::kAdd || K == Kernel::kMul || K == Kernel::kMaximum ||
    K == Kernel::kMinimum;

// Integer add/sub/mul wrap (computed unsigned: signed overflow would be undefined). maximum and
// minimum propagate NaN as torch does. On bool, add/maximum are `or` and mul/minimum `and`.
template <Kernel K, class C>
C arithmetic(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return (K == Kernel::kAdd || K == Kernel::kMaximum) ? (a || b) : (a && b);
  } else if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    if constexpr (K == Kernel::kAdd) return static_cast<C>(U(a) + U(b));
    if constexpr (K == Kernel::kSub) return static_cast<C>(U(a) - U(b));
    if constexpr (K == Kernel::kMul) return static_cast<C>(U(a) * U(b));
    if constexpr (K == Kernel::kDiv) return int_div(a, b);
    if constexpr (K == Kernel::kPow) return int_pow(a, b);
    if constexpr (K == Kernel::kMaximum) return a > b ? a : b;
    if constexpr (K == Kernel::kMinimum) return a < b ? a : b;
  } else {
    if constexpr (K == Kernel::kAdd) return a + b;
    if constexpr (K == Kernel::kSub) return a - b;
    if constexpr (K == Kernel::kMul) return a * b;
    if constexpr (K == Kernel::kDiv) return a / b;
    // A square is one rounding, as torch computes pow(x, 2).
    if constexpr (K == Kernel::kPow) return b == C(2) ? a * a : std::pow(a, b);
    if constexpr (K == Kernel::kMaximum) return (a > b || is_nan(a)) ? a : b;
    if constexpr (K == Kernel::kMinimum) return (a < b || is_nan(a)) ? a : b;
  }
}

template <Kernel K>
void arithmetic_kernel(const KernelArgs& args) {
  check_arity(args, 2);
  const DType dtype = args.output.desc->dtype;
  check_dtype(args, "input 0", args.inputs[0].desc->dtype, dtype);
  check_dtype(args, "input 1", args.inputs[1].desc->dtype, dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (!kArithmeticDefined<K, T>) {
      unsupported(K, dtype);
    } else {
      if constexpr (K == Kernel::kPow && kIsFloat<T>) {
        // pow(x, 2) (a norm's squares): a product on vectors instead of a call per element.
        if (args.inputs[1].desc->shape.numel() == 1 && load(args.inputs[1].as<T>()[0]) == C(2)) {
          return run_binary<T, T, T>(args, args.inputs[0].as<T>(), args.inputs[1].as<T>(),
                                     [](C a, C) { return a * a; });
        }
      }
      run_binary<T, T, T>(args, args.inputs[0].as<T>(), args.inputs[1].as<T>(),
                          [](C a, C b) { return arithmetic<K, C>(a, b); });
    }
  });
}

// IEEE comparisons: NaN compares unequal to everything.
template <Kernel K, class C>
bool compare(C a, C b) {
  if constexpr (K == Kernel::kEq) return a == b;
  if constexpr (K == Kernel::kNe) return a != b;
  if constexpr (K == Kernel::kLt) return a < b;
  if constexpr (K == Kernel::kLe) return a <= b;
  if constexpr (K == Kernel::kGt) return a > b;
  if constexpr (K == Kernel::kGe) return a >= b;
}

template <Kernel K>
void compare_kernel(const KernelArgs& args) {
  check_arity(args, 2);
  const DType dtype = args.inputs[0].desc->dtype;
  check_dtype(args, "input 1", args.inputs[1].desc->dtype, dtype);
  check_dtype(args, "output", args.output.desc->dtype, DType::kBool);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    run_binary<T, T, bool>(args, args.inputs[0].as<T>(), args.inputs[1].as<T>(),
                           [](C a, C b) { return compare<K, C>(a, b); });
  });
}

template <Kernel K>
void logical_kernel(const KernelArgs& args) {
  check_arity(args, 2);
  check_dtype(args, "output", args.output.desc->dtype, DType::kBool);
  std::unique_ptr<bool[]> scratch_a, scratch_b;
  const bool* a = as_pred(args.pool, args.inputs[0], scratch_a);
  const bool* b = as_pred(args.pool, args.inputs[1], scratch_b);
  run_binary<bool, bool, bool>(
      args, a, b, [](bool x, bool y) { return K == Kernel::kLogicalAnd ? (x && y) : (x || y); });
}

void where_kernel(const KernelArgs& args) {
  check_arity(args, 3);
  const BufferDesc& out = *args.output.desc;
  check_dtype(args, "input 1", args.inputs[1].desc->dtype, out.dtype);
  check_dtype(args, "input 2", args.inputs[2].desc->dtype, out.dtype);
  std::unique_ptr<bool[]> scratch;
  const bool* cond = as_pred(args.pool, args.inputs[0], scratch);
  const auto nest = plan_loops<3>(
      Kernel::kWhere, out.shape,
      {&args.inputs[0].desc->shape, &args.inputs[1].desc->shape, &args.inputs[2].desc->shape});
  if (out.shape.numel() == 0) return;
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = args.inputs[1].as<T>();
    const T* b = args.inputs[2].as<T>();
    T* o = args.output.as<T>();
    for_each_row(args.pool, nest, [&](int64_t at_out, const auto& off, const auto& s, int64_t n) {
      const bool* rc = cond + off[0];
      const T* ra = a + off[1];
      const T* rb = b + off[2];
      T* ro = o + at_out;
      // The ReLU gradient's where(x > 0, grad, 0) has a scalar branch.
      if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
        where_loop<Walk::kUnit, Walk::kUnit, Walk::kUnit>(rc, 1, ra, 1, rb, 1, ro, n);
      } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
        where_loop<Walk::kUnit, Walk::kUnit, Walk::kScalar>(rc, 1, ra, 1, rb, 0, ro, n);
      } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
        where_loop<Walk::kUnit, Walk::kScalar, Walk::kUnit>(rc, 1, ra, 0, rb, 1, ro, n);
      } else {
        where_loop<Walk::kStrided, Walk::kStrided, Walk::kStrided>(rc, s[0], ra, s[1], rb, s[2], ro,
                                                                   n);
      }
    });
  });
}

// ---- Unary kernels ---------------------------------------------------------------------------

// kNeg kAbs kRelu: integers and floats; integer negation wraps. relu keeps NaN, as torch.
template <Kernel K, class C>
C signed_unary(C x) {
  using U = std::make_unsigned_t<std::conditional_t<std::is_integral_v<C>, C, int>>;
  if constexpr (K == Kernel::kRelu) return x < C(0) ? C(0) : x;
  if constexpr (std::is_integral_v<C>) {
    const C negated = static_cast<C>(U(0) - static_cast<U>(x));
    if constexpr (K == Kernel::kNeg) return negated;
    if constexpr (K == Kernel::kAbs) return x < 0 ? negated : x;
  } else {
    if constexpr (K == Kernel::kNeg) return -x;
    if constexpr (K == Kernel::kAbs) return std::abs(x);
  }
}

template <Kernel K>
void signed_unary_kernel(const KernelArgs& args) {
  check_arity(args, 1);
  const BufferDesc& out = *args.output.desc;
  check_dtype(args, "input", args.inputs[0].desc->dtype, out.dtype);
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(K, out.dtype);
    } else {
      run_unary(args.pool, K, out.shape, args.inputs[0].desc->shape, args.inputs[0].as<T>(),
                args.output.as<T>(), [](C x) { return signed_unary<K, C>(x); });
    }
  });
}

void logical_not_kernel(const KernelArgs& args) {
  check_arity(args, 1);
  const BufferDesc& out = *args.output.desc;
  check_dtype(args, "output", out.dtype, DType::kBool);
  visit_dtype(args.inputs[0].desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_unary(args.pool, Kernel::kLogicalNot, out.shape, args.inputs[0].desc->shape,
              args.inputs[0].as<T>(), args.output.as<bool>(),
              [](compute_t<T> x) { return x == compute_t<T>(0); });
  });
}

// Calls f(Tag<T>{}) with T the storage type of a storage-only dtype (f16, s8, u8, s16).
template <class F>
void visit_storage_only(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat16:
      return f(Tag<Half>{});
    case DType::kInt8:
      return f(Tag<int8_t>{});
    case DType::kUInt8:
      return f(Tag<uint8_t>{});
    case DType::kInt16:
      return f(Tag<int16_t>{});
    default:
      throw std::logic_error(fmt::format("{} is not a storage-only dtype", dtype_name(dtype)));
  }
}

// A storage-only value in its compute dtype's type: f16 as float, small integers as int32_t.
template <class S>
using widened_t = std::conditional_t<std::is_same_v<S, Half>, float, int32_t>;

// Casts between the dtypes the kernels compute in.
void cast_computed(ComputePool& pool, const Shape& out_shape, const Shape& in_shape, DType from,
                   const void* in, DType to, void* out) {
  visit_dtype(from, [&](auto from_tag) {
    using S = typename decltype(from_tag)::type;
    visit_dtype(to, [&](auto to_tag) {
      using D = typename decltype(to_tag)::type;
      run_unary(pool, Kernel::kCast, out_shape, in_shape, static_cast<const S*>(in),
                static_cast<D*>(out), [](compute_t<S> x) { return x; });
    });
  });
}

// A storage-only dtype goes through its compute dtype, as torch converts: f16 through float
// (f64 -> f16 rounds twice, as c10::Half(float(x)) does), s8/u8/s16 through int32_t (a float
// truncates to 32 bits, then wraps).
void cast_kernel(const KernelArgs& args) {
  check_arity(args, 1);
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  DType from = in.dtype;
  const void* src = args.inputs[0].data;
  std::vector<std::byte> wide_in;
  if (is_storage_only(from)) {
    from = widened_dtype(from);
    wide_in.resize(static_cast<std::size_t>(in.shape.numel()) * dtype_size(from));
    visit_storage_only(in.dtype, [&](auto tag) {
      using S = typename decltype(tag)::type;
      run_unary(args.pool, Kernel::kCast, in.shape, in.shape, static_cast<const S*>(src),
                reinterpret_cast<widened_t<S>*>(wide_in.data()),
                [](S x) { return static_cast<widened_t<S>>(x); });
    });
    src = wide_in.data();
  }
  if (!is_storage_only(out.dtype)) {
    return cast_computed(args.pool, out.shape, in.shape, from, src, out.dtype, args.output.data);
  }
  const DType to = widened_dtype(out.dtype);
  std::vector<std::byte> wide_out(static_cast<std::size_t>(out.shape.numel()) * dtype_size(to));
  cast_computed(args.pool, out.shape, in.shape, from, src, to, wide_out.data());
  visit_storage_only(out.dtype, [&](auto tag) {
    using D = typename decltype(tag)::type;
    run_unary(args.pool, Kernel::kCast, out.shape, out.shape,
              reinterpret_cast<const widened_t<D>*>(wide_out.data()), args.output.as<D>(),
              [](widened_t<D> x) { return static_cast<D>(x); });
  });
}

// Applies f (Eigen array -> array expression) to n contiguous elements. bf16 is widened a block
// at a time into a float buffer, since Eigen's vectorised math is float/double.
constexpr int64_t kMapChunk = 1024;

template <class T, class F>
void map_float(const T* x, T* out, int64_t n, F f) {
  if constexpr (std::is_same_v<T, Bf16>) {
    constexpr int64_t kChunk = kMapChunk;
    alignas(64) float buffer[kChunk];
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t m = std::min(kChunk, n - i);
      for (int64_t j = 0; j < m; ++j) buffer[j] = widen(x[i + j]);
      Eigen::Map<Eigen::ArrayXf> v(buffer, m);
      v = f(v);  // coefficient-wise, so evaluating in place is safe
      for (int64_t j = 0; j < m; ++j) out[i + j] = narrow(buffer[j]);
    }
  } else {
    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> in(x, n);
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> o(out, n);
    o = f(in);
  }
}

// f(x) through vector_math.h's map_f32 for float, map_bf16 for bf16.
template <class T>
void map_vector_function(VectorFunction f, const T* x, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, Bf16>) {
    map_bf16(f, &x->bits, &out->bits, n);
  } else {
    map_f32(f, x, out, n);
  }
}

// kGelu and the float functions (AXLE_FLOAT_FUNCTIONS): floating dtypes only.
template <Kernel K>
void float_unary_kernel(const KernelArgs& args) {
  check_arity(args, 1);
  const BufferDesc& out = *args.output.desc;
  const BufferDesc& in = *args.inputs[0].desc;
  check_dtype(args, "input", in.dtype, out.dtype);
  const bool tanh_form = K == Kernel::kGelu && !args.call.ints.empty() && args.call.ints[0] != 0;
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsFloat<T>) {
      unsupported(K, out.dtype);
    } else {
      const T* x = args.inputs[0].as<T>();
      std::vector<T> expanded;  // only when the input broadcasts
      if (!(in.shape == out.shape)) {
        expanded.resize(static_cast<std::size_t>(out.shape.numel()));
        run_unary(args.pool, K, out.shape, in.shape, x, expanded.data(),
                  [](compute_t<T> v) { return v; });
        x = expanded.data();
      }
      T* o = args.output.as<T>();
      // Parts start on multiples of map_float's chunk (and so of 64 bytes), so Eigen takes the
      // same vector and scalar paths over each element as on one thread.
      parallel_for(
          args.pool, out.shape.numel(), kParallelElements / 4,
          [&](int64_t begin, int64_t end, int) {
            if constexpr (std::is_same_v<compute_t<T>, float>) {
              if (const auto f = vector_function(K, tanh_form)) {
                return map_vector_function(*f, x + begin, o + begin, end - begin);
              }
            }
            if constexpr (K == Kernel::kGelu) {
              if (tanh_form) {
                map_float(x + begin, o + begin, end - begin,
                          [](const auto& v) { return gelu_tanh(v); });
              } else {
                map_float(x + begin, o + begin, end - begin,
                          [](const auto& v) { return gelu_erf(v); });
              }
            } else {
              map_float(x + begin, o + begin, end - begin,
                        [](const auto& v) { return transcendental<K>(v); });
            }
          },
          kMapChunk);
    }
  });
}

// ---- Generators ------------------------------------------------------------------------------

void fill_kernel(const KernelArgs& args) {
  check_arity(args, 0);
  if (args.call.reals.empty()) throw std::invalid_argument("fill needs reals = [value]");
  const BufferDesc& out = *args.output.desc;
  // Large fills (a gather's gradient starts as zeros the size of its operand) on every thread.
  auto fill_parts = [&](auto* dst, auto value) {
    parallel_for(args.pool, out.shape.numel(), kParallelElements,
                 [&](int64_t b, int64_t e, int) { fill_values(dst + b, e - b, value); });
  };
  if (is_storage_only(out.dtype)) {  // the value's bits, repeated
    std::array<std::byte, 8> value{};
    store_element(out.dtype, args.call.reals[0], value.data());
    return visit_storage_only(out.dtype, [&](auto tag) {
      typename decltype(tag)::type element;
      std::memcpy(&element, value.data(), sizeof element);
      fill_parts(args.output.as<decltype(element)>(), element);
    });
  }
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_parts(args.output.as<T>(), store<T>(args.call.reals[0]));
  });
}

// Each element is computed from its index in double (not by repeated adding), so long ranges do
// not drift.
void iota_kernel(const KernelArgs& args) {
  check_arity(args, 0);
  if (args.call.reals.size() < 2) throw std::invalid_argument("iota needs reals = [start, step]");
  const BufferDesc& out = *args.output.desc;
  if (out.shape.rank() != 1) {
    throw std::invalid_argument(
        fmt::format("iota makes a 1-d output, not {}", out.shape.to_string()));
  }
  const double start = args.call.reals[0], step = args.call.reals[1];
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = args.output.as<T>();
    for (int64_t i = 0; i < out.shape[0]; ++i) {
      o[i] = store<T>(start + static_cast<double>(i) * step);
    }
  });
}

}  // namespace

void register_elementwise_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kAdd, &arithmetic_kernel<Kernel::kAdd>);
  set_kernel(table, Kernel::kSub, &arithmetic_kernel<Kernel::kSub>);
  set_kernel(table, Kernel::kMul, &arithmetic_kernel<Kernel::kMul>);
  set_kernel(table, Kernel::kDiv, &arithmetic_kernel<Kernel::kDiv>);
  set_kernel(table, Kernel::kPow, &arithmetic_kernel<Kernel::kPow>);
  set_kernel(table, Kernel::kMaximum, &arithmetic_kernel<Kernel::kMaximum>);
  set_kernel(table, Kernel::kMinimum, &arithmetic_kernel<Kernel::kMinimum>);
  set_kernel(table, Kernel::kEq, &compare_kernel<Kernel::kEq>);
  set_kernel(table, Kernel::kNe, &compare_kernel<Kernel::kNe>);
  set_kernel(table, Kernel::kLt, &compare_kernel<Kernel::kLt>);
  set_kernel(table, Kernel::kLe, &compare_kernel<Kernel::kLe>);
  set_kernel(table, Kernel::kGt, &compare_kernel<Kernel::kGt>);
  set_kernel(table, Kernel::kGe, &compare_kernel<Kernel::kGe>);
  set_kernel(table, Kernel::kLogicalAnd, &logical_kernel<Kernel::kLogicalAnd>);
  set_kernel(table, Kernel::kLogicalOr, &logical_kernel<Kernel::kLogicalOr>);
  set_kernel(table, Kernel::kWhere, &where_kernel);
  set_kernel(table, Kernel::kNeg, &signed_unary_kernel<Kernel::kNeg>);
  set_kernel(table, Kernel::kAbs, &signed_unary_kernel<Kernel::kAbs>);
  set_kernel(table, Kernel::kRelu, &signed_unary_kernel<Kernel::kRelu>);
  set_kernel(table, Kernel::kGelu, &float_unary_kernel<Kernel::kGelu>);
#define AXLE_SET_FLOAT_FUNCTION(name, str) \
  set_kernel(table, Kernel::k##name, &float_unary_kernel<Kernel::k##name>);
  AXLE_FLOAT_FUNCTIONS(AXLE_SET_FLOAT_FUNCTION)
#undef AXLE_SET_FLOAT_FUNCTION
  set_kernel(table, Kernel::kLogicalNot, &logical_not_kernel);
  set_kernel(table, Kernel::kCast, &cast_kernel);
  set_kernel(table, Kernel::kFill, &fill_kernel);
  set_kernel(table, Kernel::kIota, &iota_kernel);
}

}  // namespace axle::cpu
