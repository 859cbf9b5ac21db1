// Tests backends/cpu/elementwise.cpp: every elementwise kernel against plain double-precision
// loops, on random shapes (fixed seed), broadcasting, every dtype, and edge values.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

const std::vector<DType> kNumeric = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                     DType::kInt32, DType::kInt64};

// Compares with tolerance(dtype) relative to max(1, |want|); NaN must match NaN, inf exactly.
void expect_values(const std::vector<double>& got, const std::vector<double>& want, DType dtype,
                   const std::string& what) {
  testing::expect_values(got, want, tolerance(dtype), what + " [" + label(dtype) + "]");
}

Shape random_shape(std::mt19937& rng, int min_rank = 1, int max_rank = 4, int64_t max_dim = 6) {
  std::uniform_int_distribution<int> rank(min_rank, max_rank);
  std::uniform_int_distribution<int64_t> dim(1, max_dim);
  Shape s;
  for (int r = rank(rng); r > 0; --r) s.push_back(dim(rng));
  return s;
}

// A shape that broadcasts to `out`: a random suffix of its dims, each kept or set to 1.
Shape broadcastable_to(const Shape& out, std::mt19937& rng) {
  std::uniform_int_distribution<int> drop(0, out.rank());
  std::bernoulli_distribution one(0.3);
  Shape s;
  for (int d = drop(rng); d < out.rank(); ++d) s.push_back(one(rng) ? 1 : out[d]);
  return s;
}

// Flat index into `in` of output element `flat` under NumPy broadcasting.
int64_t source_index(const Shape& out, const Shape& in, int64_t flat) {
  int64_t index = 0, in_stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const int64_t i = flat % out[d];
    flat /= out[d];
    const int in_d = d - (out.rank() - in.rank());
    if (in_d < 0) break;
    if (in[in_d] != 1) index += i * in_stride;
    in_stride *= in[in_d];
  }
  return index;
}

template <class F>
std::vector<double> reference(const Shape& out, const std::vector<HostTensor>& ins, F f) {
  std::vector<double> want(static_cast<std::size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::vector<double> args;
    for (const HostTensor& in : ins) args.push_back(in.values[source_index(out, in.shape, i)]);
    want[i] = f(args);
  }
  return want;
}

double int_pow(double base, double exp) {
  if (exp < 0) return base == 1 ? 1 : base == -1 ? (std::fmod(-exp, 2) ? -1 : 1) : 0;
  double r = 1;
  for (int i = 0; i < exp; ++i) r *= base;
  return r;
}

double binary_reference(Kernel k, DType dtype, double a, double b) {
  const bool integral = is_integral(dtype);
  switch (k) {
    case Kernel::kAdd:
      return a + b;
    case Kernel::kSub:
      return a - b;
    case Kernel::kMul:
      return a * b;
    case Kernel::kDiv:
      return integral ? std::trunc(a / b) : a / b;
    case Kernel::kPow:
      return integral ? int_pow(a, b) : std::pow(a, b);
    case Kernel::kMaximum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case Kernel::kMinimum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case Kernel::kEq:
      return a == b;
    case Kernel::kNe:
      return a != b;
    case Kernel::kLt:
      return a < b;
    case Kernel::kLe:
      return a <= b;
    case Kernel::kGt:
      return a > b;
    case Kernel::kGe:
      return a >= b;
    default:
      return kNaN;
  }
}

// Operands suited to the op: divisors never zero, pow bases positive for floats.
std::pair<HostTensor, HostTensor> operands(Kernel k, DType dtype, const Shape& a, const Shape& b,
                                           std::mt19937& rng) {
  if (k == Kernel::kPow) {
    return is_integral(dtype)
               ? std::pair{random_tensor(dtype, a, rng, -3, 3), random_tensor(dtype, b, rng, 0, 5)}
               : std::pair{random_tensor(dtype, a, rng, 0.1, 2),
                           random_tensor(dtype, b, rng, -2, 2)};
  }
  HostTensor x = random_tensor(dtype, a, rng, -50, 50);
  HostTensor y = random_tensor(dtype, b, rng, -50, 50);
  if (k == Kernel::kDiv) {
    for (double& v : y.values) v = v == 0 ? 7 : v;
  }
  return {x, y};
}

HostTensor run_binary(Kernel k, const HostTensor& a, const HostTensor& b, DType out_dtype,
                      const Shape& out) {
  return run_kernel(k, {a, b}, out_dtype, out);
}

