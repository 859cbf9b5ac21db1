// Tests graph/ops/elementwise.cpp by value: binary ops (broadcasting, 0-d and size-0 operands),
// scalar operands, integer arithmetic and dtype promotion, comparisons, logical ops and where,
// unary math, and casts (bf16 included), executed on each runtime (tests/graph/test_runtime.h) and
// compared with plain double-precision loops. Inputs come from std::mt19937 with fixed seeds, so
// every failure reproduces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

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
                                   DType dtype = DType::kFloat32, Tolerance tol = kTolF32) {
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
  EXPECT_TRUE(check(rng, {3, 1, 5}, {4, 5}, DType::kFloat64, kTolF64));
  EXPECT_TRUE(check(rng, random_dims(rng, 3), {}, DType::kFloat64, kTolF64));
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryOpValue, ::testing::ValuesIn(binary_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- Scalar operands, integers and promotion -------------------------------------------------

TEST_F(OpsValue, ScalarOnTheRightOfEachOperator) {
  std::mt19937 rng(21);
  const Ref x = random_ref(rng, {3, 4}, 0.5, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(t * 0.5, DType::kFloat32, map(x, [](double v) { return v * 0.5; }), kTolF32));
  EXPECT_TRUE(
      matches(t + 3.25, DType::kFloat32, map(x, [](double v) { return v + 3.25; }), kTolF32));
  EXPECT_TRUE(matches(t - 1.5, DType::kFloat32, map(x, [](double v) { return v - 1.5; }), kTolF32));
  EXPECT_TRUE(matches(t / 3.0, DType::kFloat32, map(x, [](double v) { return v / 3.0; }), kTolF32));
  EXPECT_TRUE(
      matches(div(t, -0.1), DType::kFloat32, map(x, [](double v) { return v / -0.1; }), kTolF32));
}

TEST_F(OpsValue, ScalarOnTheLeftOfEachOperator) {
  std::mt19937 rng(22);
  const Ref x = random_ref(rng, {2, 5}, 0.5, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(2.0 - t, DType::kFloat32, map(x, [](double v) { return 2.0 - v; }), kTolF32));
  EXPECT_TRUE(matches(3.0 / t, DType::kFloat32, map(x, [](double v) { return 3.0 / v; }), kTolF32));
  EXPECT_TRUE(matches(2.5 * t, DType::kFloat32, map(x, [](double v) { return 2.5 * v; }), kTolF32));
  EXPECT_TRUE(matches(1.5 + t, DType::kFloat32, map(x, [](double v) { return 1.5 + v; }), kTolF32));
}

TEST_F(OpsValue, ScalarsZeroAndOneGiveTheirArithmetic) {
  std::mt19937 rng(23);
  const Ref x = random_ref(rng, {7}, -2, 2);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(t * 0.0, DType::kFloat32, constant_ref({7}, 0), kExact));
  EXPECT_TRUE(matches(t + 0.0, DType::kFloat32, x, kExact));
  EXPECT_TRUE(matches(t * 1.0, DType::kFloat32, x, kExact));
  EXPECT_TRUE(matches(1.0 - t, DType::kFloat32, map(x, [](double v) { return 1.0 - v; }), kTolF32));
  EXPECT_TRUE(matches(0.0 - t, DType::kFloat32, map(x, [](double v) { return -v; }), kExact));
}

TEST_F(OpsValue, UnaryMinusOperatorNegates) {
  std::mt19937 rng(24);
  const Ref x = random_ref(rng, {3, 3}, -2, 2);
  EXPECT_TRUE(matches(-on_device(x), DType::kFloat32, map(x, [](double v) { return -v; }), kExact));
}

TEST_F(OpsValue, PowWithAScalarExponent) {
  std::mt19937 rng(25);
  const Ref x = random_ref(rng, {4, 3}, 0.25, 4);
  const Tensor t = on_device(x);
  for (double e : {2.5, 0.5, 2.0, -1.0, 3.0}) {
    EXPECT_TRUE(matches(pow(t, e), DType::kFloat32,
                        map(x, [e](double v) { return std::pow(v, e); }), kTolF32))
        << "exponent " << e;
  }
}

TEST_F(OpsValue, ScalarOperandKeepsTheTensorDtype) {
  std::mt19937 rng(26);
  const Ref x = random_ref(rng, {5}, -2, 2, DType::kFloat64);
  EXPECT_TRUE(matches(on_device(x, DType::kFloat64) * 0.1, DType::kFloat64,
                      map(x, [](double v) { return v * 0.1; }), kTolF64));
  EXPECT_TRUE(matches(on_device(x, DType::kFloat64) * 3, DType::kFloat64,
                      map(x, [](double v) { return v * 3; }), kTolF64));
  const Ref n = random_ints(rng, {6}, -20, 20);
  EXPECT_TRUE(matches(on_device(n, DType::kInt32) * 3, DType::kInt32,
                      map(n, [](double v) { return v * 3; }), kExact));
  EXPECT_TRUE(matches(3 * on_device(n, DType::kInt64), DType::kInt64,
                      map(n, [](double v) { return v * 3; }), kExact));
  EXPECT_TRUE(matches(on_device(n, DType::kInt32) + int64_t{7}, DType::kInt32,
                      map(n, [](double v) { return v + 7; }), kExact));
  EXPECT_TRUE(matches(10 - on_device(n, DType::kInt32), DType::kInt32,
                      map(n, [](double v) { return 10 - v; }), kExact));
  EXPECT_TRUE(matches(pow(on_device(n, DType::kInt64), 2), DType::kInt64,
                      map(n, [](double v) { return v * v; }), kExact));
}

// A scalar is typed as a Python number, as torch's: a floating-point one (a C++ double, even of
// integral value) makes an integer or pred tensor's result f32, the default dtype.
TEST_F(OpsValue, AFloatingScalarMakesAnIntegerTensorFloat) {
  std::mt19937 rng(29);
  const Ref n = random_ints(rng, {6}, -20, 20);
  EXPECT_TRUE(matches(on_device(n, DType::kInt32) * 0.5, DType::kFloat32,
                      map(n, [](double v) { return v * 0.5; }), kTolF32));
  EXPECT_TRUE(matches(mul(on_device(n, DType::kInt32), 2.0), DType::kFloat32,
                      map(n, [](double v) { return v * 2; }), kExact));
  EXPECT_TRUE(matches(on_device(n, DType::kInt64) + 1.0, DType::kFloat32,
                      map(n, [](double v) { return v + 1; }), kExact));
  EXPECT_TRUE(matches(pow(on_device(n, DType::kInt64), 2.0), DType::kFloat32,
                      map(n, [](double v) { return v * v; }), kExact));
  // Integer true division is f32 whatever the scalar.
  EXPECT_TRUE(matches(on_device(n, DType::kInt32) / 4, DType::kFloat32,
                      map(n, [](double v) { return v / 4; }), kTolF32));
  // Comparisons give preds either way.
  EXPECT_EQ(eq(on_device(n, DType::kInt32), 3.0).dtype(), DType::kBool);
}

TEST_F(OpsValue, IntegerArithmeticIsExact) {
  std::mt19937 rng(27);
  for (DType dtype : {DType::kInt32, DType::kInt64}) {
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
  EXPECT_TRUE(matches(on_device(a, DType::kInt64) / on_device(b, DType::kInt64), DType::kFloat32,
                      zip(a, b, std::divides<>()), kTolF32));
}

TEST_F(OpsValue, MixedDtypesPromoteAsPyTorch) {
  std::mt19937 rng(29);
  const Ref i = random_ints(rng, {2, 3}, -9, 9);
  const Ref f = random_ref(rng, {3}, -2, 2);
  EXPECT_TRUE(matches(on_device(i, DType::kInt32) + on_device(f), DType::kFloat32,
                      zip(i, f, std::plus<>()), kTolF32));
  // An f32 value widens exactly, so f32 + f64 is exact in f64.
  const Ref g = random_ref(rng, {2, 3}, -2, 2, DType::kFloat64);
  EXPECT_TRUE(matches(on_device(f) + on_device(g, DType::kFloat64), DType::kFloat64,
                      zip(f, g, std::plus<>()), kTolF64));
  EXPECT_TRUE(matches(on_device(i, DType::kInt32) * on_device(i, DType::kInt64), DType::kInt64,
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
  EXPECT_TRUE(matches(GetParam().op(on_device(a, DType::kInt32), on_device(b)), DType::kBool,
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
  EXPECT_TRUE(matches(ne(t, 1.0), DType::kBool,
                      map(x, [](double v) { return v != 1.0 ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(le(t, 0.5), DType::kBool,
                      map(x, [](double v) { return v <= 0.5 ? 1.0 : 0.0; }), kExact));
  EXPECT_TRUE(matches(ge(t, -1.0), DType::kBool,
                      map(x, [](double v) { return v >= -1.0 ? 1.0 : 0.0; }), kExact));
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
  const Tensor ta = on_device(a), tb = on_device(b, DType::kInt32);
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
  EXPECT_TRUE(matches(where(on_device(c, DType::kBool), on_device(a), on_device(b)),
                      DType::kFloat32, want, kExact));
}

TEST_F(OpsValue, WherePromotesItsValuesAndTakesAPredCondition) {
  std::mt19937 rng(36);
  const Ref c{{3}, {0, 1, 1}};
  const Ref a = random_ints(rng, {2, 3}, -9, 9);
  const Ref b = random_ref(rng, {3}, -2, 2, DType::kFloat64);
  Ref want{{2, 3}, {}};
  for_each_index(want.dims, [&](const Dims& i) {
    want.values.push_back(c.values[i[1]] != 0 ? at(a, i) : b.values[i[1]]);
  });
  EXPECT_TRUE(matches(
      where(on_device(c, DType::kBool), on_device(a, DType::kInt32), on_device(b, DType::kFloat64)),
      DType::kFloat64, want, kExact));
  // As torch: a condition of numbers is refused, not read as non-zero.
  try {
    (void)where(on_device(Ref{{3}, {0, 2.5, -1}}), on_device(a, DType::kInt32), on_device(b));
    ADD_FAILURE() << "where took an f32 condition";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("condition must be a pred"), std::string::npos)
        << e.what();
  }
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
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -10,
       10},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -10,
       10},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }, -5, 5},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); },
       -0.99, 50},
      {"softplus", [](const Tensor& x) { return softplus(x); },
       [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }, -30, 30},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](double v) { return v / (1 + std::exp(-v)); }, -10, 10},
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
    EXPECT_TRUE(check(rng, random_dims(rng, rank, 6), DType::kFloat32, kTolF32));
  EXPECT_TRUE(check(rng, {2, 0, 3}, DType::kFloat32, kTolF32));
}

