// Every op of graph/ops.h executed end to end on the CPU backend and compared with a plain
// double-precision reference loop written here: creation, elementwise ops (broadcasting, scalar
// and 0-d operands, size-0 dims), comparisons, unary math, casts (bf16 included), reductions,
// matmul, linear, conv2d, pooling, shape and data-movement ops, random ops, and a small MLP.
// Inputs come from std::mt19937 with fixed seeds, so every failure reproduces.
//
// Why this file is over 1,000 lines: it checks the values of the whole op surface, and every
// section leans on the same reference loops and comparison helpers (the first ~450 lines: NumPy
// broadcasting, reductions, matmul, conv2d, pooling, gathers). Split per op family, each file
// would need those helpers from a shared test header; kept together, they are read once.
//
// Tolerances: f32 results 1e-5 relative + 1e-6 absolute, f64 1e-12, bf16 1e-2 relative. For sums
// of products (matmul, linear, conv2d) "relative" is to the sum of |terms|, the size the rounding
// error of any summation order scales with; plain |result| would reject correct kernels wherever
// the terms cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <limits>
#include <numbers>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "actors/lazy_system.h"
#include "axle.h"

namespace axle {
namespace {

// ---- Reference arrays ------------------------------------------------------------------------

using Dims = std::vector<int64_t>;

/// A reference value: row-major doubles and their dims.
struct Ref {
  Dims dims;
  std::vector<double> values;
};

int64_t count(const Dims& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

Shape shape_of(const Dims& dims) { return Shape(std::span<const int64_t>(dims)); }

// Calls f(index) for every multi-index of `dims`, in row-major order (once for 0-d dims).
template <class F>
void for_each_index(const Dims& dims, F&& f) {
  Dims index(dims.size(), 0);
  for (int64_t n = count(dims); n > 0; --n) {
    f(index);
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
}

int64_t offset_of(const Dims& dims, const Dims& index) {
  int64_t offset = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) offset = offset * dims[d] + index[d];
  return offset;
}

double at(const Ref& x, const Dims& index) { return x.values[offset_of(x.dims, index)]; }

// The element of x that element `index` of a larger result reads under NumPy broadcasting.
double broadcast_at(const Ref& x, const Dims& index) {
  const std::size_t lead = index.size() - x.dims.size();
  int64_t offset = 0;
  for (std::size_t d = 0; d < x.dims.size(); ++d) {
    offset = offset * x.dims[d] + (x.dims[d] == 1 ? 0 : index[lead + d]);
  }
  return x.values[offset];
}

Dims broadcast_dims(const Dims& a, const Dims& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

template <class F>
Ref map(const Ref& x, F&& f) {
  Ref out{x.dims, {}};
  for (double v : x.values) out.values.push_back(f(v));
  return out;
}

template <class F>
Ref zip(const Ref& a, const Ref& b, F&& f) {
  Ref out{broadcast_dims(a.dims, b.dims), {}};
  for_each_index(out.dims, [&](const Dims& i) {
    out.values.push_back(f(broadcast_at(a, i), broadcast_at(b, i)));
  });
  return out;
}

Ref reshaped(const Ref& x, Dims dims) { return Ref{std::move(dims), x.values}; }

// x reduced over `dims` (every dim when empty; negative dims count from the end) by f, which
// gets each group's elements in row-major order.
template <class F>
Ref reduce_ref(const Ref& x, const Dims& dims, bool keepdim, F&& f) {
  const int rank = static_cast<int>(x.dims.size());
  std::vector<bool> reduced(rank, dims.empty());
  if (rank > 0) {  // a 0-d x takes dim 0 or -1, as torch, and has nothing to reduce
    for (int64_t d : dims) reduced[d < 0 ? d + rank : d] = true;
  }
  Ref out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d] || keepdim) out.dims.push_back(reduced[d] ? 1 : x.dims[d]);
  }
  std::vector<std::vector<double>> groups(count(out.dims));
  for_each_index(x.dims, [&](const Dims& i) {
    Dims o;
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d] || keepdim) o.push_back(reduced[d] ? 0 : i[d]);
    }
    groups[offset_of(out.dims, o)].push_back(at(x, i));
  });
  for (const auto& group : groups) out.values.push_back(f(group));
  return out;
}

double sum_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
double mean_of(const std::vector<double>& v) { return sum_of(v) / static_cast<double>(v.size()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double logsumexp_of(const std::vector<double>& v) {
  const double m = max_of(v);
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
double first_argmax_of(const std::vector<double>& v) {
  return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin());
}

Ref softmax_ref(const Ref& x, int64_t dim, bool log) {
  const Ref m = reduce_ref(x, {dim}, true, max_of);
  const Ref shifted = zip(x, m, [](double a, double b) { return a - b; });
  const Ref s = reduce_ref(map(shifted, [](double v) { return std::exp(v); }), {dim}, true, sum_of);
  return zip(shifted, s,
             [log](double d, double t) { return log ? d - std::log(t) : std::exp(d) / t; });
}

Ref permute_ref(const Ref& x, const Dims& perm) {
  Ref out;
  for (int64_t p : perm) out.dims.push_back(x.dims[p]);
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i(x.dims.size());
    for (std::size_t k = 0; k < perm.size(); ++k) i[perm[k]] = o[k];
    out.values.push_back(at(x, i));
  });
  return out;
}

// x restricted to positions `picks` along dim (repeats allowed): slice and index_select.
Ref pick_ref(const Ref& x, int64_t dim, const Dims& picks) {
  Ref out{x.dims, {}};
  out.dims[dim] = static_cast<int64_t>(picks.size());
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i = o;
    i[dim] = picks[o[dim]];
    out.values.push_back(at(x, i));
  });
  return out;
}

// The positions x[start:end:step] takes from a dim of `size`, by Python's rules.
Dims python_slice(int64_t size, int64_t start, int64_t end, int64_t step) {
  auto clamp = [size](int64_t i) {
    return i < 0 ? std::max<int64_t>(i + size, 0) : std::min(i, size);
  };
  Dims picks;
  for (int64_t i = clamp(start); i < clamp(end); i += step) picks.push_back(i);
  return picks;
}

Ref cat_ref(const std::vector<Ref>& parts, int64_t dim) {
  Ref out{parts[0].dims, {}};
  out.dims[dim] = 0;
  for (const Ref& p : parts) out.dims[dim] += p.dims[dim];
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i = o;
    std::size_t p = 0;
    while (i[dim] >= parts[p].dims[dim]) i[dim] -= parts[p++].dims[dim];
    out.values.push_back(at(parts[p], i));
  });
  return out;
}

Ref gather_ref(const Ref& x, int64_t dim, const Ref& index) {
  Ref out{index.dims, {}};
  for_each_index(index.dims, [&](const Dims& o) {
    Dims i = o;
    i[dim] = static_cast<int64_t>(at(index, o));
    out.values.push_back(at(x, i));
  });
  return out;
}

// torch.matmul in double. `scale` receives sum |a_k * b_k| per output element.
Ref matmul_ref(const Ref& a, const Ref& b, std::vector<double>& scale) {
  const Ref a2 = a.dims.size() == 1 ? reshaped(a, {1, a.dims[0]}) : a;
  const Ref b2 = b.dims.size() == 1 ? reshaped(b, {b.dims[0], 1}) : b;
  const int64_t m = a2.dims.end()[-2], k = a2.dims.back(), n = b2.dims.back();
  Dims dims = broadcast_dims(Dims(a2.dims.begin(), a2.dims.end() - 2),
                             Dims(b2.dims.begin(), b2.dims.end() - 2));
  dims.push_back(m);
  dims.push_back(n);
  Ref out{{}, {}};
  for_each_index(dims, [&](const Dims& o) {
    Dims ia = o, ib = o;
    double acc = 0, magnitude = 0;
    for (int64_t kk = 0; kk < k; ++kk) {
      ia.back() = kk;
      ib.end()[-2] = kk;
      const double term = broadcast_at(a2, ia) * broadcast_at(b2, ib);
      acc += term;
      magnitude += std::abs(term);
    }
    out.values.push_back(acc);
    scale.push_back(magnitude);
  });
  if (a.dims.size() == 1) dims.erase(dims.end() - 2);
  if (b.dims.size() == 1) dims.pop_back();
  out.dims = dims;
  return out;
}

