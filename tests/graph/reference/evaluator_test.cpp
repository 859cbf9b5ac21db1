// Tests graph/reference/evaluator.h with the graph layer alone (no actors, no devices): inputs
// are DeviceData objects that stay pending (the evaluator never reads their memory), ops are
// traced on them, and each op family's values are checked against expectations this file
// computes on its own, by hand or with a plain loop, corner cases included. Ops the tracer does
// not emit in some form (fill, integer division, transposed matmul operands, the pooling
// gradients) are built as IR nodes directly. tests/actors/reference_agreement_test.cpp checks
// the evaluator against the CPU backend.
//
// Why this file is over 600 lines: it covers every op family of graph/op.h with its corner
// cases; the families share the fixture and the loops at the top.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "axle/graph/autograd.h"
#include "axle/graph/collectives.h"
#include "axle/graph/device.h"
#include "axle/graph/ops.h"
#include "axle/graph/reference/evaluator.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Inputs made without devices, and evaluation of what is traced on them.
class Graph {
 public:
  template <class T>
  Tensor input(const std::vector<T>& values, const Shape& shape) {
    std::vector<std::byte> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return leaf(dtype_of<T>(), shape, std::move(bytes));
  }
  Tensor bools(const std::vector<int>& values, const Shape& shape) {
    std::vector<std::byte> bytes;
    for (int v : values) bytes.push_back(static_cast<std::byte>(v != 0));
    return leaf(DType::kBool, shape, std::move(bytes));
  }
  std::vector<CpuTensor> run(const std::vector<Tensor>& results) {
    std::vector<NodePtr> roots;
    for (const Tensor& t : results) roots.push_back(t.impl()->ir());
    const StepGraph graph = build_step_graph(roots);
    return reference::evaluate(
        graph, [this](const DeviceData& data) -> const CpuTensor& { return leaves_.at(&data); });
  }
  CpuTensor run(const Tensor& result) { return run(std::vector<Tensor>{result})[0]; }
  template <class T>
  std::vector<T> values(const Tensor& result) {
    return run(result).values<T>();
  }

 private:
  Tensor leaf(DType dtype, const Shape& shape, std::vector<std::byte> bytes) {
    auto data = make_intrusive<DeviceData>(Device{}, dtype, shape);
    leaves_[data.get()] = CpuTensor{dtype, shape, std::move(bytes)};
    return Tensor(make_intrusive<TensorImpl>(dtype, data));
  }
  std::unordered_map<const DeviceData*, CpuTensor> leaves_;
};

/// A tensor computed by an IR node built directly (for ops the tracer emits only in some forms).
Tensor node(Op op, DType dtype, const Shape& shape, std::vector<Tensor> operands,
            IntAttrs ints = {}, RealAttrs reals = {},
            std::source_location where = std::source_location::current()) {
  Operands nodes;
  for (const Tensor& t : operands) nodes.push_back(t.impl()->value_node(where));
  auto ir = make_intrusive<Node>(op, dtype, shape, std::move(nodes), std::move(ints),
                                 std::move(reals), where);
  return Tensor(make_intrusive<TensorImpl>(dtype, std::move(ir), Device{}));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want,
                   double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i];
    } else if (std::isinf(want[i]) || tolerance == 0) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tolerance) << "element " << i;
    }
  }
}

std::vector<double> iota_values(std::size_t n, double start = 0, double step = 1) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  return v;
}

// ---- Elementwise -----------------------------------------------------------------------------

TEST(ReferenceElementwise, BroadcastsAndRoundsToF32) {
  Graph g;
  const std::vector<float> a = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const std::vector<float> b = {1.0f / 3, 2.0f / 3, 1.0f};
  const auto sum = g.values<float>(g.input(a, {2, 3}) + g.input(b, {3}));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(sum[i * 3 + j], a[i * 3 + j] + b[j]);
  }
  const auto quotient = g.values<float>(g.input(a, {2, 3}) / g.input(b, {1, 3}));
  for (int k = 0; k < 6; ++k) EXPECT_EQ(quotient[k], a[k] / b[k % 3]);
}