TEST_P(UnaryOpValue, MatchesReferenceInF64) {
  std::mt19937 rng(42);
  EXPECT_TRUE(check(rng, {5, 7}, DType::kFloat64, kTolF64));
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryOpValue, ::testing::ValuesIn(unary_cases()),
                         [](const auto& info) { return info.param.name; });

// Long enough for the kernels' vectorised blocks and their scalar tails; bf16 computes in f32.
TEST_F(OpsValue, SinAndCosOnLongTensorsAndInBf16) {
  std::mt19937 rng(43);
  const Ref x = random_ref(rng, {1037}, -30, 30);
  const Ref xb = random_ref(rng, {3, 70}, -4, 4, DType::kBFloat16);
  auto sine = [](double v) { return std::sin(v); };
  auto cosine = [](double v) { return std::cos(v); };
  EXPECT_TRUE(matches(sin(on_device(x)), DType::kFloat32, map(x, sine), kTolF32));
  EXPECT_TRUE(matches(cos(on_device(x)), DType::kFloat32, map(x, cosine), kTolF32));
  EXPECT_TRUE(
      matches(sin(on_device(xb, DType::kBFloat16)), DType::kBFloat16, map(xb, sine), kTolBf16));
  EXPECT_TRUE(
      matches(cos(on_device(xb, DType::kBFloat16)), DType::kBFloat16, map(xb, cosine), kTolBf16));
  // A chain of elementwise ops around them (fused on the devices).
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(sin(t) * cos(t) + 1.0, DType::kFloat32,
                      map(x, [](double v) { return std::sin(v) * std::cos(v) + 1; }), kTolF32));
}