// torch.nn.functional.conv2d in double: x [N, C, H, W], w [O, C / groups, KH, KW].
Ref conv2d_ref(const Ref& x, const Ref& w, const Ref* bias, const Conv2dOptions& o,
               std::vector<double>& scale) {
  const int64_t h = x.dims[2], wd = x.dims[3];
  const int64_t group_in = w.dims[1], kh = w.dims[2], kw = w.dims[3];
  const int64_t group_out = w.dims[0] / o.groups;
  const int64_t oh = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const int64_t ow = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  Ref out{{x.dims[0], w.dims[0], oh, ow}, {}};
  for_each_index(out.dims, [&](const Dims& i) {
    const int64_t group = i[1] / group_out;
    double acc = bias ? bias->values[i[1]] : 0.0;
    double magnitude = std::abs(acc);
    for (int64_t c = 0; c < group_in; ++c) {
      for (int64_t ky = 0; ky < kh; ++ky) {
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t y = i[2] * o.stride[0] - o.padding[0] + ky * o.dilation[0];
          const int64_t xx = i[3] * o.stride[1] - o.padding[1] + kx * o.dilation[1];
          if (y < 0 || y >= h || xx < 0 || xx >= wd) continue;
          const double term = at(x, {i[0], group * group_in + c, y, xx}) * at(w, {i[1], c, ky, kx});
          acc += term;
          magnitude += std::abs(term);
        }
      }
    }
    out.values.push_back(acc);
    scale.push_back(magnitude);
  });
  return out;
}

// torch's pooling_output_shape (the spec; with ceil_mode a last window must start inside the
// input or the left padding).
int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = span / stride + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

// A pooling size given as one value (both dims) or two.
Dims pair_of(const std::vector<int64_t>& v) { return v.size() == 1 ? Dims{v[0], v[0]} : v; }

// max_pool2d (avg = false) or avg_pool2d as torch computes them, windows walked tap by tap.
Ref pool_ref(const Ref& x, const Pool2dOptions& o, bool avg) {
  const Dims k = pair_of(o.kernel_size);
  const Dims s = o.stride.empty() ? k : pair_of(o.stride);
  const Dims p = pair_of(o.padding);
  const Dims d = avg ? Dims{1, 1} : pair_of(o.dilation);
  const int64_t h = x.dims[2], w = x.dims[3];
  Ref out{{x.dims[0], x.dims[1], pool_output_size(h, k[0], p[0], s[0], d[0], o.ceil_mode),
           pool_output_size(w, k[1], p[1], s[1], d[1], o.ceil_mode)},
          {}};
  for_each_index(out.dims, [&](const Dims& i) {
    const int64_t y0 = i[2] * s[0] - p[0], x0 = i[3] * s[1] - p[1];
    double best = -std::numeric_limits<double>::infinity(), total = 0;
    int64_t inside = 0;
    for (int64_t ky = 0; ky < k[0]; ++ky) {
      for (int64_t kx = 0; kx < k[1]; ++kx) {
        const int64_t y = y0 + ky * d[0], xx = x0 + kx * d[1];
        if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
        const double v = at(x, {i[0], i[1], y, xx});
        best = std::max(best, v);
        total += v;
        ++inside;
      }
    }
    // count_include_pad counts the padding but not what lies past it (a ceil_mode window).
    const int64_t padded =
        (std::min(y0 + k[0], h + p[0]) - y0) * (std::min(x0 + k[1], w + p[1]) - x0);
    const double divisor = static_cast<double>(o.count_include_pad ? padded : inside);
    out.values.push_back(avg ? total / divisor : best);
  });
  return out;
}

// ---- Random inputs and device tensors --------------------------------------------------------

// f rounded to bf16's 8 significant bits, to nearest even.
double to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return std::bit_cast<float>((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

double round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(v);
    case DType::kBF16:
      return to_bf16(static_cast<float>(v));
    case DType::kI32:
    case DType::kI64:
      return std::trunc(v);
    case DType::kBool:
      return v != 0 ? 1 : 0;
    case DType::kF64:
      return v;
  }
  return v;
}

// Values uniform in [lo, hi), rounded to `dtype` so the reference sees what the device holds.
Ref random_ref(std::mt19937& rng, Dims dims, double lo, double hi, DType dtype = DType::kF32) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Ref x{std::move(dims), {}};
  for (int64_t i = count(x.dims); i > 0; --i) x.values.push_back(round_to(dtype, dist(rng)));
  return x;
}

// Integers uniform in [lo, hi].
Ref random_ints(std::mt19937& rng, Dims dims, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  Ref x{std::move(dims), {}};
  for (int64_t i = count(x.dims); i > 0; --i) x.values.push_back(static_cast<double>(dist(rng)));
  return x;
}

Dims random_dims(std::mt19937& rng, int rank, int64_t max_size = 5) {
  std::uniform_int_distribution<int64_t> dist(1, max_size);
  Dims dims;
  for (int i = 0; i < rank; ++i) dims.push_back(dist(rng));
  return dims;
}

template <class T>
Tensor tensor_of(const Ref& x) {
  std::vector<T> values;
  for (double v : x.values) values.push_back(static_cast<T>(v));
  return tensor(values, shape_of(x.dims));
}

// x on the device in `dtype`; bool and bf16 have no host constructor, so they come from a cast.
Tensor on_device(const Ref& x, DType dtype = DType::kF32) {
  switch (dtype) {
    case DType::kF32:
      return tensor_of<float>(x);
    case DType::kF64:
      return tensor_of<double>(x);
    case DType::kI32:
      return tensor_of<int32_t>(x);
    case DType::kI64:
      return tensor_of<int64_t>(x);
    case DType::kBF16:
    case DType::kBool:
      return cast(tensor_of<float>(x), dtype);
  }
  return {};
}

// ---- Comparison ------------------------------------------------------------------------------

struct Tolerance {
  double rel;
  double abs;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kTolF32{1e-5, 1e-6};
constexpr Tolerance kTolF64{1e-12, 1e-14};
constexpr Tolerance kTolBf16{1e-2, 1e-6};

// Passes when t has `dtype`, want's dims, and every element within tol.abs + tol.rel * size,
// size being |want| or, when larger, the element's `scale` (see the top of the file).
::testing::AssertionResult matches(const Tensor& t, DType dtype, const Ref& want, Tolerance tol,
                                   const std::vector<double>& scale = {}) {
  if (t.dtype() != dtype) {
    return ::testing::AssertionFailure()
           << "dtype is " << dtype_name(t.dtype()) << ", expected " << dtype_name(dtype);
  }
  if (!(t.shape() == shape_of(want.dims))) {
    return ::testing::AssertionFailure() << "shape is " << t.shape().to_string() << ", expected "
                                         << shape_of(want.dims).to_string();
  }
  const std::vector<double> got = t.to_vector<double>();
  if (got.size() != want.values.size()) {
    return ::testing::AssertionFailure()
           << "read " << got.size() << " elements, expected " << want.values.size();
  }
  std::ostringstream detail;
  detail << std::setprecision(10);
  int64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double size = std::max(std::abs(want.values[i]), scale.empty() ? 0.0 : scale[i]);
    if (std::abs(got[i] - want.values[i]) <= tol.abs + tol.rel * size) continue;
    if (++bad <= 5)
      detail << "\n  element " << i << ": got " << got[i] << ", want " << want.values[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements of " << dtype_name(dtype)
         << shape_of(want.dims).to_string() << " differ (rel " << tol.rel << ", abs " << tol.abs
         << ")" << detail.str();
}

Ref constant_ref(Dims dims, double value) {
  return Ref{dims, std::vector<double>(static_cast<std::size_t>(count(dims)), value)};
}

void fresh_system() {
  LazySystem::restart();
  clear_all();
}

class OpsValue : public ::testing::Test {
 protected:
  void SetUp() override { fresh_system(); }
};

// ---- Creation --------------------------------------------------------------------------------

TEST_F(OpsValue, FullFillsEveryElementInEachDtype) {
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    const Dims dims = random_dims(rng, 3);
    EXPECT_TRUE(matches(full(shape_of(dims), -2.5, dtype), dtype,
                        constant_ref(dims, round_to(dtype, -2.5)), kExact));
  }
  EXPECT_TRUE(
      matches(full({2, 2}, 3, DType::kBool), DType::kBool, constant_ref({2, 2}, 1), kExact));
}

TEST_F(OpsValue, ZerosOnesAndTheirLikesHoldZeroAndOne) {
  const Tensor z = zeros({2, 3}, DType::kF64);
  EXPECT_TRUE(matches(z, DType::kF64, constant_ref({2, 3}, 0), kExact));
  EXPECT_TRUE(matches(ones({4}, DType::kI32), DType::kI32, constant_ref({4}, 1), kExact));
  EXPECT_TRUE(matches(ones_like(z), DType::kF64, constant_ref({2, 3}, 1), kExact));
  EXPECT_TRUE(matches(zeros_like(ones({3, 1})), DType::kF32, constant_ref({3, 1}, 0), kExact));
}

TEST_F(OpsValue, ArangeMatchesThePythonRange) {
  struct Case {
    double start, end, step;
    DType dtype;
  };
  for (const Case& c :
       {Case{0, 10, 1, DType::kF32}, Case{1.5, 4, 0.5, DType::kF64}, Case{10, 0, -3, DType::kI64},
        Case{0, 1, 0.1, DType::kF32}, Case{-3, 7, 2, DType::kI32}}) {
    // torch.arange: ceil((end - start) / step) values start + i * step.
    const auto n = static_cast<int64_t>(std::ceil((c.end - c.start) / c.step));
    Ref want{{n}, {}};
    for (int64_t i = 0; i < n; ++i) {
      want.values.push_back(round_to(c.dtype, c.start + static_cast<double>(i) * c.step));
    }
    EXPECT_TRUE(matches(arange(c.start, c.end, c.step, c.dtype), c.dtype, want, kExact))
        << "arange(" << c.start << ", " << c.end << ", " << c.step << ")";
  }
}

TEST_F(OpsValue, ScalarTensorIsZeroDimWithItsValue) {
  EXPECT_TRUE(matches(scalar_tensor(3.75), DType::kF32, Ref{{}, {3.75}}, kExact));
  EXPECT_TRUE(matches(scalar_tensor(0.1, DType::kF64), DType::kF64, Ref{{}, {0.1}}, kExact));
  EXPECT_DOUBLE_EQ(scalar_tensor(-7, DType::kI64).item(), -7.0);
}

// ---- Elementwise binary ops ------------------------------------------------------------------

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  double (*ref)(double, double);
  double a_lo, a_hi, b_lo, b_hi;  // input ranges (pow needs a positive base, div a nonzero b)
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](double a, double b) { return a + b; }, -3, 3, -3, 3},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; },
       [](double a, double b) { return a - b; }, -3, 3, -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](double a, double b) { return a * b; }, -3, 3, -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; },
       [](double a, double b) { return a / b; }, -3, 3, 0.25, 4},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.25, 4, -2.5, 2.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -3, 3, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -3, 3, -3, 3},
  };
}

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }

class BinaryOpValue : public ::testing::TestWithParam<BinaryCase> {
 protected:
  void SetUp() override { fresh_system(); }

  // The op on random a of `da` and b of `db`, checked against the reference loop.
  ::testing::AssertionResult check(std::mt19937& rng, const Dims& da, const Dims& db,
                                   DType dtype = DType::kF32, Tolerance tol = kTolF32) {
    const BinaryCase& c = GetParam();
    const Ref a = random_ref(rng, da, c.a_lo, c.a_hi, dtype);
    const Ref b = random_ref(rng, db, c.b_lo, c.b_hi, dtype);
    return matches(c.op(on_device(a, dtype), on_device(b, dtype)), dtype, zip(a, b, c.ref), tol);
  }
};

TEST_P(BinaryOpValue, MatchesReferenceOnEqualRandomShapes) {
  std::mt19937 rng(11);
  for (int rank = 1; rank <= 4; ++rank) {
    const Dims dims = random_dims(rng, rank);
    EXPECT_TRUE(check(rng, dims, dims));
  }
}

TEST_P(BinaryOpValue, BroadcastsRank3AgainstRank2) {
  std::mt19937 rng(12);
  EXPECT_TRUE(check(rng, {3, 1, 5}, {4, 5}));
  EXPECT_TRUE(check(rng, {4, 5}, {3, 1, 5}));
  EXPECT_TRUE(check(rng, {2, 1, 4}, {3, 1}));
}

TEST_P(BinaryOpValue, BroadcastsZeroDimOperands) {
  std::mt19937 rng(13);
  EXPECT_TRUE(check(rng, {}, {2, 3}));
  EXPECT_TRUE(check(rng, {2, 3}, {}));
  EXPECT_TRUE(check(rng, {}, {}));
}

TEST_P(BinaryOpValue, KeepsSizeZeroDims) {
  std::mt19937 rng(14);
  EXPECT_TRUE(check(rng, {0, 3}, {1, 3}));
  EXPECT_TRUE(check(rng, {2, 1}, {2, 0}));
  EXPECT_TRUE(check(rng, {0}, {}));
}

// Large enough for the kernels' vectorised blocks and their tails.
TEST_P(BinaryOpValue, MatchesReferenceOnLargeBroadcastShapes) {
  std::mt19937 rng(16);
  EXPECT_TRUE(check(rng, {37, 1, 129}, {5, 129}));
  EXPECT_TRUE(check(rng, {1000}, {1000}));
  EXPECT_TRUE(check(rng, {33, 17}, {33, 1}));
}

TEST_P(BinaryOpValue, MatchesReferenceInF64) {
  std::mt19937 rng(15);
  EXPECT_TRUE(check(rng, {3, 1, 5}, {4, 5}, DType::kF64, kTolF64));
  EXPECT_TRUE(check(rng, random_dims(rng, 3), {}, DType::kF64, kTolF64));
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryOpValue, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- Scalar operands, integers and promotion -------------------------------------------------

TEST_F(OpsValue, ScalarOnTheRightOfEachOperator) {
  std::mt19937 rng(21);
  const Ref x = random_ref(rng, {3, 4}, 0.5, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(t * 0.5, DType::kF32, map(x, [](double v) { return v * 0.5; }), kTolF32));
  EXPECT_TRUE(matches(t + 3.25, DType::kF32, map(x, [](double v) { return v + 3.25; }), kTolF32));
  EXPECT_TRUE(matches(t - 1.5, DType::kF32, map(x, [](double v) { return v - 1.5; }), kTolF32));
  EXPECT_TRUE(matches(t / 3.0, DType::kF32, map(x, [](double v) { return v / 3.0; }), kTolF32));
  EXPECT_TRUE(
      matches(div(t, -0.1), DType::kF32, map(x, [](double v) { return v / -0.1; }), kTolF32));
}

TEST_F(OpsValue, ScalarOnTheLeftOfEachOperator) {
  std::mt19937 rng(22);
  const Ref x = random_ref(rng, {2, 5}, 0.5, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(2.0 - t, DType::kF32, map(x, [](double v) { return 2.0 - v; }), kTolF32));
  EXPECT_TRUE(matches(3.0 / t, DType::kF32, map(x, [](double v) { return 3.0 / v; }), kTolF32));
  EXPECT_TRUE(matches(2.5 * t, DType::kF32, map(x, [](double v) { return 2.5 * v; }), kTolF32));
  EXPECT_TRUE(matches(1.5 + t, DType::kF32, map(x, [](double v) { return 1.5 + v; }), kTolF32));
}

TEST_F(OpsValue, ScalarsZeroAndOneGiveTheirArithmetic) {
  std::mt19937 rng(23);
  const Ref x = random_ref(rng, {7}, -2, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(t * 0.0, DType::kF32, constant_ref({7}, 0), kExact));
  EXPECT_TRUE(matches(t + 0.0, DType::kF32, x, kExact));
  EXPECT_TRUE(matches(t * 1.0, DType::kF32, x, kExact));
  EXPECT_TRUE(matches(1.0 - t, DType::kF32, map(x, [](double v) { return 1.0 - v; }), kTolF32));
  EXPECT_TRUE(matches(0.0 - t, DType::kF32, map(x, [](double v) { return -v; }), kExact));
}

TEST_F(OpsValue, UnaryMinusOperatorNegates) {
  std::mt19937 rng(24);
  const Ref x = random_ref(rng, {3, 3}, -2, 2);
  EXPECT_TRUE(matches(-on_device(x), DType::kF32, map(x, [](double v) { return -v; }), kExact));
}

TEST_F(OpsValue, PowWithAScalarExponent) {
  std::mt19937 rng(25);
  const Ref x = random_ref(rng, {4, 3}, 0.25, 4);
  const Tensor t = on_device(x);
  for (double e : {2.5, 0.5, 2.0, -1.0, 3.0}) {
    EXPECT_TRUE(
        matches(pow(t, e), DType::kF32, map(x, [e](double v) { return std::pow(v, e); }), kTolF32))
        << "exponent " << e;
  }
}

TEST_F(OpsValue, ScalarOperandKeepsTheTensorDtype) {
  std::mt19937 rng(26);
  const Ref x = random_ref(rng, {5}, -2, 2, DType::kF64);
  EXPECT_TRUE(matches(on_device(x, DType::kF64) * 0.1, DType::kF64,
                      map(x, [](double v) { return v * 0.1; }), kTolF64));
  const Ref n = random_ints(rng, {6}, -20, 20);
  EXPECT_TRUE(matches(on_device(n, DType::kI32) * 3.0, DType::kI32,
                      map(n, [](double v) { return v * 3; }), kExact));
  // A fractional scalar makes an integer tensor's result float, as in PyTorch.
  EXPECT_TRUE(matches(on_device(n, DType::kI32) * 0.5, DType::kF32,
                      map(n, [](double v) { return v * 0.5; }), kTolF32));
}

TEST_F(OpsValue, IntegerArithmeticIsExact) {
  std::mt19937 rng(27);
  for (DType dtype : {DType::kI32, DType::kI64}) {
    const Ref a = random_ints(rng, {3, 4}, -50, 50);
    const Ref b = random_ints(rng, {4}, -50, 50);
    const Tensor ta = on_device(a, dtype), tb = on_device(b, dtype);
    EXPECT_TRUE(matches(ta + tb, dtype, zip(a, b, std::plus<>()), kExact));
    EXPECT_TRUE(matches(ta - tb, dtype, zip(a, b, std::minus<>()), kExact));
    EXPECT_TRUE(matches(ta * tb, dtype, zip(a, b, std::multiplies<>()), kExact));
    EXPECT_TRUE(matches(maximum(ta, tb), dtype,
                        zip(a, b, [](double p, double q) { return std::max(p, q); }), kExact));
  }
}

TEST_F(OpsValue, DivisionOfIntegersIsTrueDivisionInF32) {
  std::mt19937 rng(28);
  const Ref a = random_ints(rng, {4, 5}, -30, 30);
  const Ref b = random_ints(rng, {5}, 1, 9);
  EXPECT_TRUE(matches(on_device(a, DType::kI64) / on_device(b, DType::kI64), DType::kF32,
                      zip(a, b, std::divides<>()), kTolF32));
}

TEST_F(OpsValue, MixedDtypesPromoteAsPyTorch) {
  std::mt19937 rng(29);
  const Ref i = random_ints(rng, {2, 3}, -9, 9);
  const Ref f = random_ref(rng, {3}, -2, 2);
  EXPECT_TRUE(matches(on_device(i, DType::kI32) + on_device(f), DType::kF32,
                      zip(i, f, std::plus<>()), kTolF32));
  // An f32 value widens exactly, so f32 + f64 is exact in f64.
  const Ref g = random_ref(rng, {2, 3}, -2, 2, DType::kF64);
  EXPECT_TRUE(matches(on_device(f) + on_device(g, DType::kF64), DType::kF64,
                      zip(f, g, std::plus<>()), kTolF64));
  EXPECT_TRUE(matches(on_device(i, DType::kI32) * on_device(i, DType::kI64), DType::kI64,
                      zip(i, i, std::multiplies<>()), kExact));
}

// ---- Comparisons, logical ops, where ---------------------------------------------------------

struct CompareCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  bool (*ref)(double, double);
};