// The reference result of binary op k on a and b broadcast to `out`.
std::vector<double> binary_want(Kernel k, DType dtype, const Shape& out, const HostTensor& a,
                                const HostTensor& b) {
  return reference(out, {a, b}, [&](const std::vector<double>& v) {
    return round_to(dtype, binary_reference(k, dtype, v[0], v[1]));
  });
}

HostTensor scalar(DType dtype, double v) { return {dtype, Shape{}, {v}}; }
HostTensor vec(DType dtype, std::vector<double> v) {
  return {dtype, Shape{static_cast<int64_t>(v.size())}, std::move(v)};
}

// ---- Binary ops on every dtype ---------------------------------------------------------------

class Arithmetic : public ::testing::TestWithParam<Kernel> {};

TEST_P(Arithmetic, MatchesDoubleReferenceOnEveryNumericDtype) {
  const Kernel k = GetParam();
  std::mt19937 rng(1);
  for (DType dtype : kNumeric) {
    for (int trial = 0; trial < 4; ++trial) {
      const Shape shape = random_shape(rng);
      auto [a, b] = operands(k, dtype, shape, shape, rng);
      const HostTensor got = run_binary(k, a, b, dtype, shape);
      expect_values(got.values, binary_want(k, dtype, shape, a, b), dtype,
                    std::string(kernel_name(k)));
    }
  }
}

TEST_P(Arithmetic, BroadcastsRandomShapesLikeNumPy) {
  const Kernel k = GetParam();
  std::mt19937 rng(2);
  for (DType dtype : {DType::kFloat32, DType::kInt64}) {
    for (int trial = 0; trial < 20; ++trial) {
      const Shape out = random_shape(rng, 1, 5);
      auto [a, b] = operands(k, dtype, broadcastable_to(out, rng), broadcastable_to(out, rng), rng);
      // The output shape must be what the operands broadcast to: restore the dims both dropped.
      Shape joint;
      for (int d = 0; d < out.rank(); ++d) {
        const int da = d - (out.rank() - a.shape.rank()), db = d - (out.rank() - b.shape.rank());
        const int64_t sa = da >= 0 ? a.shape[da] : 1, sb = db >= 0 ? b.shape[db] : 1;
        joint.push_back(std::max(sa, sb));
      }
      const HostTensor got = run_binary(k, a, b, dtype, joint);
      expect_values(got.values, binary_want(k, dtype, joint, a, b), dtype,
                    a.shape.to_string() + " with " + b.shape.to_string());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuElementwise, Arithmetic,
                         ::testing::Values(Kernel::kAdd, Kernel::kSub, Kernel::kMul, Kernel::kDiv,
                                           Kernel::kPow, Kernel::kMaximum, Kernel::kMinimum),
                         [](const auto& info) { return std::string(kernel_name(info.param)); });

class Comparison : public ::testing::TestWithParam<Kernel> {};

TEST_P(Comparison, MatchesDoubleReferenceOnEveryDtypeIncludingTies) {
  const Kernel k = GetParam();
  std::mt19937 rng(3);
  for (DType dtype : kAll) {
    const Shape shape{5, 37};
    HostTensor a = random_tensor(dtype, shape, rng, -3, 3);
    HostTensor b = random_tensor(dtype, shape, rng, -3, 3);
    for (std::size_t i = 0; i < a.values.size(); i += 3) b.values[i] = a.values[i];  // ties
    const HostTensor got = run_binary(k, a, b, DType::kBool, shape);
    expect_values(got.values, binary_want(k, dtype, shape, a, b), DType::kBool,
                  std::string(kernel_name(k)));
  }
}

TEST_P(Comparison, TreatsNaNAsUnorderedAndUnequal) {
  const Kernel k = GetParam();
  const HostTensor a = vec(DType::kFloat32, {kNaN, kNaN, 1});
  const HostTensor b = vec(DType::kFloat32, {kNaN, 1, kNaN});
  const double want = k == Kernel::kNe ? 1 : 0;
  EXPECT_EQ(run_binary(k, a, b, DType::kBool, Shape{3}).values,
            (std::vector<double>{want, want, want}));
}

INSTANTIATE_TEST_SUITE_P(CpuElementwise, Comparison,
                         ::testing::Values(Kernel::kEq, Kernel::kNe, Kernel::kLt, Kernel::kLe,
                                           Kernel::kGt, Kernel::kGe),
                         [](const auto& info) { return std::string(kernel_name(info.param)); });

// ---- Broadcasting ----------------------------------------------------------------------------

TEST(CpuElementwise, BroadcastsRank3AgainstRank2) {
  std::mt19937 rng(4);
  const HostTensor a = random_tensor(DType::kFloat32, Shape{3, 1, 5}, rng);
  const HostTensor b = random_tensor(DType::kFloat32, Shape{4, 5}, rng);
  const Shape out{3, 4, 5};
  const HostTensor got = run_binary(Kernel::kSub, a, b, DType::kFloat32, out);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 5; ++k) want.push_back(a.values[i * 5 + k] - b.values[j * 5 + k]);
    }
  }
  expect_values(got.values, want, DType::kFloat32, "[3,1,5] - [4,5]");
}