// erf's f32 kernel is Eigen's vectorised approximation: blocks and scalar tails, saturation at
// +-1 far out, bf16 computed in f32, and erf inside a fused chain.
TEST_F(OpsValue, ErfOnLongTensorsAndInBf16) {
  std::mt19937 rng(44);
  const Ref x = random_ref(rng, {1037}, -6, 6);
  const Ref xb = random_ref(rng, {3, 70}, -4, 4, DType::kBFloat16);
  auto error_function = [](double v) { return std::erf(v); };
  EXPECT_TRUE(matches(erf(on_device(x)), DType::kFloat32, map(x, error_function), kTolF32));
  EXPECT_TRUE(matches(erf(on_device(xb, DType::kBFloat16)), DType::kBFloat16,
                      map(xb, error_function), kTolBf16));
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(erf(t * 0.5) * t + 1.0, DType::kFloat32,
                      map(x, [](double v) { return std::erf(v * 0.5) * v + 1; }), kTolF32));
}

// log1p keeps the digits log(1 + x) loses for small x.
TEST_F(OpsValue, Log1pOfTinyValuesIsExactWhereLogOfOnePlusIsNot) {
  const Ref x{{4}, {1e-10, -1e-12, 3e-8, 0}};
  auto exact = [](double v) { return std::log1p(v); };
  EXPECT_TRUE(
      matches(log1p(on_device(x, DType::kFloat64)), DType::kFloat64, map(x, exact), kTolF64));
  EXPECT_TRUE(matches(log1p(on_device(x)), DType::kFloat32, map(x, exact), kTolF32));
  // In f32 1 + 1e-10 is 1, whose log is 0; log1p keeps 1e-10 to its last bits.
  const std::vector<double> got = cast(log1p(on_device(x)), DType::kFloat64).to_vector<double>();
  EXPECT_NEAR(got[0], 1e-10, 1e-16);
  EXPECT_EQ(cast(log(on_device(x) + 1.0), DType::kFloat64).to_vector<double>()[0], 0.0);
}