std::vector<CompareCase> compare_cases() {
  return {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](double a, double b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](double a, double b) { return a >= b; }},
  };
}

void PrintTo(const CompareCase& c, std::ostream* os) { *os << c.name; }

class CompareOpValue : public ::testing::TestWithParam<CompareCase> {
 protected:
  void SetUp() override { fresh_system(); }
  Ref expected(const Ref& a, const Ref& b) {
    return zip(a, b, [this](double p, double q) { return GetParam().ref(p, q) ? 1.0 : 0.0; });
  }
};

// Small integer values, so that equal elements are common.
TEST_P(CompareOpValue, BroadcastsAndGivesBool) {
  std::mt19937 rng(31);
  const Ref a = random_ints(rng, {3, 1, 5}, -2, 2);
  const Ref b = random_ints(rng, {4, 5}, -2, 2);
  EXPECT_TRUE(
      matches(GetParam().op(on_device(a), on_device(b)), DType::kBool, expected(a, b), kExact));
}

TEST_P(CompareOpValue, ComparesIntegersWithFloatsAfterPromotion) {
  std::mt19937 rng(32);
  const Ref a = random_ints(rng, {12}, -2, 2);
  const Ref b = map(random_ints(rng, {12}, -4, 4), [](double v) { return v / 2; });
  EXPECT_TRUE(matches(GetParam().op(on_device(a, DType::kI32), on_device(b)), DType::kBool,
                      expected(a, b), kExact));
}

INSTANTIATE_TEST_SUITE_P(Ops, CompareOpValue, ::testing::ValuesIn(compare_cases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(OpsValue, ComparisonsWithAScalar) {
  std::mt19937 rng(33);
  const Ref x = map(random_ints(rng, {4, 4}, -4, 4), [](double v) { return v / 2; });
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(eq(t, 1.0), DType::kBool,
                      map(x, [](double v) { return v == 1.0 ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(lt(t, 0.5), DType::kBool,
                      map(x, [](double v) { return v < 0.5 ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(gt(t, -1.0), DType::kBool,
                      map(x, [](double v) { return v > -1.0 ? 1.0 : 0.0; }), kExact));
}

TEST_F(OpsValue, LogicalAndOrBroadcastBoolTensors) {
  std::mt19937 rng(34);
  const Ref a = random_ints(rng, {3, 1, 5}, 0, 1);
  const Ref b = random_ints(rng, {4, 5}, 0, 1);
  const Tensor ta = on_device(a, DType::kBool), tb = on_device(b, DType::kBool);
  EXPECT_TRUE(matches(logical_and(ta, tb), DType::kBool,
                      zip(a, b, [](double p, double q) { return p && q ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(logical_or(ta, tb), DType::kBool,
                      zip(a, b, [](double p, double q) { return p || q ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(logical_not(ta), DType::kBool, map(a, [](double p) { return p ? 0.0 : 1.0; }),
                      kExact));
}

TEST_F(OpsValue, LogicalOpsReadNonZeroAsTrue) {
  const Ref a{{6}, {-1, 0, 0.5, 0, 2, -0.0}};
  const Ref b{{6}, {0, 3, 3, 0, -7, 1}};
  const Tensor ta = on_device(a), tb = on_device(b, DType::kI32);
  EXPECT_TRUE(matches(logical_and(ta, tb), DType::kBool, Ref{{6}, {0, 0, 1, 0, 1, 0}}, kExact));
  EXPECT_TRUE(matches(logical_or(ta, tb), DType::kBool, Ref{{6}, {1, 1, 1, 0, 1, 1}}, kExact));
  EXPECT_TRUE(matches(logical_not(ta), DType::kBool, Ref{{6}, {0, 1, 0, 1, 0, 1}}, kExact));
}

TEST_F(OpsValue, WhereSelectsWithBroadcasting) {
  std::mt19937 rng(35);
  const Ref c = random_ints(rng, {3, 1, 5}, 0, 1);
  const Ref a = random_ref(rng, {4, 5}, -3, 3);
  const Ref b{{}, {0.25}};
  Ref want{{3, 4, 5}, {}};
  for_each_index(want.dims, [&](const Dims& i) {
    want.values.push_back(broadcast_at(c, i) != 0 ? broadcast_at(a, i) : 0.25);
  });
  EXPECT_TRUE(matches(where(on_device(c, DType::kBool), on_device(a), on_device(b)), DType::kF32,
                      want, kExact));
}

TEST_F(OpsValue, WherePromotesItsValuesAndReadsAnyConditionAsNonZero) {
  std::mt19937 rng(36);
  const Ref c{{3}, {0, 2.5, -1}};
  const Ref a = random_ints(rng, {2, 3}, -9, 9);
  const Ref b = random_ref(rng, {3}, -2, 2, DType::kF64);
  Ref want{{2, 3}, {}};
  for_each_index(want.dims, [&](const Dims& i) {
    want.values.push_back(c.values[i[1]] != 0 ? at(a, i) : b.values[i[1]]);
  });
  EXPECT_TRUE(matches(where(on_device(c), on_device(a, DType::kI32), on_device(b, DType::kF64)),
                      DType::kF64, want, kExact));
}

// ---- Unary math ------------------------------------------------------------------------------

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  double (*ref)(double);
  double lo, hi;
};

double gelu_erf_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -10,
       10},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.01,
       100},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0,
       100},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); },
       0.01, 100},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -5,
       5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [](double v) { return 1 / (1 + std::exp(-v)); }, -10, 10},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return std::max(v, 0.0); },
       -3, 3},
      {"gelu_none", [](const Tensor& x) { return gelu(x); }, gelu_erf_ref, -5, 5},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -5, 5},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3},
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -3, 3},
  };
}

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

class UnaryOpValue : public ::testing::TestWithParam<UnaryCase> {
 protected:
  void SetUp() override { fresh_system(); }
  ::testing::AssertionResult check(std::mt19937& rng, const Dims& dims, DType dtype,
                                   Tolerance tol) {
    const UnaryCase& c = GetParam();
    const Ref x = random_ref(rng, dims, c.lo, c.hi, dtype);
    return matches(c.op(on_device(x, dtype)), dtype, map(x, c.ref), tol);
  }
};

TEST_P(UnaryOpValue, MatchesReferenceInF32) {
  std::mt19937 rng(41);
  for (int rank = 0; rank <= 4; ++rank)
    EXPECT_TRUE(check(rng, random_dims(rng, rank, 6), DType::kF32, kTolF32));
  EXPECT_TRUE(check(rng, {2, 0, 3}, DType::kF32, kTolF32));
}