TEST(CpuElementwise, BroadcastsScalarOperandOnEitherSide) {
  std::mt19937 rng(5);
  const Shape shape{7, 45};  // rows longer than one unrolled block, with a tail
  const HostTensor t = random_tensor(DType::kFloat32, shape, rng);
  const HostTensor s = scalar(DType::kFloat32, 0.75);
  const HostTensor left = run_binary(Kernel::kSub, s, t, DType::kFloat32, shape);
  const HostTensor right = run_binary(Kernel::kSub, t, s, DType::kFloat32, shape);
  std::vector<double> want_left, want_right;
  for (double v : t.values) {
    want_left.push_back(0.75 - v);
    want_right.push_back(v - 0.75);
  }
  expect_values(left.values, want_left, DType::kFloat32, "scalar - tensor");
  expect_values(right.values, want_right, DType::kFloat32, "tensor - scalar");
}

TEST(CpuElementwise, BroadcastsColumnAgainstRow) {
  const HostTensor col{DType::kInt32, Shape{3, 1}, {1, 2, 3}};
  const HostTensor row{DType::kInt32, Shape{1, 4}, {10, 20, 30, 40}};
  EXPECT_EQ(run_binary(Kernel::kMul, col, row, DType::kInt32, Shape{3, 4}).values,
            (std::vector<double>{10, 20, 30, 40, 20, 40, 60, 80, 30, 60, 90, 120}));
}

TEST(CpuElementwise, ZeroDimOperandsGiveZeroDimOutput) {
  const HostTensor got = run_binary(Kernel::kAdd, scalar(DType::kFloat64, 1.5),
                                    scalar(DType::kFloat64, 2), DType::kFloat64, Shape{});
  EXPECT_EQ(got.values, std::vector<double>{3.5});
}

TEST(CpuElementwise, SizeZeroDimGivesEmptyOutput) {
  const HostTensor a{DType::kFloat32, Shape{0, 3}, {}};
  const HostTensor b = vec(DType::kFloat32, {1, 2, 3});
  EXPECT_TRUE(run_binary(Kernel::kAdd, a, b, DType::kFloat32, Shape{0, 3}).values.empty());
}

TEST(CpuElementwise, IncompatibleShapesThrow) {
  const HostTensor a = vec(DType::kFloat32, {1, 2, 3});
  const HostTensor b = vec(DType::kFloat32, {1, 2, 3, 4});
  EXPECT_THROW(run_binary(Kernel::kAdd, a, b, DType::kFloat32, Shape{4}), std::runtime_error);
}