// As torch.nn.functional.softplus: x itself where beta x > threshold (exactly, in f64 too), and
// log1p(exp(beta x)) / beta elsewhere, through the kernel (defaults) or composed (other
// parameters), on long tensors, in bf16 and inside a fused chain.
TEST_F(OpsValue, SoftplusFollowsTorchsBetaAndThreshold) {
  const Ref x{{8}, {-30, -1, 0, 1, 19.5, 20, 20.5, 100}};
  auto torch_softplus = [](double beta, double threshold) {
    return
        [=](double v) { return v * beta > threshold ? v : std::log1p(std::exp(v * beta)) / beta; };
  };
  EXPECT_TRUE(matches(softplus(on_device(x, DType::kFloat64)), DType::kFloat64,
                      map(x, torch_softplus(1, 20)), kExact));
  EXPECT_TRUE(
      matches(softplus(on_device(x)), DType::kFloat32, map(x, torch_softplus(1, 20)), kTolF32));
  EXPECT_TRUE(matches(softplus(on_device(x, DType::kFloat64), 2, 5), DType::kFloat64,
                      map(x, torch_softplus(2, 5)), kTolF64));
  EXPECT_TRUE(matches(softplus(on_device(x, DType::kFloat64), 0.5, 30), DType::kFloat64,
                      map(x, torch_softplus(0.5, 30)), kTolF64));
  std::mt19937 rng(45);
  const Ref long_x = random_ref(rng, {1037}, -25, 25);
  const Ref xb = random_ref(rng, {3, 70}, -8, 8, DType::kBFloat16);
  EXPECT_TRUE(matches(softplus(on_device(long_x)), DType::kFloat32,
                      map(long_x, torch_softplus(1, 20)), kTolF32));
  EXPECT_TRUE(matches(softplus(on_device(xb, DType::kBFloat16)), DType::kBFloat16,
                      map(xb, torch_softplus(1, 20)), kTolBf16));
  const Tensor t = on_device(long_x);
  EXPECT_TRUE(matches(softplus(t * 0.5) * t + 1.0, DType::kFloat32,
                      map(long_x, [&](double v) { return torch_softplus(1, 20)(v * 0.5) * v + 1; }),
                      kTolF32));
}

TEST_F(OpsValue, TranscendentalsOfIntegersComputeInF32) {
  const Ref n{{4}, {1, 2, 3, 9}};
  const Tensor t = on_device(n, DType::kInt32);
  EXPECT_TRUE(
      matches(sqrt(t), DType::kFloat32, map(n, [](double v) { return std::sqrt(v); }), kTolF32));
  EXPECT_TRUE(
      matches(exp(t), DType::kFloat32, map(n, [](double v) { return std::exp(v); }), kTolF32));
}

TEST_F(OpsValue, ReluAbsNegKeepIntegerDtype) {
  const Ref n{{5}, {-3, -1, 0, 2, 7}};
  const Tensor t = on_device(n, DType::kInt64);
  EXPECT_TRUE(matches(relu(t), DType::kInt64, Ref{{5}, {0, 0, 0, 2, 7}}, kExact));
  EXPECT_TRUE(matches(abs(t), DType::kInt64, Ref{{5}, {3, 1, 0, 2, 7}}, kExact));
  EXPECT_TRUE(matches(neg(t), DType::kInt64, Ref{{5}, {3, 1, 0, -2, -7}}, kExact));
}