TEST_P(UnaryOpValue, MatchesReferenceInF64) {
  std::mt19937 rng(42);
  EXPECT_TRUE(check(rng, {5, 7}, DType::kF64, kTolF64));
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryOpValue, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(OpsValue, TranscendentalsOfIntegersComputeInF32) {
  const Ref n{{4}, {1, 2, 3, 9}};
  const Tensor t = on_device(n, DType::kI32);
  EXPECT_TRUE(
      matches(sqrt(t), DType::kF32, map(n, [](double v) { return std::sqrt(v); }), kTolF32));
  EXPECT_TRUE(matches(exp(t), DType::kF32, map(n, [](double v) { return std::exp(v); }), kTolF32));
}

TEST_F(OpsValue, ReluAbsNegKeepIntegerDtype) {
  const Ref n{{5}, {-3, -1, 0, 2, 7}};
  const Tensor t = on_device(n, DType::kI64);
  EXPECT_TRUE(matches(relu(t), DType::kI64, Ref{{5}, {0, 0, 0, 2, 7}}, kExact));
  EXPECT_TRUE(matches(abs(t), DType::kI64, Ref{{5}, {3, 1, 0, 2, 7}}, kExact));
  EXPECT_TRUE(matches(neg(t), DType::kI64, Ref{{5}, {3, 1, 0, -2, -7}}, kExact));
}

// ---- Casts -----------------------------------------------------------------------------------

TEST_F(OpsValue, CastF32ToF64IsExact) {
  std::mt19937 rng(51);
  const Ref x = random_ref(rng, {3, 4}, -100, 100);
  EXPECT_TRUE(matches(cast(on_device(x), DType::kF64), DType::kF64, x, kExact));
}

TEST_F(OpsValue, CastF64ToF32RoundsToNearest) {
  std::mt19937 rng(52);
  const Ref x = random_ref(rng, {10}, -100, 100, DType::kF64);
  EXPECT_TRUE(matches(cast(on_device(x, DType::kF64), DType::kF32), DType::kF32,
                      map(x, [](double v) { return round_to(DType::kF32, v); }), kExact));
}

TEST_F(OpsValue, CastFloatToIntegerTruncatesTowardZero) {
  const Ref x{{6}, {-2.75, -0.5, 0, 0.5, 1.999, 7.25}};
  const Ref want{{6}, {-2, 0, 0, 0, 1, 7}};
  EXPECT_TRUE(matches(cast(on_device(x), DType::kI32), DType::kI32, want, kExact));
  EXPECT_TRUE(matches(cast(on_device(x, DType::kF64), DType::kI64), DType::kI64, want, kExact));
}

TEST_F(OpsValue, CastIntegerToFloatIsExact) {
  std::mt19937 rng(53);
  const Ref n = random_ints(rng, {8}, -1000000, 1000000);
  EXPECT_TRUE(matches(cast(on_device(n, DType::kI64), DType::kF32), DType::kF32, n, kExact));
  EXPECT_TRUE(matches(cast(on_device(n, DType::kI32), DType::kF64), DType::kF64, n, kExact));
}

TEST_F(OpsValue, CastToBoolIsNonZeroAndBackIsZeroOrOne) {
  const Ref x{{5}, {0, -0.0, 0.25, -3, 1e-30}};
  const Tensor b = cast(on_device(x), DType::kBool);
  EXPECT_TRUE(matches(b, DType::kBool, Ref{{5}, {0, 0, 1, 1, 1}}, kExact));
  EXPECT_TRUE(matches(cast(b, DType::kF32), DType::kF32, Ref{{5}, {0, 0, 1, 1, 1}}, kExact));
  EXPECT_TRUE(
      matches(cast(cast(on_device(Ref{{3}, {0, 5, -2}}, DType::kI64), DType::kBool), DType::kI32),
              DType::kI32, Ref{{3}, {0, 1, 1}}, kExact));
}

TEST_F(OpsValue, CastF32ToBf16IsWithinBf16Precision) {
  std::mt19937 rng(54);
  const Ref x = random_ref(rng, {4, 6}, -50, 50);
  EXPECT_TRUE(matches(cast(on_device(x), DType::kBF16), DType::kBF16, x, kTolBf16));
}

TEST_F(OpsValue, Bf16ValuesRoundTripThroughF32AndF64) {
  std::mt19937 rng(55);
  const Ref x = random_ref(rng, {10}, -8, 8, DType::kBF16);  // already bf16 values
  const Tensor b = on_device(x, DType::kBF16);
  EXPECT_TRUE(matches(cast(b, DType::kF32), DType::kF32, x, kExact));
  EXPECT_TRUE(matches(cast(b, DType::kF64), DType::kF64, x, kExact));
}

TEST_F(OpsValue, Bf16ArithmeticIsWithinBf16Precision) {
  std::mt19937 rng(56);
  const Ref a = random_ref(rng, {3, 5}, -4, 4, DType::kBF16);
  const Ref b = random_ref(rng, {5}, 0.5, 4, DType::kBF16);
  const Tensor ta = on_device(a, DType::kBF16), tb = on_device(b, DType::kBF16);
  EXPECT_TRUE(matches(ta * tb + ta, DType::kBF16,
                      zip(a, b, [](double p, double q) { return p * q + p; }), kTolBf16));
  EXPECT_TRUE(
      matches(exp(ta), DType::kBF16, map(a, [](double v) { return std::exp(v); }), kTolBf16));
  EXPECT_TRUE(matches(sum(ta, {1}), DType::kBF16, reduce_ref(a, {1}, false, sum_of), kTolBf16));
}

// ---- Reductions ------------------------------------------------------------------------------

struct ReduceCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Dims&, bool)> op;
  double (*ref)(const std::vector<double>&);
};

std::vector<ReduceCase> reduce_cases() {
  return {
      {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, sum_of},
      {"mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }, mean_of},
      {"amax", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, max_of},
      {"amin", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, min_of},
      {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); },
       logsumexp_of},
  };
}

void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

class ReduceOpValue : public ::testing::TestWithParam<ReduceCase> {
 protected:
  void SetUp() override { fresh_system(); }
  ::testing::AssertionResult check(const Ref& x, const Dims& dims, bool keepdim, DType dtype,
                                   Tolerance tol) {
    const ReduceCase& c = GetParam();
    return matches(c.op(on_device(x, dtype), dims, keepdim), dtype,
                   reduce_ref(x, dims, keepdim, c.ref), tol);
  }
};

TEST_P(ReduceOpValue, MatchesReferenceOverEachDimSet) {
  std::mt19937 rng(61);
  const Ref x = random_ref(rng, {3, 4, 5}, -3, 3);
  for (const Dims& dims :
       {Dims{}, Dims{0}, Dims{1}, Dims{-1}, Dims{0, 2}, Dims{2, 0}, Dims{1, 2}, Dims{0, 1, 2}}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(check(x, dims, keepdim, DType::kF32, kTolF32))
          << "dims of size " << dims.size() << (dims.empty() ? "" : " starting ")
          << (dims.empty() ? 0 : dims[0]) << ", keepdim " << keepdim;
    }
  }
}

// Long rows and columns, past the kernels' fixed-size accumulator blocks.
TEST_P(ReduceOpValue, MatchesReferenceOnLargeShapes) {
  std::mt19937 rng(60);
  const Ref x = random_ref(rng, {9, 130, 17}, -3, 3);
  for (const Dims& dims : {Dims{}, Dims{0}, Dims{1}, Dims{2}, Dims{0, 2}}) {
    EXPECT_TRUE(check(x, dims, false, DType::kF32, kTolF32)) << "dims of size " << dims.size();
  }
}

TEST_P(ReduceOpValue, MatchesReferenceInF64) {
  std::mt19937 rng(62);
  const Ref x = random_ref(rng, random_dims(rng, 4), -3, 3, DType::kF64);
  EXPECT_TRUE(check(x, {1, 3}, true, DType::kF64, kTolF64));
  EXPECT_TRUE(check(x, {-2}, false, DType::kF64, kTolF64));
}

TEST_P(ReduceOpValue, ReducesAZeroDimTensorToItself) {
  EXPECT_TRUE(check(Ref{{}, {1.75}}, {}, false, DType::kF32, kTolF32));
  EXPECT_TRUE(check(Ref{{}, {-0.5}}, {0}, true, DType::kF32, kTolF32));
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceOpValue, ::testing::ValuesIn(reduce_cases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(OpsValue, SumOfIntegersWidensToInt64) {
  std::mt19937 rng(63);
  const Ref n = random_ints(rng, {4, 5}, -1000, 1000);
  EXPECT_TRUE(matches(sum(on_device(n, DType::kI32), {1}), DType::kI64,
                      reduce_ref(n, {1}, false, sum_of), kExact));
}

TEST_F(OpsValue, SumOverAnEmptyDimIsZero) {
  EXPECT_TRUE(matches(sum(zeros({3, 0}), {1}), DType::kF32, constant_ref({3}, 0), kExact));
  EXPECT_TRUE(matches(sum(on_device(Ref{{0, 2}, {}})), DType::kF32, Ref{{}, {0}}, kExact));
}

TEST_F(OpsValue, ArgmaxAlongADimReturnsTheFirstMaximum) {
  std::mt19937 rng(64);
  const Ref x = random_ints(rng, {4, 5, 6}, 0, 3);  // many ties
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(matches(argmax(on_device(x), dim, keepdim), DType::kI64,
                          reduce_ref(x, {dim}, keepdim, first_argmax_of), kExact))
          << "dim " << dim << ", keepdim " << keepdim;
    }
  }
}