TEST(ReferenceElementwise, IntegersWrapAsCppDoes) {
  Graph g;
  const int32_t max = std::numeric_limits<int32_t>::max();
  const Tensor x = g.input<int32_t>({max, 7, -7, max}, {4});
  const Tensor y = g.input<int32_t>({1, 2, 2, 2}, {4});
  const int32_t min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(g.values<int32_t>(x + y), (std::vector<int32_t>{min, 9, -5, min + 1}));
  EXPECT_EQ(g.values<int32_t>(x * y), (std::vector<int32_t>{max, 14, -14, -2}));
  EXPECT_EQ(g.values<int32_t>(-x)[0], -max);
  const Tensor low = g.input<int32_t>({std::numeric_limits<int32_t>::min()}, {1});
  EXPECT_EQ(g.values<int32_t>(neg(low))[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(g.values<int32_t>(abs(low))[0], std::numeric_limits<int32_t>::min());
  const Tensor big = g.input<int64_t>({std::numeric_limits<int64_t>::max()}, {1});
  EXPECT_EQ(g.values<int64_t>(big + g.input<int64_t>({1}, {1}))[0],
            std::numeric_limits<int64_t>::min());
}

TEST(ReferenceElementwise, IntegerDivisionTruncatesAndRejectsZero) {
  Graph g;
  const Tensor a = g.input<int32_t>({-7, 7, std::numeric_limits<int32_t>::min(), 9}, {4});
  const Tensor b = g.input<int32_t>({2, -2, -1, 3}, {4});
  EXPECT_EQ(g.values<int32_t>(node(Op::kDiv, DType::kInt32, {4}, {a, b})),
            (std::vector<int32_t>{-3, -3, std::numeric_limits<int32_t>::min(), 3}));
  const Tensor zero = g.input<int32_t>({1, 0, 1, 1}, {4});
  const std::string message = error_of([&] {
    (void)g.run(node(Op::kDiv, DType::kInt32, {4}, {a, zero}));
  });
  EXPECT_NE(message.find("div(s32[4], s32[4]) -> s32[4]: integer division by zero"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("evaluator_test.cpp"), std::string::npos) << message;
}

TEST(ReferenceElementwise, PowCornerCases) {
  Graph g;
  const Tensor base = g.input<double>({0, -8, kNaN, 1, 2, -2, 0}, {7});
  const Tensor exponent = g.input<double>({-1, 1.0 / 3, 0, kNaN, 0.5, 3, 0}, {7});
  expect_values(g.values<double>(pow(base, exponent)), {kInf, kNaN, 1, 1, std::sqrt(2.0), -8, 1},
                1e-15);
  const Tensor ints = g.input<int64_t>({2, -1, 2, 1, 3, 0}, {6});
  const Tensor powers = g.input<int64_t>({10, -3, -1, -5, 40, 0}, {6});
  uint64_t three_to_40 = 1;
  for (int i = 0; i < 40; ++i) three_to_40 *= 3;  // wraps modulo 2^64
  EXPECT_EQ(g.values<int64_t>(pow(ints, powers)),
            (std::vector<int64_t>{1024, -1, 0, 1, static_cast<int64_t>(three_to_40), 1}));
}

TEST(ReferenceElementwise, MaximumMinimumAndComparisonsWithNaN) {
  Graph g;
  const Tensor a = g.input<float>({1, NAN, 3, -1}, {4});
  const Tensor b = g.input<float>({2, 0, NAN, -1}, {4});
  expect_values(g.values<double>(maximum(a, b)), {2, kNaN, kNaN, -1});
  expect_values(g.values<double>(minimum(a, b)), {1, kNaN, kNaN, -1});
  EXPECT_EQ(g.values<uint8_t>(eq(a, b)), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(g.values<uint8_t>(ne(a, b)), (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ(g.values<uint8_t>(lt(a, b)), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(g.values<uint8_t>(ge(a, b)), (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST(ReferenceElementwise, BoolArithmeticIsLogical) {
  Graph g;
  const Tensor a = g.bools({0, 0, 1, 1}, {4});
  const Tensor b = g.bools({0, 1, 0, 1}, {4});
  EXPECT_EQ(g.values<uint8_t>(a + b), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(g.values<uint8_t>(a * b), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(g.values<uint8_t>(logical_and(a, b)), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(g.values<uint8_t>(logical_or(a, b)), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(g.values<uint8_t>(logical_not(a)), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_NE(error_of([&] {
              (void)g.run(node(Op::kSub, DType::kBool, {4}, {a, b}));
            }).find("not defined for pred"),
            std::string::npos);
}

TEST(ReferenceElementwise, WhereBroadcastsTheCondition) {
  Graph g;
  const Tensor condition = g.bools({1, 0, 1}, {3});
  const Tensor a = g.input<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = g.input<float>({-1}, {1});
  expect_values(g.values<double>(where(condition, a, b)), {1, -1, 3, 4, -1, 6});
}

TEST(ReferenceElementwise, UnaryMathInDouble) {
  Graph g;
  const std::vector<double> x = {-3, -0.5, 0, 0.25, 2, 3.5};
  const Tensor t = g.input(x, {6});
  std::vector<double> e, th, s, ge, gt;
  for (double v : x) {
    e.push_back(std::exp(v));
    th.push_back(std::tanh(v));
    s.push_back(1 / (1 + std::exp(-v)));
    ge.push_back(v * 0.5 * std::erfc(-v / std::numbers::sqrt2));  // x * Phi(x)
    const double inner = std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * std::pow(v, 3));
    gt.push_back(0.5 * v * (1 + std::tanh(inner)));
  }
  expect_values(g.values<double>(exp(t)), e, 1e-12);
  expect_values(g.values<double>(tanh(t)), th, 1e-15);
  expect_values(g.values<double>(sigmoid(t)), s, 1e-15);
  expect_values(g.values<double>(gelu(t)), ge, 1e-14);
  expect_values(g.values<double>(gelu(t, "tanh")), gt, 1e-14);
  // gelu_backward with a gradient of ones is gelu's derivative; the derivative of x Phi(x) and
  // of the tanh form, by central differences of the values above' formulas.
  std::vector<double> de, dt;
  for (double v : x) {
    de.push_back(0.5 * std::erfc(-v / std::numbers::sqrt2) +
                 v * std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi));
    const double h = 1e-5;
    auto tanh_form = [](double u) {
      return 0.5 * u *
             (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (u + 0.044715 * u * u * u)));
    };
    dt.push_back((tanh_form(v + h) - tanh_form(v - h)) / (2 * h));
  }
  const Tensor ones = g.input<double>(std::vector<double>(x.size(), 1.0), {6});
  expect_values(g.values<double>(gelu_backward(ones, t)), de, 1e-14);
  expect_values(g.values<double>(gelu_backward(ones, t, "tanh")), dt, 1e-9);
  std::vector<double> er;
  for (double v : x) er.push_back(1 - std::erfc(v));
  expect_values(g.values<double>(erf(t)), er, 1e-15);
  const Tensor positive = g.input<double>({4, 0.25, 0, -1}, {4});
  expect_values(g.values<double>(sqrt(positive)), {2, 0.5, 0, kNaN});
  expect_values(g.values<double>(rsqrt(positive)), {0.5, 2, kInf, kNaN});
  expect_values(g.values<double>(log(positive)), {std::log(4.0), std::log(0.25), -kInf, kNaN});
  expect_values(g.values<double>(relu(g.input<double>({-1, kNaN, 2}, {3}))), {0, kNaN, 2});
}

TEST(ReferenceElementwise, CastsTruncateWrapAndRound) {
  Graph g;
  const Tensor f = g.input<float>({2.7f, -2.7f, NAN, 1e10f, -0.0f, 0.5f}, {6});
  const int32_t min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(g.values<int32_t>(cast(f, DType::kInt32)),
            (std::vector<int32_t>{2, -2, min, min, 0, 0}));
  EXPECT_EQ(g.values<uint8_t>(cast(f, DType::kBool)), (std::vector<uint8_t>{1, 1, 1, 1, 0, 1}));
  // 2^60 + 2^36 + 1 is just above halfway between two floats: rounded once it goes up, through
  // f64 (which drops the 1) it would tie and go down to 2^60.
  const int64_t big = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  const Tensor i = g.input<int64_t>({big, (int64_t{1} << 32) + 5, -1}, {3});
  EXPECT_EQ(g.values<float>(cast(i, DType::kFloat32))[0],
            std::ldexp(1.0f, 60) + std::ldexp(1.0f, 37));
  EXPECT_EQ(g.values<int32_t>(cast(i, DType::kInt32)), (std::vector<int32_t>{1, 5, -1}));
  // bf16 rounds to nearest even: 1 + 2^-8 is halfway (to 1), 1 + 3 * 2^-8 rounds up.
  const Tensor halfway = g.input<float>({1.00390625f, 1.01171875f}, {2});
  const CpuTensor bf16 = g.run(cast(halfway, DType::kBFloat16));
  EXPECT_EQ(bf16.dtype, DType::kBFloat16);
  EXPECT_EQ(bf16.values<float>(), (std::vector<float>{1.0f, 1.015625f}));
}

TEST(ReferenceElementwise, CreationOps) {
  Graph g;
  expect_values(g.values<double>(full({2, 2}, 2.5, DType::kFloat64)), {2.5, 2.5, 2.5, 2.5});
  expect_values(g.values<double>(ones({3}, DType::kInt32)), {1, 1, 1});
  const auto range = g.values<float>(arange(0, 1, 0.1));
  ASSERT_EQ(range.size(), 10u);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(range[k], static_cast<float>(k * 0.1));
  expect_values(g.values<double>(arange(5, -1, -2, DType::kInt64)), {5, 3, 1});
  expect_values(g.values<double>(node(Op::kFill, DType::kInt32, {2}, {}, {}, {-3.9})), {-3, -3});
  expect_values(g.values<double>(scalar_tensor(0.3, DType::kFloat64) * 2.0), {0.6});
}

// ---- Reductions ------------------------------------------------------------------------------

TEST(ReferenceReduce, SumAndMeanOverAnyDims) {
  Graph g;
  const std::vector<double> x = iota_values(24, -5, 0.5);
  const Tensor t = g.input(x, {2, 3, 4});
  std::vector<double> sums(3, 0);
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 3; ++b) {
      for (int c = 0; c < 4; ++c) sums[b] += x[(a * 3 + b) * 4 + c];
    }
  }
  const CpuTensor kept = g.run(sum(t, {0, 2}, true));
  EXPECT_EQ(kept.shape, (Shape{1, 3, 1}));
  expect_values(kept.values<double>(), sums);
  std::vector<double> means = sums;
  for (double& m : means) m /= 8;
  expect_values(g.values<double>(mean(t, {-1, 0})), means);
  expect_values(g.values<double>(sum(t)), {std::accumulate(x.begin(), x.end(), 0.0)});
}

TEST(ReferenceReduce, IntegerSumsWidenAndWrap) {
  Graph g;
  const Tensor big = g.input<int64_t>({std::numeric_limits<int64_t>::max(), 1}, {2});
  EXPECT_EQ(g.values<int64_t>(sum(big))[0], std::numeric_limits<int64_t>::min());
  const CpuTensor counted = g.run(sum(g.bools({1, 0, 1, 1}, {4})));
  EXPECT_EQ(counted.dtype, DType::kInt64);
  EXPECT_EQ(counted.values<int64_t>()[0], 3);
}

TEST(ReferenceReduce, EmptySetsGiveTheirIdentityOrNaN) {
  Graph g;
  const Tensor empty = g.input<float>({}, {0, 3});
  expect_values(g.values<double>(sum(empty, {0})), {0, 0, 0});
  expect_values(g.values<double>(mean(empty, {0})), {kNaN, kNaN, kNaN});
  expect_values(g.values<double>(logsumexp(empty, {0})), {-kInf, -kInf, -kInf});
  // The tracer rejects an empty max; a node built directly reaches the evaluator's own check.
  const std::string message = error_of([&] {
    (void)g.run(node(Op::kReduceMax, DType::kFloat32, {3}, {empty}, IntAttrs{0, 0}));
  });
  EXPECT_NE(message.find("max(f32[0,3]) -> f32[3]: cannot reduce over a dim of size 0"),
            std::string::npos)
      << message;
}

TEST(ReferenceReduce, MaxMinAndArgmaxLetNaNWin) {
  Graph g;
  const Tensor x = g.input<float>({1, NAN, 5, 2, 3, 3, 1, 0}, {2, 4});
  expect_values(g.values<double>(amax(x, {1})), {kNaN, 3});
  expect_values(g.values<double>(amin(x, {1})), {kNaN, 0});
  EXPECT_EQ(g.values<int64_t>(argmax(x, 1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(g.values<int64_t>(argmax(g.input<float>({1, 3, 3, 2}, {2, 2}))),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(g.values<int64_t>(argmax(g.input<int32_t>({4, 9, 9, 5, 1, 9}, {2, 3}), 0)),
            (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(g.values<int32_t>(amax(g.input<int32_t>({-5, -2, -9}, {3}))),
            (std::vector<int32_t>{-2}));
}

TEST(ReferenceReduce, LogSumExpAndSoftmaxAreStable) {
  Graph g;
  const Tensor x = g.input<double>({1000, 1000, -kInf, -kInf, kInf, 1}, {3, 2});
  expect_values(g.values<double>(logsumexp(x, {1})), {1000 + std::log(2.0), -kInf, kInf}, 1e-12);
  const Tensor y = g.input<double>({1000, 1001, -kInf, -kInf}, {2, 2});
  const double p = 1 / (1 + std::exp(1.0));
  expect_values(g.values<double>(softmax(y, 1)), {p, 1 - p, kNaN, kNaN}, 1e-15);
  expect_values(g.values<double>(log_softmax(y, -1)),
                {-1 - std::log1p(std::exp(-1.0)), -std::log1p(std::exp(-1.0)), kNaN, kNaN}, 1e-13);
  const Tensor columns = g.input<double>({0, 1, 2, 3}, {2, 2});
  const double q = 1 / (1 + std::exp(2.0));
  expect_values(g.values<double>(softmax(columns, 0)), {q, q, 1 - q, 1 - q}, 1e-15);
  expect_values(g.values<double>(softmax(g.input<double>({4}, {}), 0)), {1});
}

// ---- Linear algebra --------------------------------------------------------------------------

TEST(ReferenceLinalg, MatmulBroadcastsBatchDims) {
  Graph g;
  const std::vector<double> a = iota_values(12, -3, 0.5), b = iota_values(18, 1, -0.25);
  const Tensor result = matmul(g.input(a, {2, 1, 2, 3}), g.input(b, {3, 3, 2}));
  const CpuTensor out = g.run(result);
  ASSERT_EQ(out.shape, (Shape{2, 3, 2, 2}));
  const auto got = out.values<double>();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int m = 0; m < 2; ++m) {
        for (int n = 0; n < 2; ++n) {
          double want = 0;
          for (int k = 0; k < 3; ++k) want += a[(i * 2 + m) * 3 + k] * b[(j * 3 + k) * 2 + n];
          EXPECT_DOUBLE_EQ(got[((i * 3 + j) * 2 + m) * 2 + n], want);
        }
      }
    }
  }
  expect_values(
      g.values<double>(matmul(g.input<double>({1, 2, 3}, {3}), g.input<double>({4, 5, 6}, {3}))),
      {32});
}

TEST(ReferenceLinalg, MatmulTransposedOperandsAndIntegers) {
  Graph g;
  const Tensor a = g.input<double>({1, 2, 3, 4, 5, 6}, {3, 2});  // a^T is [[1,3,5],[2,4,6]]
  const Tensor b = g.input<double>({1, 0, 1, 0, 1, 1}, {2, 3});  // b^T is [[1,0],[0,1],[1,1]]
  expect_values(g.values<double>(node(Op::kMatmul, DType::kFloat64, {2, 2}, {a, b}, {1, 1})),
                {6, 8, 8, 10});
  const Tensor w = g.input<double>({1, 1, 1, 2, 0, 0}, {2, 3});
  expect_values(g.values<double>(
                    linear(g.input<double>({1, 2, 3}, {1, 3}), w, g.input<double>({10, 20}, {2}))),
                {16, 22});
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(g.values<int64_t>(
                matmul(g.input<int64_t>({big, 1}, {1, 2}), g.input<int64_t>({4, 3}, {2, 1}))),
            (std::vector<int64_t>{3}));  // 2^64 wraps to 0
}

TEST(ReferenceLinalg, Conv2dWithStridePaddingDilationAndGroups) {
  Graph g;
  const int n = 1, c = 4, h = 5, w = 6, o = 2, kh = 2, kw = 3, groups = 2;
  const int sh = 2, sw = 1, ph = 1, pw = 2, dh = 2, dw = 1;
  const std::vector<double> x = iota_values(n * c * h * w, -1, 0.05);
  const std::vector<double> k = iota_values(o * (c / groups) * kh * kw, 0.5, -0.1);
  Conv2dOptions options{{sh, sw}, {ph, pw}, {dh, dw}, groups};
  const CpuTensor out =
      g.run(conv2d(g.input(x, {n, c, h, w}), g.input(k, {o, c / groups, kh, kw}), {}, options));
  const int oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  const int ow = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  ASSERT_EQ(out.shape, (Shape{n, o, oh, ow}));
  // The input zero-padded explicitly, then plain sums.
  const int hp = h + 2 * ph, wp = w + 2 * pw;
  std::vector<double> padded(static_cast<std::size_t>(c * hp * wp), 0.0);
  for (int ci = 0; ci < c; ++ci) {
    for (int y = 0; y < h; ++y) {
      for (int z = 0; z < w; ++z)
        padded[(ci * hp + y + ph) * wp + z + pw] = x[(ci * h + y) * w + z];
    }
  }
  const auto got = out.values<double>();
  for (int oc = 0; oc < o; ++oc) {
    const int group = oc / (o / groups);
    for (int y = 0; y < oh; ++y) {
      for (int z = 0; z < ow; ++z) {
        double want = 0;
        for (int ci = 0; ci < c / groups; ++ci) {
          for (int i = 0; i < kh; ++i) {
            for (int j = 0; j < kw; ++j) {
              want += padded[((group * (c / groups) + ci) * hp + y * sh + i * dh) * wp + z * sw +
                             j * dw] *
                      k[((oc * (c / groups) + ci) * kh + i) * kw + j];
            }
          }
        }
        EXPECT_NEAR(got[(oc * oh + y) * ow + z], want, 1e-12) << oc << "," << y << "," << z;
      }
    }
  }
}

// ---- Pooling ---------------------------------------------------------------------------------

TEST(ReferencePooling, MaxPoolWithPaddingDilationAndCeilMode) {
  Graph g;
  const std::vector<double> x = {1, -2, 3, 0, 5, -6, 7, 8, -9, 4, 2, 1, 0, 3, -1, 6, 2, 2, 9, -4};
  const Tensor input = g.input(x, {1, 1, 4, 5});
  // kernel 3x2, stride 2, padding 1x1, dilation 1x2, ceil_mode: windows start at row 2*y-1
  // (taps +0..2) and column 2*z-1 (taps +0, +2); the last row of windows starts at row 3 and
  // reads the padding below the input.
  const CpuTensor out = g.run(max_pool2d(input, {{3, 2}, {2, 2}, {1, 1}, {1, 2}, true}));
  ASSERT_EQ(out.shape, (Shape{1, 1, 3, 3}));
  std::vector<double> want;
  for (int y = 0; y < 3; ++y) {
    for (int z = 0; z < 3; ++z) {
      double best = -kInf;
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 2; ++j) {
          const int row = 2 * y - 1 + i, col = 2 * z - 1 + 2 * j;
          if (row >= 0 && row < 4 && col >= 0 && col < 5) best = std::max(best, x[row * 5 + col]);
        }
      }
      want.push_back(best);
    }
  }
  expect_values(out.values<double>(), want);
  expect_values(g.values<double>(max_pool2d(g.input<double>({1, kNaN, 3, 4}, {1, 1, 2, 2}), {{2}})),
                {kNaN});
}

TEST(ReferencePooling, AvgPoolDivisorsFollowTorch) {
  Graph g;
  const Tensor x = g.input<double>(iota_values(9, 1), {1, 1, 3, 3});  // [[1,2,3],[4,5,6],[7,8,9]]
  // kernel 2, stride 2, padding 1: windows cover padded rows/cols [-1,0], [1,2] -> 2x2 outputs.
  expect_values(g.values<double>(avg_pool2d(x, {{2}, {2}, {1}, {1, 1}, false, true})),
                {1.0 / 4, (2 + 3) / 4.0, (4 + 7) / 4.0, (5 + 6 + 8 + 9) / 4.0});
  expect_values(g.values<double>(avg_pool2d(x, {{2}, {2}, {1}, {1, 1}, false, false})),
                {1, 2.5, 5.5, 7});
  // ceil_mode without padding: the last window [2, 4) is cut at the input and divides by 1 * 2
  // or 2 * 1, never counting the part past it.
  expect_values(g.values<double>(avg_pool2d(x, {{2}, {2}, {0}, {1, 1}, true, true})),
                {3, 4.5, 7.5, 9});
}

TEST(ReferencePooling, GradientsGoWhereTheForwardLooked) {
  Graph g;
  // Overlapping 2x2 windows at stride 1 over [[1,5,2],[0,5,3]]: the first maximum wins a tie.
  const Tensor x = g.input<double>({1, 5, 2, 0, 5, 3}, {1, 1, 2, 3});
  const Tensor grad = g.input<double>({10, 100}, {1, 1, 1, 2});
  const IntAttrs max_ints{2, 2, 1, 1, 0, 0, 1, 1, 0};
  expect_values(g.values<double>(node(Op::kMaxPool2dBackward, DType::kFloat64, {1, 1, 2, 3},
                                      {x, grad}, max_ints)),
                {0, 110, 0, 0, 0, 0});
  const Tensor nan_x = g.input<double>({1, kNaN, 7, kNaN}, {1, 1, 2, 2});
  expect_values(g.values<double>(node(Op::kMaxPool2dBackward, DType::kFloat64, {1, 1, 2, 2},
                                      {nan_x, g.input<double>({3}, {1, 1, 1, 1})},
                                      {2, 2, 2, 2, 0, 0, 1, 1, 0})),
                {0, 0, 0, 3});  // the last NaN
  // Average gradients: each window's share spread over its in-bounds taps (padding 1, kernel 2,
  // stride 2 over a 2x2 input: four windows of one tap each, divided by 4 with padding counted).
  const Tensor avg_grad = g.input<double>({4, 8, 12, 16}, {1, 1, 2, 2});
  expect_values(g.values<double>(node(Op::kAvgPool2dBackward, DType::kFloat64, {1, 1, 2, 2},
                                      {avg_grad}, {2, 2, 2, 2, 1, 1, 0, 1})),
                {1, 2, 3, 4});
  expect_values(g.values<double>(node(Op::kAvgPool2dBackward, DType::kFloat64, {1, 1, 2, 2},
                                      {avg_grad}, {2, 2, 2, 2, 1, 1, 0, 0})),
                {4, 8, 12, 16});
}

// ---- Data movement ---------------------------------------------------------------------------

TEST(ReferenceDataMovement, ReshapePermuteExpandSlice) {
  Graph g;
  const Tensor x = g.input<int32_t>({0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_EQ(g.values<int32_t>(transpose(x, 0, 1)), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(g.run(reshape(x, {3, -1})).shape, (Shape{3, 2}));
  EXPECT_EQ(g.values<int32_t>(expand(g.input<int32_t>({7, 8}, {2, 1}), {2, 2, 3})),
            (std::vector<int32_t>{7, 7, 7, 8, 8, 8, 7, 7, 7, 8, 8, 8}));
  const Tensor row = g.input<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10});
  EXPECT_EQ(g.values<int64_t>(slice(row, 0, 1, 8, 3)), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(g.values<int64_t>(slice(row, 0, -3, 100, 2)), (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(g.values<int32_t>(slice(x, 1, 1, 3)), (std::vector<int32_t>{1, 2, 4, 5}));
}

TEST(ReferenceDataMovement, CatAndStack) {
  Graph g;
  const Tensor a = g.input<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = g.input<float>({5, 6}, {2, 1});
  expect_values(g.values<double>(cat({a, b}, 1)), {1, 2, 5, 3, 4, 6});
  expect_values(g.values<double>(stack({a, a}, 0)), {1, 2, 3, 4, 1, 2, 3, 4});
}

TEST(ReferenceDataMovement, IndexSelectGatherOneHot) {
  Graph g;
  const Tensor x = g.input<double>({0, 1, 2, 10, 11, 12}, {2, 3});
  expect_values(g.values<double>(index_select(x, 1, g.input<int32_t>({2, 0, 2}, {3}))),
                {2, 0, 2, 12, 10, 12});
  expect_values(g.values<double>(gather(x, 1, g.input<int64_t>({1, 1, 0, 2}, {2, 2}))),
                {1, 1, 10, 12});
  EXPECT_EQ(g.values<int64_t>(one_hot(g.input<int64_t>({2, 0}, {2}), 3)),
            (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  const std::string message = error_of([&] {
    (void)g.run(index_select(x, 0, g.input<int64_t>({0, 2}, {2})));
  });
  EXPECT_NE(message.find("index_select(f64[2,3], s64[2]) -> f64[2,3]: index 2 is out of bounds "
                         "for dimension 0 with size 2"),
            std::string::npos)
      << message;
}

TEST(ReferenceDataMovement, ScatterAddAccumulatesRepeatedIndices) {
  Graph g;
  const Tensor base = g.input<float>({1, 1, 1, 1}, {2, 2});
  const Tensor index = g.input<int64_t>({1, 1, 0}, {1, 3});
  const Tensor src = g.input<float>({0.5f, 0.25f, 2}, {1, 3});
  // Row 0: src[0,0] and src[0,1] land at column 1, src[0,2] at column 0; a 1x3 index fits a
  // 2x2 base outside dim 1 (1 <= 2).
  expect_values(g.values<double>(scatter_add(base, 1, index, src)), {3, 1.75, 1, 1});
  const Tensor ints = g.input<int32_t>({std::numeric_limits<int32_t>::max(), 0}, {2});
  EXPECT_EQ(g.values<int32_t>(
                scatter_add(ints, 0, g.input<int64_t>({0}, {1}), g.input<int32_t>({1}, {1}))),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 0}));
}

// ---- Random ----------------------------------------------------------------------------------

TEST(ReferenceRandom, UniformIsDeterministicInSeedAndOffset) {
  Graph g;
  const Tensor first = rand({20000});
  const Tensor second = rand({20000});
  const std::vector<CpuTensor> out = g.run({first, second, first});
  const auto a = out[0].values<double>(), b = out[1].values<double>();
  EXPECT_EQ(a, out[2].values<double>());
  EXPECT_NE(a, b);  // the second op draws at the next offset
  EXPECT_EQ(a, g.run(first).values<double>());
  double total = 0;
  for (double v : a) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    total += v;
  }
  EXPECT_NEAR(total / a.size(), 0.5, 0.01);
}

TEST(ReferenceRandom, NormalHasMeanZeroAndUnitVariance) {
  Graph g;
  const auto v = g.values<double>(randn({20000}, DType::kFloat64));
  double mean = 0, square = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) square += (x - mean) * (x - mean) / v.size();
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(square, 1, 0.04);
}

TEST(ReferenceRandom, IntegersCoverTheirRangeAndBernoulliItsProbability) {
  Graph g;
  const auto ints = g.values<int32_t>(randint(-3, 4, {7000}, DType::kInt32));
  std::vector<int> counts(7, 0);
  for (int32_t v : ints) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    ++counts[v + 3];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
  const auto coins = g.values<double>(bernoulli({10000}, 0.3));
  EXPECT_NEAR(std::accumulate(coins.begin(), coins.end(), 0.0) / 10000, 0.3, 0.02);
  expect_values(g.values<double>(bernoulli(g.input<float>({0, 1, 1, 0}, {4}))), {0, 1, 1, 0});
  const std::string message = error_of([&] {
    (void)g.run(bernoulli(g.input<float>({0.5f, 1.5f}, {2})));
  });
  EXPECT_NE(message.find("p = 1.5 is outside [0, 1]"), std::string::npos) << message;
}

// ---- Collectives -----------------------------------------------------------------------------

TEST(ReferenceCollectives, EvaluateAsAGroupOfOne) {
  Graph g;
  const Tensor x = g.input<float>({1, 2, 3, 4}, {2, 2});
  expect_values(g.values<double>(all_reduce(ReduceType::kSum, x, 0.5)), {0.5, 1, 1.5, 2});
  expect_values(g.values<double>(all_reduce(ReduceType::kSum, g.input<int32_t>({3, -3}, {2}), 2.5)),
                {7, -7});  // truncated
  expect_values(g.values<double>(all_gather(x, 1)), {1, 2, 3, 4});
  expect_values(g.values<double>(reduce_scatter(ReduceType::kMax, x, 1.0, 0, 1)), {1, 2, 3, 4});
  expect_values(g.values<double>(all_to_all(x, 0, 1, 1)), {1, 2, 3, 4});
  expect_values(g.values<double>(collective_permute(x, {{0, 0}})), {1, 2, 3, 4});
  expect_values(g.values<double>(collective_permute(x, {})), {0, 0, 0, 0});
}

TEST(ReferenceCollectives, RejectGroupsOfMoreThanOneReplica) {
  Graph g;
  const Tensor x = g.input<float>({1, 2}, {2});
  Tensor reduced;
  {
    const ReplicaScope replicas(Device{0}, 2);  // trace as replica 0 of 2
    reduced = all_reduce(ReduceType::kSum, x);
  }
  const std::string message = error_of([&] { (void)g.run(reduced); });
  EXPECT_NE(message.find("all_reduce(f32[2]) -> f32[2]: its groups (size 2: [0,1]) have more "
                         "than one member"),
            std::string::npos)
      << message;
}

// ---- The walk --------------------------------------------------------------------------------

TEST(ReferenceEvaluator, OutputsComeInOrderWithDuplicates) {
  Graph g;
  const Tensor x = g.input<double>({1, 2}, {2});
  const Tensor y = x * 3.0;
  const Tensor z = exp(y) - y;
  const std::vector<CpuTensor> out = g.run({z, y, z});
  ASSERT_EQ(out.size(), 3u);
  expect_values(out[1].values<double>(), {3, 6});
  expect_values(out[0].values<double>(), {std::exp(3.0) - 3, std::exp(6.0) - 6});
  expect_values(out[2].values<double>(), out[0].values<double>());
}

TEST(ReferenceEvaluator, GradientsTracedByAutogradEvaluate) {
  Graph g;
  const Tensor x = g.input<double>({1, -2, 3}, {3});
  x.requires_grad_();
  sum(x * x * 2.0).backward();
  expect_values(g.values<double>(x.grad()), {4, -8, 12});
}

TEST(ReferenceEvaluator, RejectsALeafValueOfTheWrongShape) {
  const auto data = make_intrusive<DeviceData>(Device{}, DType::kFloat32, Shape{2});
  const Tensor x(make_intrusive<TensorImpl>(DType::kFloat32, data));
  const Tensor y = x + 1.0;
  const StepGraph graph = build_step_graph(std::vector<NodePtr>{y.impl()->ir()});
  const CpuTensor wrong{DType::kFloat32, Shape{3}, std::vector<std::byte>(12)};
  const std::string message = error_of([&] {
    (void)reference::evaluate(graph, [&](const DeviceData&) -> const CpuTensor& { return wrong; });
  });
  EXPECT_NE(message.find("leaf_value gave f32[3] (12 bytes) for this leaf"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace axle