TEST(CpuElementwise, LongContiguousAddMatchesReference) {
  std::mt19937 rng(6);
  const Shape shape{100'003};  // not a multiple of the unrolled block
  for (DType dtype : kFloats) {
    const HostTensor a = random_tensor(dtype, shape, rng);
    const HostTensor b = random_tensor(dtype, shape, rng);
    expect_values(run_binary(Kernel::kAdd, a, b, dtype, shape).values,
                  reference(shape, {a, b}, [&](auto v) { return round_to(dtype, v[0] + v[1]); }),
                  dtype, "add");
  }
}

// ---- Arithmetic edge cases -------------------------------------------------------------------

TEST(CpuElementwise, IntegerDivisionTruncatesTowardZero) {
  for (DType dtype : {DType::kInt32, DType::kInt64}) {
    const HostTensor a = vec(dtype, {7, -7, 7, -7, 6, 0});
    const HostTensor b = vec(dtype, {2, 2, -2, -2, -4, 5});
    EXPECT_EQ(run_binary(Kernel::kDiv, a, b, dtype, Shape{6}).values,
              (std::vector<double>{3, -3, -3, 3, -1, 0}))
        << label(dtype);
  }
}

TEST(CpuElementwise, IntegerDivisionByZeroThrows) {
  EXPECT_THROW(run_binary(Kernel::kDiv, vec(DType::kInt32, {1}), vec(DType::kInt32, {0}),
                          DType::kInt32, Shape{1}),
               std::runtime_error);
}

TEST(CpuElementwise, FloatDivisionByZeroGivesInfinityAndNaN) {
  const HostTensor got = run_binary(Kernel::kDiv, vec(DType::kFloat32, {1, -1, 0}),
                                    vec(DType::kFloat32, {0, 0, 0}), DType::kFloat32, Shape{3});
  EXPECT_EQ(got.values[0], kInf);
  EXPECT_EQ(got.values[1], -kInf);
  EXPECT_TRUE(std::isnan(got.values[2]));
}

TEST(CpuElementwise, IntegerPowWithNegativeExponentFollowsTorch) {
  const HostTensor base = vec(DType::kInt64, {2, 1, -1, -1, 0, 3});
  const HostTensor exp = vec(DType::kInt64, {-1, -3, -3, -2, 0, 4});
  EXPECT_EQ(run_binary(Kernel::kPow, base, exp, DType::kInt64, Shape{6}).values,
            (std::vector<double>{0, 1, -1, 1, 1, 81}));
}

// torch computes pow(x, 2) as x * x (one rounding); so does the kernel, whether the exponent is a
// scalar 2 (a norm's squares, on vectors) or a 2 among other exponents.
TEST(CpuElementwise, PowOfTwoIsTheProductOfXWithItself) {
  const std::vector<double> x = {3.0000002,    -1.1,      1e-23,     1.8e19,  -0.0,   kInf,
                                 std::nan(""), 1.2345678, -7.654321, 2.5e-38, 6.1e18, 0.3333333};
  for (DType dtype : kFloats) {
    SCOPED_TRACE(dtype_name(dtype));
    const HostTensor base = vec(dtype, x);
    const HostTensor squares =
        run_binary(Kernel::kPow, base, HostTensor{dtype, {}, {2.0}}, dtype, Shape{12});
    const HostTensor mixed = run_binary(
        Kernel::kPow, base, vec(dtype, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 0.5}), dtype, Shape{12});
    const HostTensor products = run_binary(Kernel::kMul, base, base, dtype, Shape{12});
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(squares.values[i]) && std::isnan(mixed.values[i]));
        continue;
      }
      EXPECT_EQ(squares.values[i], products.values[i]) << "pow(" << x[i] << ", 2)";
      if (i < 10) {
        EXPECT_EQ(mixed.values[i], products.values[i]) << "pow(" << x[i] << ", 2)";
      }
    }
    // The other exponents keep pow: a cube and a square root.
    EXPECT_NEAR(mixed.values[10], std::pow(base.values[10], 3.0), 1e-2 * mixed.values[10]);
    EXPECT_NEAR(mixed.values[11], std::sqrt(base.values[11]), 1e-2);
  }
}

TEST(CpuElementwise, MaximumAndMinimumPropagateNaN) {
  for (DType dtype : kFloats) {
    const HostTensor a = vec(dtype, {kNaN, 1, 2});
    const HostTensor b = vec(dtype, {1, kNaN, 3});
    for (Kernel k : {Kernel::kMaximum, Kernel::kMinimum}) {
      const HostTensor got = run_binary(k, a, b, dtype, Shape{3});
      EXPECT_TRUE(std::isnan(got.values[0])) << kernel_name(k) << " " << label(dtype);
      EXPECT_TRUE(std::isnan(got.values[1])) << kernel_name(k) << " " << label(dtype);
      EXPECT_EQ(got.values[2], k == Kernel::kMaximum ? 3 : 2);
    }
  }
}

TEST(CpuElementwise, BoolAddAndMaximumAreOrMulAndMinimumAreAnd) {
  const HostTensor a = vec(DType::kBool, {0, 0, 1, 1});
  const HostTensor b = vec(DType::kBool, {0, 1, 0, 1});
  const std::vector<double> any{0, 1, 1, 1}, all{0, 0, 0, 1};
  EXPECT_EQ(run_binary(Kernel::kAdd, a, b, DType::kBool, Shape{4}).values, any);
  EXPECT_EQ(run_binary(Kernel::kMaximum, a, b, DType::kBool, Shape{4}).values, any);
  EXPECT_EQ(run_binary(Kernel::kMul, a, b, DType::kBool, Shape{4}).values, all);
  EXPECT_EQ(run_binary(Kernel::kMinimum, a, b, DType::kBool, Shape{4}).values, all);
}

TEST(CpuElementwise, UnsupportedDtypeThrowsNamingKernelAndDtype) {
  const HostTensor a = vec(DType::kBool, {0, 1});
  try {
    run_binary(Kernel::kSub, a, a, DType::kBool, Shape{2});
    FAIL() << "sub on pred should throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sub is not defined for pred"), std::string::npos)
        << e.what();
  }
}