TEST_F(OpsValue, ArgmaxWithoutADimIndexesTheFlattenedTensor) {
  std::mt19937 rng(65);
  const Ref x = random_ints(rng, {3, 4, 2}, 0, 2);  // the maximum appears more than once
  const double want = first_argmax_of(x.values);
  EXPECT_TRUE(matches(argmax(on_device(x)), DType::kI64, Ref{{}, {want}}, kExact));
  EXPECT_TRUE(matches(argmax(on_device(x), std::nullopt, true), DType::kI64, Ref{{1, 1, 1}, {want}},
                      kExact));
}

TEST_F(OpsValue, SoftmaxMatchesReferenceAlongEachDim) {
  std::mt19937 rng(66);
  const Ref x = random_ref(rng, {3, 4, 5}, -4, 4);
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(
        matches(softmax(on_device(x), dim), DType::kF32, softmax_ref(x, dim, false), kTolF32))
        << "dim " << dim;
  }
}

TEST_F(OpsValue, LogSoftmaxMatchesReferenceAlongEachDim) {
  std::mt19937 rng(67);
  const Ref x = random_ref(rng, {3, 4, 5}, -4, 4);
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(
        matches(log_softmax(on_device(x), dim), DType::kF32, softmax_ref(x, dim, true), kTolF32))
        << "dim " << dim;
  }
}

TEST_F(OpsValue, SoftmaxAndLogSoftmaxOnLongRowsAndColumns) {
  std::mt19937 rng(69);
  const Ref rows = random_ref(rng, {5, 1000}, -6, 6);
  EXPECT_TRUE(
      matches(softmax(on_device(rows), -1), DType::kF32, softmax_ref(rows, 1, false), kTolF32));
  const Ref cols = random_ref(rng, {300, 7}, -6, 6);
  EXPECT_TRUE(
      matches(log_softmax(on_device(cols), 0), DType::kF32, softmax_ref(cols, 0, true), kTolF32));
}

// exp(90) overflows f32: a kernel that does not subtract the maximum first gives inf or NaN.
TEST_F(OpsValue, SoftmaxAndLogsumexpAreStableForLargeInputs) {
  std::mt19937 rng(68);
  const Ref x = random_ref(rng, {4, 6}, 80, 100);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(softmax(t, 1), DType::kF32, softmax_ref(x, 1, false), kTolF32));
  EXPECT_TRUE(matches(log_softmax(t, 1), DType::kF32, softmax_ref(x, 1, true), kTolF32));
  EXPECT_TRUE(
      matches(logsumexp(t, {1}), DType::kF32, reduce_ref(x, {1}, false, logsumexp_of), kTolF32));
}

// ---- Matmul and linear -----------------------------------------------------------------------

::testing::AssertionResult matmul_matches(std::mt19937& rng, const Dims& da, const Dims& db,
                                          DType dtype = DType::kF32, Tolerance tol = kTolF32) {
  const Ref a = random_ref(rng, da, -1, 1, dtype);
  const Ref b = random_ref(rng, db, -1, 1, dtype);
  std::vector<double> scale;
  const Ref want = matmul_ref(a, b, scale);
  return matches(matmul(on_device(a, dtype), on_device(b, dtype)), dtype, want, tol, scale);
}

TEST_F(OpsValue, MatmulOfTwoVectorsIsTheirDotProduct) {
  std::mt19937 rng(71);
  EXPECT_TRUE(matmul_matches(rng, {7}, {7}));
}

TEST_F(OpsValue, MatmulPromotesAVectorOperandAndDropsItsDim) {
  std::mt19937 rng(72);
  EXPECT_TRUE(matmul_matches(rng, {4}, {4, 3}));
  EXPECT_TRUE(matmul_matches(rng, {3, 4}, {4}));
  EXPECT_TRUE(matmul_matches(rng, {2, 3, 4}, {4}));
  EXPECT_TRUE(matmul_matches(rng, {4}, {2, 4, 3}));
}

TEST_F(OpsValue, MatmulOfRandomMatrices) {
  std::mt19937 rng(73);
  for (int trial = 0; trial < 4; ++trial) {
    const Dims d = random_dims(rng, 3, 9);
    EXPECT_TRUE(matmul_matches(rng, {d[0], d[1]}, {d[1], d[2]}));
  }
  EXPECT_TRUE(matmul_matches(rng, {33, 65}, {65, 17}));  // past Eigen's small-size paths
}

TEST_F(OpsValue, MatmulBroadcastsBatchDims) {
  std::mt19937 rng(74);
  EXPECT_TRUE(matmul_matches(rng, {2, 1, 3, 4}, {5, 4, 2}));
  EXPECT_TRUE(matmul_matches(rng, {3, 4}, {2, 4, 5}));
  EXPECT_TRUE(matmul_matches(rng, {3, 2, 4}, {4, 5}));
}

TEST_F(OpsValue, MatmulInF64) {
  std::mt19937 rng(75);
  EXPECT_TRUE(matmul_matches(rng, {2, 3, 6}, {6, 4}, DType::kF64, kTolF64));
}

TEST_F(OpsValue, LinearIsXTimesWeightTransposedPlusBias) {
  std::mt19937 rng(76);
  const Ref x = random_ref(rng, {2, 3, 6}, -1, 1);
  const Ref w = random_ref(rng, {5, 6}, -1, 1);
  const Ref b = random_ref(rng, {5}, -1, 1);
  std::vector<double> scale;
  const Ref product = matmul_ref(x, permute_ref(w, {1, 0}), scale);
  EXPECT_TRUE(matches(linear(on_device(x), on_device(w)), DType::kF32, product, kTolF32, scale));
  for (std::size_t i = 0; i < scale.size(); ++i) scale[i] += std::abs(b.values[i % 5]);
  EXPECT_TRUE(matches(linear(on_device(x), on_device(w), on_device(b)), DType::kF32,
                      zip(product, b, std::plus<>()), kTolF32, scale));
}

// ---- Convolution and pooling -----------------------------------------------------------------

// conv2d of random x [n, c, h, w] and weight [o, c / groups, kh, kw] (and bias [o]) against the
// reference.
::testing::AssertionResult conv_matches(uint32_t seed, const Dims& x_dims, const Dims& w_dims,
                                        const Conv2dOptions& options, bool with_bias) {
  std::mt19937 rng(seed);
  const Ref x = random_ref(rng, x_dims, -1, 1);
  const Ref w = random_ref(rng, w_dims, -1, 1);
  const Ref b = random_ref(rng, {w_dims[0]}, -1, 1);
  std::vector<double> scale;
  const Ref want = conv2d_ref(x, w, with_bias ? &b : nullptr, options, scale);
  const Tensor got =
      conv2d(on_device(x), on_device(w), with_bias ? on_device(b) : Tensor{}, options);
  return matches(got, DType::kF32, want, kTolF32, scale);
}

TEST_F(OpsValue, Conv2dWithDefaultOptionsAndBias) {
  EXPECT_TRUE(conv_matches(81, {2, 3, 7, 6}, {4, 3, 3, 3}, {}, true));
}

TEST_F(OpsValue, Conv2dAppliesStrideAndPadding) {
  Conv2dOptions options;
  options.stride = {2, 3};
  options.padding = {1, 2};
  EXPECT_TRUE(conv_matches(82, {2, 3, 9, 8}, {4, 3, 3, 2}, options, false));
}

TEST_F(OpsValue, Conv2dAppliesDilation) {
  Conv2dOptions options;
  options.dilation = {2, 3};
  options.padding = {2, 1};
  EXPECT_TRUE(conv_matches(83, {1, 2, 8, 9}, {3, 2, 3, 2}, options, true));
}

TEST_F(OpsValue, Conv2dSplitsChannelsIntoGroups) {
  Conv2dOptions options;
  options.groups = 2;
  options.padding = {1, 1};
  EXPECT_TRUE(conv_matches(84, {2, 4, 5, 5}, {6, 2, 3, 3}, options, true));
}

TEST_F(OpsValue, Conv2dDepthwiseWithStride) {
  Conv2dOptions options;
  options.groups = 3;
  options.stride = {2, 2};
  EXPECT_TRUE(conv_matches(85, {1, 3, 7, 7}, {3, 1, 3, 3}, options, false));
}

::testing::AssertionResult pool_matches(uint32_t seed, const Dims& x_dims, const Pool2dOptions& o,
                                        bool avg) {
  std::mt19937 rng(seed);
  const Ref x = random_ref(rng, x_dims, -3, 3);
  const Tensor got = avg ? avg_pool2d(on_device(x), o) : max_pool2d(on_device(x), o);
  return matches(got, DType::kF32, pool_ref(x, o, avg), avg ? kTolF32 : kExact);
}