// ---- Casts -----------------------------------------------------------------------------------

TEST_F(OpsValue, CastF32ToF64IsExact) {
  std::mt19937 rng(51);
  const Ref x = random_ref(rng, {3, 4}, -100, 100);
  EXPECT_TRUE(matches(cast(on_device(x), DType::kFloat64), DType::kFloat64, x, kExact));
}

TEST_F(OpsValue, CastF64ToF32RoundsToNearest) {
  std::mt19937 rng(52);
  const Ref x = random_ref(rng, {10}, -100, 100, DType::kFloat64);
  EXPECT_TRUE(matches(cast(on_device(x, DType::kFloat64), DType::kFloat32), DType::kFloat32,
                      map(x, [](double v) { return round_to(DType::kFloat32, v); }), kExact));
}

TEST_F(OpsValue, CastFloatToIntegerTruncatesTowardZero) {
  const Ref x{{6}, {-2.75, -0.5, 0, 0.5, 1.999, 7.25}};
  const Ref want{{6}, {-2, 0, 0, 0, 1, 7}};
  EXPECT_TRUE(matches(cast(on_device(x), DType::kInt32), DType::kInt32, want, kExact));
  EXPECT_TRUE(
      matches(cast(on_device(x, DType::kFloat64), DType::kInt64), DType::kInt64, want, kExact));
}

TEST_F(OpsValue, CastIntegerToFloatIsExact) {
  std::mt19937 rng(53);
  const Ref n = random_ints(rng, {8}, -1000000, 1000000);
  EXPECT_TRUE(
      matches(cast(on_device(n, DType::kInt64), DType::kFloat32), DType::kFloat32, n, kExact));
  EXPECT_TRUE(
      matches(cast(on_device(n, DType::kInt32), DType::kFloat64), DType::kFloat64, n, kExact));
}

TEST_F(OpsValue, CastToBoolIsNonZeroAndBackIsZeroOrOne) {
  const Ref x{{5}, {0, -0.0, 0.25, -3, 1e-30}};
  const Tensor b = cast(on_device(x), DType::kBool);
  EXPECT_TRUE(matches(b, DType::kBool, Ref{{5}, {0, 0, 1, 1, 1}}, kExact));
  EXPECT_TRUE(
      matches(cast(b, DType::kFloat32), DType::kFloat32, Ref{{5}, {0, 0, 1, 1, 1}}, kExact));
  EXPECT_TRUE(matches(
      cast(cast(on_device(Ref{{3}, {0, 5, -2}}, DType::kInt64), DType::kBool), DType::kInt32),
      DType::kInt32, Ref{{3}, {0, 1, 1}}, kExact));
}

TEST_F(OpsValue, CastF32ToBf16IsWithinBf16Precision) {
  std::mt19937 rng(54);
  const Ref x = random_ref(rng, {4, 6}, -50, 50);
  EXPECT_TRUE(matches(cast(on_device(x), DType::kBFloat16), DType::kBFloat16, x, kTolBf16));
}

TEST_F(OpsValue, Bf16ValuesRoundTripThroughF32AndF64) {
  std::mt19937 rng(55);
  const Ref x = random_ref(rng, {10}, -8, 8, DType::kBFloat16);  // already bf16 values
  const Tensor b = on_device(x, DType::kBFloat16);
  EXPECT_TRUE(matches(cast(b, DType::kFloat32), DType::kFloat32, x, kExact));
  EXPECT_TRUE(matches(cast(b, DType::kFloat64), DType::kFloat64, x, kExact));
}

TEST_F(OpsValue, Bf16ArithmeticIsWithinBf16Precision) {
  std::mt19937 rng(56);
  const Ref a = random_ref(rng, {3, 5}, -4, 4, DType::kBFloat16);
  const Ref b = random_ref(rng, {5}, 0.5, 4, DType::kBFloat16);
  const Tensor ta = on_device(a, DType::kBFloat16), tb = on_device(b, DType::kBFloat16);
  EXPECT_TRUE(matches(ta * tb + ta, DType::kBFloat16,
                      zip(a, b, [](double p, double q) { return p * q + p; }), kTolBf16));
  EXPECT_TRUE(
      matches(exp(ta), DType::kBFloat16, map(a, [](double v) { return std::exp(v); }), kTolBf16));
  EXPECT_TRUE(matches(sum(ta, {1}), DType::kBFloat16, reduce_ref(a, {1}, false, sum_of), kTolBf16));
}

}  // namespace
}  // namespace axle::testing