TEST(CpuElementwise, MismatchedOperandDtypesThrow) {
  EXPECT_THROW(run_binary(Kernel::kAdd, vec(DType::kFloat32, {1}), vec(DType::kFloat64, {1}),
                          DType::kFloat32, Shape{1}),
               std::runtime_error);
}

TEST(CpuElementwise, Bf16ResultsRoundToNearestEvenLikeEigen) {
  std::mt19937 rng(7);
  const Shape shape{4096};
  const HostTensor a = random_tensor(DType::kBFloat16, shape, rng, -100, 100);
  const HostTensor b = random_tensor(DType::kBFloat16, shape, rng, -1, 1);
  const HostTensor got = run_binary(Kernel::kMul, a, b, DType::kBFloat16, shape);
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    const float product = static_cast<float>(a.values[i]) * static_cast<float>(b.values[i]);
    ASSERT_EQ(got.values[i], static_cast<float>(Eigen::bfloat16(product))) << "element " << i;
  }
}

// Long contiguous bf16 operands go through the chunked path (widened on vectors, computed in f32,
// narrowed): each element as one rounding of the f32 result, over lengths that end mid-chunk and
// split over the device's threads.
TEST(CpuElementwise, Bf16ArithmeticOverLongOperandsRoundsEachF32Result) {
  std::mt19937 rng(8);
  for (const int64_t n : {int64_t{255}, int64_t{257}, int64_t{70001}}) {
    const Shape shape{n};
    HostTensor a = random_tensor(DType::kBFloat16, shape, rng, -1e3, 1e3);
    const HostTensor b = random_tensor(DType::kBFloat16, shape, rng, -2, 2);
    a.values[0] = kNaN;
    a.values[1] = kInf;
    for (const Kernel kernel : {Kernel::kAdd, Kernel::kSub, Kernel::kMul, Kernel::kDiv}) {
      const HostTensor got = run_binary(kernel, a, b, DType::kBFloat16, shape);
      for (int64_t i = 0; i < n; ++i) {
        const auto x = static_cast<float>(a.values[i]), y = static_cast<float>(b.values[i]);
        const float exact = kernel == Kernel::kAdd   ? x + y
                            : kernel == Kernel::kSub ? x - y
                            : kernel == Kernel::kMul ? x * y
                                                     : x / y;
        const auto want = static_cast<double>(static_cast<float>(Eigen::bfloat16(exact)));
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got.values[i])) << kernel_name(kernel) << " element " << i;
        } else {
          ASSERT_EQ(got.values[i], want) << kernel_name(kernel) << " element " << i << " of " << n;
        }
      }
    }
  }
}

// ---- Logical ops and where -------------------------------------------------------------------