TEST_F(OpsValue, MaxPool2dTakesEachWindowsMaximum) {
  EXPECT_TRUE(pool_matches(91, {2, 3, 6, 8}, {.kernel_size = {2}}, false));
  EXPECT_TRUE(pool_matches(92, {1, 2, 7, 7}, {.kernel_size = {3, 2}, .stride = {1, 2}}, false));
}

TEST_F(OpsValue, MaxPool2dWithPaddingAndDilation) {
  EXPECT_TRUE(pool_matches(93, {2, 2, 9, 8},
                           {.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {2, 1}},
                           false));
}

TEST_F(OpsValue, MaxPool2dCeilModeKeepsTheLastPartialWindow) {
  EXPECT_TRUE(pool_matches(94, {1, 2, 7, 6}, {.kernel_size = {2}, .ceil_mode = true}, false));
  EXPECT_TRUE(pool_matches(95, {1, 1, 6, 6},
                           {.kernel_size = {3}, .stride = {2}, .padding = {1}, .ceil_mode = true},
                           false));
}

TEST_F(OpsValue, AvgPool2dCountsPaddingByDefault) {
  EXPECT_TRUE(
      pool_matches(96, {2, 3, 7, 6}, {.kernel_size = {3}, .stride = {2}, .padding = {1}}, true));
}

TEST_F(OpsValue, AvgPool2dExcludesPaddingWhenAsked) {
  EXPECT_TRUE(pool_matches(
      97, {2, 3, 7, 6},
      {.kernel_size = {3}, .stride = {2}, .padding = {1}, .count_include_pad = false}, true));
}

// H = W = 6, kernel 3, stride 2, padding 1: the last ceil_mode window starts at 5 and covers 5..7,
// of which 5..6 are input or padding and 7 is past the padding; torch divides by 2 x 2, not 3 x 3.
TEST_F(OpsValue, AvgPool2dCeilModeWindowsCountPaddingButNotBeyond) {
  for (bool include_pad : {true, false}) {
    EXPECT_TRUE(pool_matches(98, {1, 2, 6, 6},
                             {.kernel_size = {3},
                              .stride = {2},
                              .padding = {1},
                              .ceil_mode = true,
                              .count_include_pad = include_pad},
                             true))
        << "count_include_pad " << include_pad;
  }
}

// ---- Shape and data movement -----------------------------------------------------------------

TEST_F(OpsValue, ReshapeAndViewKeepRowMajorOrder) {
  std::mt19937 rng(101);
  const Ref x = random_ref(rng, {2, 3, 4}, -1, 1);
  EXPECT_TRUE(matches(reshape(on_device(x), {4, -1}), DType::kF32, reshaped(x, {4, 6}), kExact));
  EXPECT_TRUE(matches(view(on_device(x), {24}), DType::kF32, reshaped(x, {24}), kExact));
  EXPECT_TRUE(matches(reshape(on_device(x), {3, 2, 2, 2}) + 0.0, DType::kF32,
                      reshaped(x, {3, 2, 2, 2}), kExact));
}

TEST_F(OpsValue, FlattenMergesTheGivenDims) {
  std::mt19937 rng(102);
  const Ref x = random_ref(rng, {2, 3, 4, 5}, -1, 1);
  EXPECT_TRUE(matches(flatten(on_device(x)), DType::kF32, reshaped(x, {120}), kExact));
  EXPECT_TRUE(matches(flatten(on_device(x), 1, 2), DType::kF32, reshaped(x, {2, 12, 5}), kExact));
  EXPECT_TRUE(matches(flatten(on_device(x), -2), DType::kF32, reshaped(x, {2, 3, 20}), kExact));
}

TEST_F(OpsValue, SqueezeRemovesOnlyASizeOneDim) {
  std::mt19937 rng(103);
  const Ref x = random_ref(rng, {3, 1, 4}, -1, 1);
  EXPECT_TRUE(matches(squeeze(on_device(x), 1), DType::kF32, reshaped(x, {3, 4}), kExact));
  EXPECT_TRUE(matches(squeeze(on_device(x), 0), DType::kF32, x, kExact));
}

TEST_F(OpsValue, UnsqueezeInsertsASizeOneDim) {
  std::mt19937 rng(104);
  const Ref x = random_ref(rng, {3, 4}, -1, 1);
  EXPECT_TRUE(matches(unsqueeze(on_device(x), 0), DType::kF32, reshaped(x, {1, 3, 4}), kExact));
  EXPECT_TRUE(matches(unsqueeze(on_device(x), -1), DType::kF32, reshaped(x, {3, 4, 1}), kExact));
}

TEST_F(OpsValue, PermuteReordersDims) {
  std::mt19937 rng(105);
  const Ref x = random_ref(rng, random_dims(rng, 4), -1, 1);
  for (const Dims& perm : {Dims{3, 1, 0, 2}, Dims{0, 2, 1, 3}, Dims{3, 2, 1, 0}}) {
    EXPECT_TRUE(matches(permute(on_device(x), perm), DType::kF32, permute_ref(x, perm), kExact));
  }
  EXPECT_TRUE(matches(permute(on_device(x), {-1, 0, 1, 2}), DType::kF32,
                      permute_ref(x, {3, 0, 1, 2}), kExact));
}

TEST_F(OpsValue, TransposeSwapsTwoDims) {
  std::mt19937 rng(106);
  const Ref x = random_ref(rng, {2, 3, 4}, -1, 1);
  EXPECT_TRUE(
      matches(transpose(on_device(x), 0, 2), DType::kF32, permute_ref(x, {2, 1, 0}), kExact));
  EXPECT_TRUE(
      matches(transpose(on_device(x), -1, 1), DType::kF32, permute_ref(x, {0, 2, 1}), kExact));
  const Ref big = random_ref(rng, {37, 70}, -1, 1);  // more than one tile of a tiled transpose
  EXPECT_TRUE(
      matches(transpose(on_device(big), 0, 1), DType::kF32, permute_ref(big, {1, 0}), kExact));
}

TEST_F(OpsValue, ExpandBroadcastsSizeOneDims) {
  std::mt19937 rng(107);
  const Ref x = random_ref(rng, {3, 1}, -1, 1);
  const Ref target = constant_ref({2, 3, 4}, 0);
  EXPECT_TRUE(matches(expand(on_device(x), {2, 3, 4}), DType::kF32,
                      zip(x, target, [](double v, double) { return v; }), kExact));
  EXPECT_TRUE(matches(expand(on_device(x), {2, -1, 4}), DType::kF32,
                      zip(x, target, [](double v, double) { return v; }), kExact));
}

TEST_F(OpsValue, SliceTakesStartEndAndStepLikePython) {
  std::mt19937 rng(108);
  const Ref x = random_ref(rng, {4, 9, 3}, -1, 1);
  struct Case {
    int64_t dim, start, end, step;
  };
  for (const Case& c : {Case{1, 2, 7, 1}, Case{1, -5, 9, 2}, Case{1, 1, 100, 3},
                        Case{-1, -2, -1, 1}, Case{0, -100, 3, 2}, Case{1, 6, 2, 1}}) {
    const int64_t d = c.dim < 0 ? c.dim + 3 : c.dim;
    EXPECT_TRUE(matches(slice(on_device(x), c.dim, c.start, c.end, c.step), DType::kF32,
                        pick_ref(x, d, python_slice(x.dims[d], c.start, c.end, c.step)), kExact))
        << "dim " << c.dim << " [" << c.start << ":" << c.end << ":" << c.step << "]";
  }
}

TEST_F(OpsValue, CatJoinsAlongADimIncludingEmptyPieces) {
  std::mt19937 rng(109);
  const Ref a = random_ref(rng, {2, 3, 4}, -1, 1);
  const Ref b = random_ref(rng, {2, 1, 4}, -1, 1);
  const Ref e{{2, 0, 4}, {}};
  const Ref c = random_ref(rng, {2, 2, 4}, -1, 1);
  EXPECT_TRUE(matches(cat({on_device(a), on_device(b), on_device(e), on_device(c)}, 1), DType::kF32,
                      cat_ref({a, b, e, c}, 1), kExact));
  EXPECT_TRUE(
      matches(cat({on_device(a), on_device(a)}, -1), DType::kF32, cat_ref({a, a}, 2), kExact));
}

TEST_F(OpsValue, CatPromotesMixedDtypes) {
  const Ref i{{2}, {3, -4}};
  const Ref f{{3}, {0.5, 1.25, -2}};
  EXPECT_TRUE(matches(cat({on_device(i, DType::kI32), on_device(f)}), DType::kF32,
                      cat_ref({i, f}, 0), kExact));
}

TEST_F(OpsValue, StackAddsANewDim) {
  std::mt19937 rng(110);
  const Ref a = random_ref(rng, {2, 3}, -1, 1);
  const Ref b = random_ref(rng, {2, 3}, -1, 1);
  EXPECT_TRUE(matches(stack({on_device(a), on_device(b)}, 0), DType::kF32,
                      cat_ref({reshaped(a, {1, 2, 3}), reshaped(b, {1, 2, 3})}, 0), kExact));
  EXPECT_TRUE(matches(stack({on_device(a), on_device(b)}, -1), DType::kF32,
                      cat_ref({reshaped(a, {2, 3, 1}), reshaped(b, {2, 3, 1})}, 2), kExact));
}

TEST_F(OpsValue, IndexSelectPicksEntriesAlongADim) {
  std::mt19937 rng(111);
  const Ref x = random_ref(rng, {3, 5, 2}, -1, 1);
  const Dims picks{4, 0, 4, 2};
  const Ref index{{4}, {4, 0, 4, 2}};
  for (DType index_dtype : {DType::kI64, DType::kI32}) {
    EXPECT_TRUE(matches(index_select(on_device(x), 1, on_device(index, index_dtype)), DType::kF32,
                        pick_ref(x, 1, picks), kExact));
  }
  EXPECT_TRUE(matches(index_select(on_device(x), -1, on_device(Ref{{3}, {1, 1, 0}}, DType::kI64)),
                      DType::kF32, pick_ref(x, 2, {1, 1, 0}), kExact));
}

TEST_F(OpsValue, GatherReadsAlongADim) {
  std::mt19937 rng(112);
  const Ref x = random_ref(rng, {4, 5}, -1, 1);
  const Ref rows = random_ints(rng, {3, 5}, 0, 3);
  EXPECT_TRUE(matches(gather(on_device(x), 0, on_device(rows, DType::kI64)), DType::kF32,
                      gather_ref(x, 0, rows), kExact));
  const Ref cols = random_ints(rng, {4, 2}, 0, 4);  // narrower than x in dim 1
  EXPECT_TRUE(matches(gather(on_device(x), -1, on_device(cols, DType::kI32)), DType::kF32,
                      gather_ref(x, 1, cols), kExact));
}

TEST_F(OpsValue, OneHotSetsTheIndexedClass) {
  std::mt19937 rng(113);
  const Ref index = random_ints(rng, {2, 3}, 0, 4);
  Ref want{{2, 3, 5}, {}};
  for_each_index(want.dims, [&](const Dims& i) {
    want.values.push_back(at(index, {i[0], i[1]}) == static_cast<double>(i[2]) ? 1 : 0);
  });
  EXPECT_TRUE(matches(one_hot(on_device(index, DType::kI64), 5), DType::kI64, want, kExact));
  EXPECT_TRUE(matches(one_hot(on_device(index, DType::kI32), 5), DType::kI64, want, kExact));
}

// ---- Random ops ------------------------------------------------------------------------------

struct Moments {
  double mean, std;
};
Moments moments_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  return {m, std::sqrt(sq / static_cast<double>(v.size()))};
}

// Bounds below are 4-7 standard errors of the statistic over 100k samples; the seeds are fixed,
// so the tests cannot flake, and a biased generator misses them.
constexpr int64_t kSamples = 100000;

TEST_F(OpsValue, RandIsUniformOnZeroOne) {
  set_rng_state(1234);
  const Tensor r = rand({kSamples});
  EXPECT_EQ(r.dtype(), DType::kF32);
  const std::vector<double> v = r.to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), kSamples);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  const Moments m = moments_of(v);
  EXPECT_NEAR(m.mean, 0.5, 0.005);
  EXPECT_NEAR(m.std, 1 / std::sqrt(12.0), 0.003);
}

TEST_F(OpsValue, RandnIsStandardNormal) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    set_rng_state(4321);
    const std::vector<double> v = randn({kSamples}, dtype).to_vector<double>();
    const Moments m = moments_of(v);
    EXPECT_NEAR(m.mean, 0.0, 0.015) << dtype_name(dtype);
    EXPECT_NEAR(m.std, 1.0, 0.01) << dtype_name(dtype);
    const auto within_one =
        std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x) < 1; });
    EXPECT_NEAR(static_cast<double>(within_one) / kSamples, 0.6827, 0.006) << dtype_name(dtype);
  }
}

TEST_F(OpsValue, SameSeedGivesSameValues) {
  set_rng_state(7);
  EXPECT_EQ(get_rng_state(), 7u);
  const std::vector<double> first = randn({1000}).to_vector<double>();
  set_rng_state(7);
  const std::vector<double> again = randn({1000}).to_vector<double>();
  set_rng_state(8);
  const std::vector<double> other = randn({1000}).to_vector<double>();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST_F(OpsValue, ConsecutiveDrawsDiffer) {
  set_rng_state(9);
  const Tensor a = rand({100});
  const Tensor b = rand({100});
  EXPECT_NE(a.to_vector<double>(), b.to_vector<double>());
}

TEST_F(OpsValue, RandintStaysInRangeAndCoversIt) {
  set_rng_state(99);
  for (DType dtype : {DType::kI64, DType::kI32}) {
    const Tensor r = randint(-3, 4, {10000}, dtype);
    EXPECT_EQ(r.dtype(), dtype);
    std::vector<int64_t> hits(7, 0);
    for (double v : r.to_vector<double>()) {
      ASSERT_TRUE(v >= -3 && v < 4 && v == std::trunc(v)) << v;
      ++hits[static_cast<std::size_t>(v + 3)];
    }
    for (int64_t h : hits)
      EXPECT_NEAR(static_cast<double>(h), 10000.0 / 7, 200) << dtype_name(dtype);
  }
}

TEST_F(OpsValue, BernoulliMeanMatchesP) {
  set_rng_state(5);
  const std::vector<double> v = bernoulli({kSamples}, 0.3).to_vector<double>();
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
  EXPECT_NEAR(mean_of(v), 0.3, 0.0075);
}

TEST_F(OpsValue, BernoulliOfATensorFollowsEachElementsP) {
  set_rng_state(6);
  Ref p{{kSamples}, {}};
  for (int64_t i = 0; i < kSamples; ++i)
    p.values.push_back(i % 4 == 0 ? 0.0 : i % 4 == 1 ? 1.0 : i % 4 == 2 ? 0.2 : 0.8);
  const std::vector<double> v = bernoulli(on_device(p)).to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), kSamples);
  std::vector<std::vector<double>> by_p(4);
  for (int64_t i = 0; i < kSamples; ++i) by_p[i % 4].push_back(v[i]);
  EXPECT_EQ(mean_of(by_p[0]), 0.0);
  EXPECT_EQ(mean_of(by_p[1]), 1.0);
  EXPECT_NEAR(mean_of(by_p[2]), 0.2, 0.012);  // 25k samples each: 4-5 standard errors
  EXPECT_NEAR(mean_of(by_p[3]), 0.8, 0.012);
}

// ---- A long mixed graph ----------------------------------------------------------------------

// linear -> relu -> linear -> log_softmax -> gather of the targets -> mean, traced as one graph,
// run by mark_step, every stage compared with the reference.
void check_mlp_forward(DType dtype, Tolerance tol) {
  std::mt19937 rng(121);
  const Ref x = random_ref(rng, {8, 6}, -1, 1, dtype);
  const Ref w1 = random_ref(rng, {10, 6}, -0.5, 0.5, dtype);
  const Ref b1 = random_ref(rng, {10}, -0.5, 0.5, dtype);
  const Ref w2 = random_ref(rng, {4, 10}, -0.5, 0.5, dtype);
  const Ref b2 = random_ref(rng, {4}, -0.5, 0.5, dtype);
  const Ref targets = random_ints(rng, {8, 1}, 0, 3);

  const Tensor hidden =
      relu(linear(on_device(x, dtype), on_device(w1, dtype), on_device(b1, dtype)));
  const Tensor logits = linear(hidden, on_device(w2, dtype), on_device(b2, dtype));
  const Tensor picked = gather(log_softmax(logits, 1), 1, on_device(targets, DType::kI64));
  const Tensor loss = mean(picked);
  mark_step();

  // Compared on |result| alone: with these ranges the products do not cancel enough to need the
  // sum of |terms| that matmul_ref also returns.
  std::vector<double> unused_scale;
  const Ref ref_hidden =
      map(zip(matmul_ref(x, permute_ref(w1, {1, 0}), unused_scale), b1, std::plus<>()),
          [](double v) { return std::max(v, 0.0); });
  const Ref ref_logits =
      zip(matmul_ref(ref_hidden, permute_ref(w2, {1, 0}), unused_scale), b2, std::plus<>());
  const Ref ref_picked = gather_ref(softmax_ref(ref_logits, 1, true), 1, targets);
  EXPECT_TRUE(matches(logits, dtype, ref_logits, tol));
  EXPECT_TRUE(matches(picked, dtype, ref_picked, tol));
  EXPECT_TRUE(matches(loss, dtype, Ref{{}, {mean_of(ref_picked.values)}}, tol));
}

TEST_F(OpsValue, MlpForwardMatchesReferenceInF32) { check_mlp_forward(DType::kF32, kTolF32); }

TEST_F(OpsValue, MlpForwardMatchesReferenceInF64) { check_mlp_forward(DType::kF64, kTolF64); }

}  // namespace
}  // namespace axle