TEST(CpuElementwise, LogicalAndOrFollowTruthTables) {
  const HostTensor a = vec(DType::kBool, {0, 0, 1, 1});
  const HostTensor b = vec(DType::kBool, {0, 1, 0, 1});
  EXPECT_EQ(run_binary(Kernel::kLogicalAnd, a, b, DType::kBool, Shape{4}).values,
            (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(run_binary(Kernel::kLogicalOr, a, b, DType::kBool, Shape{4}).values,
            (std::vector<double>{0, 1, 1, 1}));
}

TEST(CpuElementwise, LogicalOpsTreatNonzeroOfAnyDtypeAsTrue) {
  const HostTensor a = vec(DType::kFloat32, {0, 2.5, -1, kNaN, 0});
  const HostTensor b = vec(DType::kInt64, {5, 0, -3, 1, 0});
  EXPECT_EQ(run_binary(Kernel::kLogicalAnd, a, b, DType::kBool, Shape{5}).values,
            (std::vector<double>{0, 0, 1, 1, 0}));
  EXPECT_EQ(run_binary(Kernel::kLogicalOr, a, b, DType::kBool, Shape{5}).values,
            (std::vector<double>{1, 1, 1, 1, 0}));
}

TEST(CpuElementwise, WhereSelectsPerElementWithBroadcasting) {
  std::mt19937 rng(8);
  for (DType dtype : kAll) {
    const HostTensor cond = random_tensor(DType::kBool, Shape{3, 1}, rng);
    const HostTensor a = random_tensor(dtype, Shape{3, 20}, rng);
    const HostTensor b = scalar(dtype, 1);
    const Shape out{3, 20};
    expect_values(run_kernel(Kernel::kWhere, {cond, a, b}, dtype, out).values,
                  reference(out, {cond, a, b}, [](auto v) { return v[0] ? v[1] : v[2]; }), dtype,
                  "where");
  }
}

TEST(CpuElementwise, WhereOnSameShapeOperandsMatchesReference) {
  std::mt19937 rng(9);
  const Shape shape{1000};
  const HostTensor cond = random_tensor(DType::kBool, shape, rng);
  const HostTensor a = random_tensor(DType::kFloat64, shape, rng);
  const HostTensor b = random_tensor(DType::kFloat64, shape, rng);
  EXPECT_EQ(run_kernel(Kernel::kWhere, {cond, a, b}, DType::kFloat64, shape).values,
            reference(shape, {cond, a, b}, [](auto v) { return v[0] ? v[1] : v[2]; }));
}

// ---- Unary ops -------------------------------------------------------------------------------

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double unary_reference(Kernel k, double x) {
  switch (k) {
    case Kernel::kNeg:
      return -x;
    case Kernel::kExp:
      return std::exp(x);
    case Kernel::kLog:
      return std::log(x);
    case Kernel::kSqrt:
      return std::sqrt(x);
    case Kernel::kRsqrt:
      return 1 / std::sqrt(x);
    case Kernel::kTanh:
      return std::tanh(x);
    case Kernel::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case Kernel::kRelu:
      return x < 0 ? 0 : x;
    case Kernel::kAbs:
      return std::abs(x);
    case Kernel::kGelu:
      return gelu_erf(x);
    case Kernel::kSin:
      return std::sin(x);
    case Kernel::kCos:
      return std::cos(x);
    case Kernel::kErf:
      return std::erf(x);
    case Kernel::kLog1p:
      return std::log1p(x);
    case Kernel::kSoftplus:
      return x > 20 ? x : std::log1p(std::exp(x));
    default:
      return kNaN;  // a float function without its reference here fails the test below
  }
}

class FloatUnary : public ::testing::TestWithParam<Kernel> {};

TEST_P(FloatUnary, MatchesDoubleReferenceOnFloatDtypes) {
  const Kernel k = GetParam();
  const bool positive = k == Kernel::kLog || k == Kernel::kSqrt || k == Kernel::kRsqrt;
  const double low = positive                 ? 0.01
                     : k == Kernel::kLog1p    ? -0.99
                     : k == Kernel::kSoftplus ? -25
                                              : -6;
  const double high = k == Kernel::kSoftplus ? 25 : 6;
  std::mt19937 rng(10);
  for (DType dtype : kFloats) {
    const Shape shape = random_shape(rng, 1, 3, 40);
    const HostTensor x = random_tensor(dtype, shape, rng, low, high);
    expect_values(run_kernel(k, {x}, dtype, shape).values,
                  reference(shape, {x}, [&](auto v) { return unary_reference(k, v[0]); }), dtype,
                  std::string(kernel_name(k)));
  }
}

// neg, relu, abs, gelu and every float function of backends/float_functions.h.
std::vector<Kernel> unary_kernels() {
  return {Kernel::kNeg, Kernel::kRelu, Kernel::kAbs, Kernel::kGelu,
#define AXLE_TEST_FLOAT_FUNCTION(name, str) Kernel::k##name,
          AXLE_FLOAT_FUNCTIONS(AXLE_TEST_FLOAT_FUNCTION)
#undef AXLE_TEST_FLOAT_FUNCTION
  };
}

INSTANTIATE_TEST_SUITE_P(CpuElementwise, FloatUnary, ::testing::ValuesIn(unary_kernels()),
                         [](const auto& info) { return std::string(kernel_name(info.param)); });

TEST(CpuElementwise, GeluTanhApproximationFollowsTorchFormula) {
  std::mt19937 rng(11);
  const Shape shape{200};
  const HostTensor x = random_tensor(DType::kFloat64, shape, rng, -4, 4);
  // f64's tolerance (1e-12) tells the two forms apart: they differ by up to ~1e-3.
  expect_values(run_kernel(Kernel::kGelu, {x}, DType::kFloat64, shape, {1}).values,
                reference(shape, {x}, [](auto v) { return gelu_tanh(v[0]); }), DType::kFloat64,
                "gelu tanh");
  expect_values(run_kernel(Kernel::kGelu, {x}, DType::kFloat64, shape, {0}).values,
                reference(shape, {x}, [](auto v) { return gelu_erf(v[0]); }), DType::kFloat64,
                "gelu erf");
}

TEST(CpuElementwise, NegAbsReluWorkOnIntegers) {
  for (DType dtype : {DType::kInt32, DType::kInt64}) {
    const HostTensor x = vec(dtype, {-3, 0, 5, -1});
    EXPECT_EQ(run_kernel(Kernel::kNeg, {x}, dtype, Shape{4}).values,
              (std::vector<double>{3, 0, -5, 1}));
    EXPECT_EQ(run_kernel(Kernel::kAbs, {x}, dtype, Shape{4}).values,
              (std::vector<double>{3, 0, 5, 1}));
    EXPECT_EQ(run_kernel(Kernel::kRelu, {x}, dtype, Shape{4}).values,
              (std::vector<double>{0, 0, 5, 0}));
  }
}

TEST(CpuElementwise, LogOfZeroIsNegativeInfinityAndOfNegativeIsNaN) {
  for (DType dtype : kFloats) {
    const HostTensor got = run_kernel(Kernel::kLog, {vec(dtype, {0, -1})}, dtype, Shape{2});
    EXPECT_EQ(got.values[0], -kInf) << label(dtype);
    EXPECT_TRUE(std::isnan(got.values[1])) << label(dtype);
  }
}

TEST(CpuElementwise, SqrtOfNegativeIsNaN) {
  for (DType dtype : kFloats) {
    EXPECT_TRUE(
        std::isnan(run_kernel(Kernel::kSqrt, {vec(dtype, {-1})}, dtype, Shape{1}).values[0]))
        << label(dtype);
  }
}

TEST(CpuElementwise, RsqrtOfZeroIsInfinity) {
  EXPECT_EQ(
      run_kernel(Kernel::kRsqrt, {vec(DType::kFloat32, {0})}, DType::kFloat32, Shape{1}).values[0],
      kInf);
}

TEST(CpuElementwise, SigmoidAndTanhSaturateWithoutNaN) {
  const HostTensor x = vec(DType::kFloat32, {-200, 200});
  EXPECT_EQ(run_kernel(Kernel::kSigmoid, {x}, DType::kFloat32, Shape{2}).values,
            (std::vector<double>{0, 1}));
  EXPECT_EQ(run_kernel(Kernel::kTanh, {x}, DType::kFloat32, Shape{2}).values,
            (std::vector<double>{-1, 1}));
}

TEST(CpuElementwise, SoftplusIsXPastTheThresholdAndSaturatesWithoutNaN) {
  for (DType dtype : kFloats) {
    const HostTensor x = vec(dtype, {-200, 20.5, 200, kInf, -kInf});
    const std::vector<double> got = run_kernel(Kernel::kSoftplus, {x}, dtype, Shape{5}).values;
    EXPECT_EQ(got, (std::vector<double>{got[0], x.values[1], 200, kInf, 0})) << label(dtype);
    EXPECT_GE(got[0], 0) << label(dtype);
    EXPECT_LT(got[0], 1e-80) << label(dtype);
    EXPECT_TRUE(
        std::isnan(run_kernel(Kernel::kSoftplus, {vec(dtype, {kNaN})}, dtype, Shape{1}).values[0]));
  }
}

TEST(CpuElementwise, ReluKeepsNaN) {
  EXPECT_TRUE(std::isnan(
      run_kernel(Kernel::kRelu, {vec(DType::kFloat32, {kNaN})}, DType::kFloat32, Shape{1})
          .values[0]));
}

TEST(CpuElementwise, TranscendentalOnIntegerDtypeThrows) {
  EXPECT_THROW(run_kernel(Kernel::kExp, {vec(DType::kInt32, {1})}, DType::kInt32, Shape{1}),
               std::runtime_error);
}

TEST(CpuElementwise, UnaryBroadcastsInputToOutputShape) {
  const HostTensor x{DType::kFloat32, Shape{1, 2}, {0, 1}};
  expect_values(run_kernel(Kernel::kExp, {x}, DType::kFloat32, Shape{2, 2}).values,
                {1, std::exp(1.0), 1, std::exp(1.0)}, DType::kFloat32, "exp [1,2] -> [2,2]");
}

TEST(CpuElementwise, LogicalNotOfAnyDtypeIsEqualToZero) {
  for (DType dtype : kAll) {
    const HostTensor x = vec(dtype, {0, 1, 0, 1});
    EXPECT_EQ(run_kernel(Kernel::kLogicalNot, {x}, DType::kBool, Shape{4}).values,
              (std::vector<double>{1, 0, 1, 0}))
        << label(dtype);
  }
  EXPECT_EQ(
      run_kernel(Kernel::kLogicalNot, {vec(DType::kFloat32, {kNaN, -2})}, DType::kBool, Shape{2})
          .values,
      (std::vector<double>{0, 0}));
}

// ---- Cast, fill, iota ------------------------------------------------------------------------

TEST(CpuElementwise, CastMatchesReferenceBetweenEveryDtypePair) {
  std::mt19937 rng(12);
  for (DType from : kAll) {
    const HostTensor x = random_tensor(from, Shape{3, 21}, rng, -100, 100);
    for (DType to : kAll) {
      expect_values(run_kernel(Kernel::kCast, {x}, to, x.shape).values,
                    reference(x.shape, {x}, [&](auto v) { return round_to(to, v[0]); }), to,
                    "cast from " + label(from));
    }
  }
}

// f32 <-> bf16 casts of long arrays run on vectors: each element rounded to nearest even (ties
// included), NaN kept NaN, infinities and signed zeros kept; bf16 -> f32 exact.
TEST(CpuElementwise, CastBetweenF32AndBf16OverLongArraysRoundsEachElementToNearestEven) {
  std::mt19937 rng(13);
  const int64_t n = 100003;
  HostTensor x = random_tensor(DType::kFloat32, Shape{n}, rng, -1e4, 1e4);
  const std::vector<double> special = {kNaN, kInf, -kInf, -0.0, 1 + 0x1p-8, 1 + 3 * 0x1p-8,
                                       0x1p-130, std::numeric_limits<float>::max()};
  for (std::size_t i = 0; i < special.size(); ++i) x.values[i * 997] = special[i];
  const HostTensor narrowed = run_kernel(Kernel::kCast, {x}, DType::kBFloat16, x.shape);
  const HostTensor widened = run_kernel(Kernel::kCast, {narrowed}, DType::kFloat32, x.shape);
  for (int64_t i = 0; i < n; ++i) {
    const auto want =
        static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(x.values[i]))));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(narrowed.values[i]) && std::isnan(widened.values[i])) << i;
      continue;
    }
    ASSERT_EQ(narrowed.values[i], want) << "element " << i << " = " << x.values[i];
    ASSERT_EQ(std::signbit(narrowed.values[i]), std::signbit(want)) << "element " << i;
    ASSERT_EQ(widened.values[i], narrowed.values[i]) << "element " << i;
  }
}

TEST(CpuElementwise, CastFloatToIntTruncatesTowardZero) {
  const HostTensor x = vec(DType::kFloat64, {-2.7, 2.7, -0.5, 0.5, 3});
  for (DType to : {DType::kInt32, DType::kInt64}) {
    EXPECT_EQ(run_kernel(Kernel::kCast, {x}, to, Shape{5}).values,
              (std::vector<double>{-2, 2, 0, 0, 3}));
  }
}

TEST(CpuElementwise, CastToBoolIsNonzero) {
  const HostTensor x = vec(DType::kFloat32, {0, -0.0, 0.25, -3, kNaN});
  EXPECT_EQ(run_kernel(Kernel::kCast, {x}, DType::kBool, Shape{5}).values,
            (std::vector<double>{0, 0, 1, 1, 1}));
}

TEST(CpuElementwise, FillWritesValueIntoEveryElementOfEveryDtype) {
  for (DType dtype : kAll) {
    const HostTensor got = run_kernel(Kernel::kFill, {}, dtype, Shape{3, 7}, {}, {2.5});
    EXPECT_EQ(got.values, std::vector<double>(21, round_to(dtype, 2.5))) << label(dtype);
  }
}

// A fill past kParallelElements is split over the pool's threads: every part writes its
// elements (the output starts as 0xFF bytes), storage-only dtypes included.
TEST(CpuElementwise, ALargeFillOnThreeThreadsWritesEveryElement) {
  const Shape shape{301, 257};
  for (DType dtype : kAll) {
    const HostTensor got =
        call_kernel_directly(Kernel::kFill, {}, dtype, shape, {}, /*threads=*/3, {-1.5});
    EXPECT_EQ(got.values,
              std::vector<double>(static_cast<std::size_t>(shape.numel()), round_to(dtype, -1.5)))
        << label(dtype);
  }
}

TEST(CpuElementwise, IotaCountsFromStartByStep) {
  for (DType dtype : kNumeric) {
    const HostTensor got = run_kernel(Kernel::kIota, {}, dtype, Shape{6}, {}, {-2, 3});
    std::vector<double> want;
    for (int i = 0; i < 6; ++i) want.push_back(-2 + 3 * i);
    EXPECT_EQ(got.values, want) << label(dtype);
  }
  EXPECT_EQ(run_kernel(Kernel::kIota, {}, DType::kFloat64, Shape{3}, {}, {0.5, 0.25}).values,
            (std::vector<double>{0.5, 0.75, 1.0}));
}

}  // namespace
}  // namespace axle::testing
