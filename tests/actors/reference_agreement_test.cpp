// Checks that graph/reference/evaluator.h and the CPU backend (through the compiler) agree on
// every op of graph/op.h: each test traces ops on device tensors made with tensor(), builds the
// step graph of the results before they run, evaluates it with the reference (inputs: the host
// values uploaded, keyed by each input's DeviceData), then runs the step and reads the device's
// values with cpu(). Shapes include broadcasting, 0-d, empty and odd sizes; dtypes f32, f64,
// bf16, s32, s64 and pred where the op takes them; floating inputs carry NaN, ±inf and -0.
//
// Tolerances: integer, bool and data-movement results must be equal, and so must casts. Floating
// results: f32 4e-6 relative + 1e-6 absolute (the backend's vectorised exp, log, tanh and sqrt
// are a few ulps off correctly rounded); sums of products (matmul, conv2d, the training steps,
// which the backend accumulates in f32) 1e-5 relative + 1e-5 absolute; f64 1e-12 relative +
// 1e-13 absolute; bf16 1e-2 relative + 1e-2 absolute (one bf16 ulp is 2^-8 to 2^-7 relative).
// Random ops agree in meaning, not bits: dtype, shape, range and moments.
//
// Why this file is over 600 lines: it walks every op family with its own cases; the fixture at
// the top is shared by all of them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/engine/element.h"
#include "axle/graph/op_util.h"
#include "axle/graph/reference/evaluator.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Tolerance {
  double relative = 0;
  double absolute = 0;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kProducts{1e-5, 1e-5};

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return {4e-6, 1e-6};
    case DType::kFloat64:
      return {1e-12, 1e-13};
    case DType::kBFloat16:
      return {1e-2, 1e-2};
    default:
      return kExact;
  }
}

std::string describe(const CpuTensor& t) {
  return std::string(dtype_name(t.dtype)) + t.shape.to_string();
}

// `device` is in its logical dtype, `reference` in the storage dtype (they differ under
// XLA_USE_BF16).
void expect_close(const CpuTensor& device, const CpuTensor& reference, Tolerance tolerance,
                  const std::string& what) {
  ASSERT_EQ(ops::storage_dtype(device.dtype), reference.dtype) << what;
  ASSERT_EQ(device.shape, reference.shape)
      << what << ": device " << describe(device) << ", reference " << describe(reference);
  int mismatches = 0;
  if (!is_floating(device.dtype)) {
    const auto d = device.values<int64_t>(), r = reference.values<int64_t>();
    for (std::size_t i = 0; i < d.size(); ++i) {
      if (d[i] != r[i] && ++mismatches <= 5) {
        ADD_FAILURE() << what << " " << describe(device) << " element " << i << ": device " << d[i]
                      << ", reference " << r[i];
      }
    }
    return;
  }
  const auto d = device.values<double>(), r = reference.values<double>();
  for (std::size_t i = 0; i < d.size(); ++i) {
    const bool same =
        (std::isnan(d[i]) && std::isnan(r[i])) || d[i] == r[i] ||
        std::fabs(d[i] - r[i]) <=
            tolerance.absolute + tolerance.relative * std::max(std::fabs(d[i]), std::fabs(r[i]));
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << what << " " << describe(device) << " element " << i << ": device " << d[i]
                    << ", reference " << r[i];
    }
  }
}

/// Device inputs whose host values the reference reads, and the comparison of results.
class Agreement {
 public:
  explicit Agreement(uint32_t seed = 1) : rng_(seed) {}

  template <class T>
  Tensor input(const std::vector<T>& values, const Shape& shape) {
    std::vector<std::byte> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return upload(dtype_of<T>(), shape, std::move(bytes));
  }
  Tensor bools(const std::vector<int>& values, const Shape& shape) {
    std::vector<std::byte> bytes;
    for (int v : values) bytes.push_back(static_cast<std::byte>(v != 0));
    return upload(DType::kBool, shape, std::move(bytes));
  }

  /// Random values: floating ones uniform in [low, high) (with NaN, ±inf, -0 and 0 among them
  /// when `specials`, +inf only when `positive_infinity`; bf16 as a cast of f32), integers
  /// uniform in [low, high], bool 0 / 1.
  Tensor random(DType dtype, const Shape& shape, double low = -2, double high = 2,
                bool specials = false, bool positive_infinity = true) {
    const auto n = static_cast<std::size_t>(shape.numel());
    if (dtype == DType::kBool) {
      std::vector<int> v(n);
      for (int& x : v) x = static_cast<int>(rng_() & 1);
      return bools(v, shape);
    }
    if (!is_floating(dtype)) {
      std::uniform_int_distribution<int64_t> pick(static_cast<int64_t>(low),
                                                  static_cast<int64_t>(high));
      std::vector<int64_t> v(n);
      for (int64_t& x : v) x = pick(rng_);
      if (dtype == DType::kInt64) return input(v, shape);
      return input(std::vector<int32_t>(v.begin(), v.end()), shape);
    }
    std::uniform_real_distribution<double> pick(low, high);
    std::vector<double> v(n);
    for (double& x : v) x = pick(rng_);
    if (specials && n >= 10) {
      const double special[] = {kNaN, positive_infinity ? kInf : 1e30, -kInf, -0.0, 0.0};
      std::uniform_int_distribution<std::size_t> at(0, n - 1);
      for (double x : special) v[at(rng_)] = x;
    }
    if (dtype == DType::kFloat64) return input(v, shape);
    const Tensor f32 = input(std::vector<float>(v.begin(), v.end()), shape);
    return dtype == DType::kFloat32 ? f32 : cast(f32, dtype);
  }

  /// Integer values in [low, high] as floating-point device data (f32 or f64).
  Tensor integers(DType dtype, const Shape& shape, int low, int high) {
    std::uniform_int_distribution<int> pick(low, high);
    std::vector<double> v(static_cast<std::size_t>(shape.numel()));
    for (double& x : v) x = pick(rng_);
    if (dtype == DType::kFloat64) return input(v, shape);
    return input(std::vector<float>(v.begin(), v.end()), shape);
  }

  /// The reference's and the device's values of `results` (one step graph, one step).
  std::vector<std::pair<CpuTensor, CpuTensor>> both(const std::vector<Tensor>& results) {
    std::vector<NodePtr> roots;
    for (const Tensor& t : results) {
      if (!t.impl()->pending_ir()) throw std::logic_error("a result is not pending IR");
      roots.push_back(t.impl()->ir());
    }
    const StepGraph graph = build_step_graph(roots);
    const std::vector<CpuTensor> reference =
        reference::evaluate(graph, [this](const DeviceData& data) -> const CpuTensor& {
          auto it = host_.find(&data);
          if (it == host_.end()) throw std::logic_error("a leaf is not an uploaded input");
          return it->second;
        });
    mark_step();
    std::vector<std::pair<CpuTensor, CpuTensor>> out;
    for (std::size_t i = 0; i < results.size(); ++i) {
      out.emplace_back(reference[i], results[i].cpu());
    }
    return out;
  }

  /// Expects the device and the reference to agree on each of `results`.
  void expect_agree(const std::vector<Tensor>& results,
                    std::optional<Tolerance> tolerance = std::nullopt,
                    const std::string& what = "") {
    const auto values = both(results);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto& [reference, device] = values[i];
      expect_close(device, reference, tolerance.value_or(default_tolerance(reference.dtype)),
                   what + " result " + std::to_string(i));
    }
  }

 private:
  // The reference reads leaves in their storage dtype, as the device holds them.
  Tensor upload(DType dtype, const Shape& shape, std::vector<std::byte> bytes) {
    const Tensor t = tensor_from_bytes(bytes, dtype, shape);
    const CpuTensor logical{dtype, shape, std::move(bytes)};
    const DType storage = ops::storage_dtype(dtype);
    CpuTensor stored{
        storage, shape,
        std::vector<std::byte>(logical.bytes.size() / dtype_size(dtype) * dtype_size(storage))};
    if (storage == dtype) {
      stored.bytes = logical.bytes;
    } else {
      const std::vector<double> values = logical.values<double>();
      for (std::size_t i = 0; i < values.size(); ++i) {
        store_element(storage, values[i], stored.bytes.data() + i * dtype_size(storage));
      }
    }
    host_[t.impl()->data().get()] = std::move(stored);
    return t;
  }
  std::mt19937_64 rng_;
  std::unordered_map<const DeviceData*, CpuTensor> host_;
};

/// A tensor computed by an IR node built directly (ops the tracer emits only in some forms).
Tensor node(Op op, DType dtype, const Shape& shape, const std::vector<Tensor>& operands,
            IntAttrs ints = {}, RealAttrs reals = {}) {
  Operands nodes;
  for (const Tensor& t : operands) nodes.push_back(t.impl()->value_node({}));
  auto ir =
      make_intrusive<Node>(op, dtype, shape, std::move(nodes), std::move(ints), std::move(reals));
  return Tensor(make_intrusive<TensorImpl>(dtype, std::move(ir), Device{}));
}

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                            DType::kInt32,   DType::kInt64,   DType::kBool};

// ---- Elementwise -----------------------------------------------------------------------------

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> apply;
  bool on_bool = true;            // whether the op takes pred operands
  double a_low = -9, a_high = 9;  // integer operand ranges (floats are in [-2, 2))
  double b_low = -9, b_high = 9;
};

class BinaryAgreement : public testing::TestWithParam<BinaryCase> {};

TEST_P(BinaryAgreement, OnEveryDTypeAndBroadcast) {
  const BinaryCase& c = GetParam();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5, 7}, {5, 7}}, {{3, 1, 4}, {5, 4}}, {{}, {2, 3}}, {{2, 0, 3}, {3}}, {{3, 37}, {37}}};
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBool && !c.on_bool) continue;
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    std::vector<Tensor> results;
    for (const auto& [sa, sb] : shapes) {
      const bool ints = !is_floating(dtype);
      const Tensor a = check.random(dtype, sa, ints ? c.a_low : -2, ints ? c.a_high : 2, true);
      const Tensor b = check.random(dtype, sb, ints ? c.b_low : -2, ints ? c.b_high : 2, true);
      results.push_back(c.apply(a, b));
      results.push_back(c.apply(b, a));
    }
    check.expect_agree(results, std::nullopt, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, BinaryAgreement,
    testing::Values(
        BinaryCase{"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
        BinaryCase{"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, false},
        BinaryCase{"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
        BinaryCase{"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
        BinaryCase{"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, false, -4, 4,
                   -2, 9},
        BinaryCase{"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
        BinaryCase{"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
        BinaryCase{"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, true, -2, 2, -2,
                   2},
        BinaryCase{"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, true, -2, 2, -2,
                   2},
        BinaryCase{"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
        BinaryCase{"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, true, -2, 2, -2,
                   2},
        BinaryCase{"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
        BinaryCase{"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
        BinaryCase{"logical_and",
                   [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, true, -1, 1,
                   -1, 1},
        BinaryCase{"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
                   true, -1, 1, -1, 1}),
    [](const testing::TestParamInfo<BinaryCase>& info) { return std::string(info.param.name); });

TEST(ElementwiseAgreement, ScalarOperandsAndIntegerCornerCases) {
  Agreement check;
  const Tensor f = check.random(DType::kFloat32, {4, 9}, -3, 3, true);
  const Tensor i = check.random(DType::kInt32, {4, 9}, -7, 7);
  const Tensor big = check.input<int64_t>({std::numeric_limits<int64_t>::max(), 3, -5, 1}, {4});
  const Tensor wide = check.input<int64_t>({1, 40, 3, -2}, {4});
  check.expect_agree({f + 2.5, f * 0.0, 2.0 - f, 1.0 / f, pow(f, 2.0), pow(f, 0.5), pow(f, -1.5),
                      eq(f, 1.0), lt(f, 0.5), gt(f, -0.25), i + 3.0, i * 2.5, pow(i, 3.0),
                      eq(i, 2.0), big + big, big * big,
                      pow(check.input<int64_t>({3, 3, 3, 3}, {4}), wide), abs(big), -big});
  const std::vector<double> base = {0, 0, -0.0, -8, kNaN, 1, -1, kInf, -kInf, 2, -2, 0.5, 0};
  const std::vector<double> exponent = {-1,   0, -1,    1.0 / 3, 0,    kNaN, kInf,
                                        -0.5, 3, -kInf, 0.5,     kInf, -kInf};
  const Shape corners{static_cast<int64_t>(base.size())};
  check.expect_agree(
      {pow(check.input(base, corners), check.input(exponent, corners)),
       pow(check.input(std::vector<float>(base.begin(), base.end()), corners),
           check.input(std::vector<float>(exponent.begin(), exponent.end()), corners))});
  // Integer division truncates toward zero (the tracer only divides in floating point, so the
  // kernel's integer form is reached with a node built directly).
  const Tensor den = check.input<int32_t>({3, -3, 7, -1, 2, 5}, {6});
  const Tensor num = check.input<int32_t>(
      {-7, 7, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::min(), 9, -1},
      {6});
  check.expect_agree({node(Op::kDiv, DType::kInt32, {6}, {num, den})});
}

TEST(ElementwiseAgreement, LogicalOpsReadAnyDTypeAsPred) {
  Agreement check;
  const Tensor f = check.random(DType::kFloat32, {3, 10}, -1, 1, true);
  const Tensor i = check.random(DType::kInt64, {10}, -1, 1);
  check.expect_agree({node(Op::kLogicalAnd, DType::kBool, {3, 10}, {f, i}),
                      node(Op::kLogicalOr, DType::kBool, {3, 10}, {i, f}), logical_not(f),
                      logical_not(i)});
}

TEST(ElementwiseAgreement, WhereBroadcastsEveryOperand) {
  Agreement check;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor condition = check.random(DType::kBool, {3, 1, 5});
    const Tensor a = check.random(dtype, {4, 5}, -5, 5, true);
    const Tensor b = check.random(dtype, {3, 4, 1}, -5, 5, true);
    const Tensor numbers = check.random(DType::kInt32, {5}, -1, 1);
    check.expect_agree({where(condition, a, b), where(ne(numbers, 0.0), b, a),
                        where(condition, a, zeros({}, dtype))});
  }
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> apply;
  bool on_bool = false;  // integers: neg, abs and relu keep them, the others compute in f32
  // Whether f32 and bf16 inputs may hold +inf. Not for sqrt and rsqrt: the CPU backend takes
  // them from Eigen 3.4's AVX float packets, which give NaN for +inf in a full vector (inf and
  // 0 in the scalar tail), where the reference (and torch) give inf and 0.
  bool float_infinity = true;
  bool floating_only = false;  // as torch: gelu refuses integers
};

class UnaryAgreement : public testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryAgreement, OnEveryDTypeAndShape) {
  const UnaryCase& c = GetParam();
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBool && !c.on_bool) continue;
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    if (c.floating_only && !is_floating(dtype)) {
      EXPECT_THROW((void)c.apply(check.random(dtype, {3}, -6, 6)), ShapeError);
      continue;
    }
    std::vector<Tensor> results;
    for (const Shape& shape : {Shape{5, 7}, Shape{}, Shape{0, 3}, Shape{3, 37}}) {
      const bool infinity = c.float_infinity || dtype == DType::kFloat64;
      results.push_back(c.apply(check.random(dtype, shape, -6, 6, true, infinity)));
    }
    check.expect_agree(results, std::nullopt, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryAgreement,
    testing::Values(UnaryCase{"neg", [](const Tensor& x) { return neg(x); }},
                    UnaryCase{"abs", [](const Tensor& x) { return abs(x); }},
                    UnaryCase{"relu", [](const Tensor& x) { return relu(x); }},
                    UnaryCase{"exp", [](const Tensor& x) { return exp(x); }},
                    UnaryCase{"log", [](const Tensor& x) { return log(x); }},
                    UnaryCase{"sqrt", [](const Tensor& x) { return sqrt(x); }, false, false},
                    UnaryCase{"rsqrt", [](const Tensor& x) { return rsqrt(x); }, false, false},
                    UnaryCase{"tanh", [](const Tensor& x) { return tanh(x); }},
                    UnaryCase{"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
                    UnaryCase{"gelu", [](const Tensor& x) { return gelu(x); }, false, true, true},
                    UnaryCase{"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, false,
                              true, true},
                    UnaryCase{"sin", [](const Tensor& x) { return sin(x); }},
                    UnaryCase{"cos", [](const Tensor& x) { return cos(x); }},
                    UnaryCase{"erf", [](const Tensor& x) { return erf(x); }},
                    UnaryCase{"log1p", [](const Tensor& x) { return log1p(x); }},
                    UnaryCase{"softplus", [](const Tensor& x) { return softplus(x); }},
                    UnaryCase{"logical_not", [](const Tensor& x) { return logical_not(x); }, true}),
    [](const testing::TestParamInfo<UnaryCase>& info) { return std::string(info.param.name); });

TEST(ElementwiseAgreement, CastsBetweenEveryPairOfDTypesAreExact) {
  Agreement check;
  const double i32_max = std::numeric_limits<int32_t>::max();
  const std::vector<double> reals = {2.7, -2.7,    kNaN,        kInf,         -kInf,      -0.0,
                                     0.5, -0.5,    1e10,        -1e10,        3e38,       1e300,
                                     0.3, i32_max, i32_max + 1, -i32_max - 1, 1.00390625, 1e-40};
  const Shape shape{static_cast<int64_t>(reals.size())};
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> longs = {0,
                                      1,
                                      -1,
                                      (int64_t{1} << 60) + (int64_t{1} << 36) + 1,
                                      i64_min,
                                      (int64_t{1} << 32) + 5,
                                      16777217,
                                      -16777217,
                                      std::numeric_limits<int64_t>::max(),
                                      255};
  const std::vector<Tensor> sources = {
      check.input(reals, shape),
      check.input(std::vector<float>(reals.begin(), reals.end()), shape),
      check.input(longs, {10}),
      check.input(std::vector<int32_t>(longs.begin(), longs.end()), {10}),
      check.bools({1, 0, 1, 1}, {4}),
      cast(check.input(std::vector<float>(reals.begin(), reals.end()), shape), DType::kBFloat16)};
  std::vector<Tensor> results;
  for (const Tensor& source : sources) {
    for (DType to : kAllDTypes) results.push_back(cast(source, to));
  }
  check.expect_agree(results, kExact);
}

TEST(ElementwiseAgreement, CreationOps) {
  Agreement check;
  check.expect_agree(
      {arange(0, 10.5, 0.7), arange(-3, 7, 1, DType::kInt64), arange(1, 0, -0.1, DType::kFloat64),
       arange(0, 5, 1, DType::kBFloat16), full({3, 5}, 2.5), zeros({2, 2}, DType::kInt32),
       ones({3}, DType::kBool), full({2, 3}, -7.9, DType::kInt64),
       node(Op::kFill, DType::kFloat32, {2, 3}, {}, {}, {0.1}),
       node(Op::kFill, DType::kInt32, {4}, {}, {}, {-3.9}),
       node(Op::kIota, DType::kInt32, {5}, {}, {}, {-2.5, 1.5})},
      kExact);
}

// ---- Reductions ------------------------------------------------------------------------------

struct ReduceCase {
  const char* name;
  std::function<Tensor(const Tensor&, std::vector<int64_t>, bool)> apply;
  bool takes_empty;            // max and min of nothing are errors
  bool floating_only = false;  // as torch: mean refuses integers and preds
};

class ReduceAgreement : public testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceAgreement, OverEveryDimSet) {
  const ReduceCase& c = GetParam();
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{3, 4, 5}, {}},      {{3, 4, 5}, {0}},    {{3, 4, 5}, {1}},
      {{3, 4, 5}, {2}},     {{3, 4, 5}, {0, 2}}, {{3, 4, 5}, {0, 1}},
      {{3, 4, 5}, {-1, 1}}, {{7}, {}},           {{}, {}},
      {{2, 33}, {1}},       {{1, 6, 1}, {0, 2}}};
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    if (c.floating_only && !is_floating(dtype)) {
      EXPECT_THROW((void)c.apply(check.random(dtype, {3, 4}), {0}, false), ShapeError);
      continue;
    }
    std::vector<Tensor> results;
    bool keepdim = false;
    for (const auto& [shape, dims] : cases) {
      results.push_back(c.apply(check.random(dtype, shape, -9, 9, true), dims, keepdim));
      keepdim = !keepdim;
    }
    if (c.takes_empty) results.push_back(c.apply(check.random(dtype, {0, 3}), {0}, false));
    check.expect_agree(results, std::nullopt, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, ReduceAgreement,
    testing::Values(
        ReduceCase{"sum", [](const Tensor& x, auto d, bool k) { return sum(x, d, k); }, true},
        ReduceCase{"mean", [](const Tensor& x, auto d, bool k) { return mean(x, d, k); }, true,
                   true},
        ReduceCase{"amax", [](const Tensor& x, auto d, bool k) { return amax(x, d, k); }, false},
        ReduceCase{"amin", [](const Tensor& x, auto d, bool k) { return amin(x, d, k); }, false},
        ReduceCase{"logsumexp", [](const Tensor& x, auto d, bool k) { return logsumexp(x, d, k); },
                   true}),
    [](const testing::TestParamInfo<ReduceCase>& info) { return std::string(info.param.name); });

TEST(ArgmaxAgreement, TakesTheFirstMaximumOrNaN) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    if (dtype == DType::kBool) {  // as torch: argmax refuses preds
      EXPECT_THROW((void)argmax(check.random(dtype, {3, 4}), 0), ShapeError);
      continue;
    }
    // Small integers (also as floats, through a cast) make ties.
    const Tensor ties = cast(check.random(DType::kInt32, {3, 4, 5}, -2, 2), dtype);
    const Tensor nans = check.random(dtype, {4, 10}, -2, 2, true);
    check.expect_agree({argmax(ties, 0), argmax(ties, 1, true), argmax(ties, -1), argmax(ties),
                        argmax(ties, std::nullopt, true), argmax(nans, 1), argmax(nans, 0),
                        argmax(check.random(dtype, {}, -2, 2), 0)});
  }
}

TEST(SoftmaxAgreement, SoftmaxAndLogSoftmaxOverEveryDim) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    if (!is_floating(dtype)) {  // as torch: integers and preds are refused
      EXPECT_THROW((void)softmax(check.random(dtype, {3, 4}), 1), ShapeError);
      EXPECT_THROW((void)log_softmax(check.random(dtype, {3, 4}), 0), ShapeError);
      continue;
    }
    const Tensor x = check.random(dtype, {3, 4, 5}, -9, 9, true);
    const Tensor wide = check.random(dtype, {2, 40}, -50, 50);
    std::vector<Tensor> results;
    for (int64_t dim : {0, 1, 2}) {
      results.push_back(softmax(x, dim));
      results.push_back(log_softmax(x, dim));
    }
    results.push_back(softmax(wide, 1));
    results.push_back(log_softmax(wide, 0));
    results.push_back(softmax(check.random(dtype, {}, -2, 2), 0));
    results.push_back(log_softmax(check.random(dtype, {0, 3}), 0));
    const Tensor large = check.random(dtype, {3, 20}, 900, 1100);
    results.push_back(logsumexp(large, {1}));
    results.push_back(softmax(large, 1));
    check.expect_agree(results);
  }
}

TEST(OptimizationBarrierAgreement, PassesEveryDTypeBitForBit) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor a = check.random(dtype, {3, 4, 5}, -9, 9, true);
    const Tensor b = check.random(dtype, {7}, -2, 2);
    const Tensor c = check.random(DType::kFloat32, {}, -2, 2);
    optimization_barrier_({a, b, c});
    check.expect_agree({a, b, c});
  }
}

TEST(CumsumAgreement, AlongEveryDimInEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor x = check.random(dtype, {3, 4, 5}, -9, 9, true);
    check.expect_agree(
        {cumsum(x, 0), cumsum(x, 1), cumsum(x, -1), cumsum(check.random(dtype, {300}, -2, 2), 0),
         cumsum(check.random(dtype, {}, -2, 2), 0), cumsum(check.random(dtype, {0, 3}), 1)});
  }
}

TEST(TopkAgreement, RanksTiesByIndexAndNaNFirst) {
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBool) continue;  // topk takes no pred
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    // Small integers (also as floats, through a cast) make ties.
    const Tensor ties = cast(check.random(DType::kInt32, {3, 4, 5}, -2, 2), dtype);
    const Tensor nans = check.random(dtype, {4, 10}, -2, 2, true);
    check.expect_agree({topk(ties, 2, 0).indices, topk(ties, 3, 1, false).indices,
                        topk(ties, 5).indices, topk(nans, 4).indices, topk(nans, 3, 0).values,
                        topk(nans, 10, 1, false).values});
  }
}

// ---- Linear algebra --------------------------------------------------------------------------

TEST(LinalgAgreement, MatmulOverShapesAndDTypes) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
      {{4}, {4, 3}},    {{2, 5, 4}, {4}},    {{7}, {7}},
      {{3, 0}, {0, 2}}, {{1, 17}, {17, 9}},  {{2, 3, 4}, {1, 4, 6}}};
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    std::vector<Tensor> results;
    const double range = is_floating(dtype) ? 1 : 5;
    for (const auto& [sa, sb] : shapes) {
      results.push_back(
          matmul(check.random(dtype, sa, -range, range), check.random(dtype, sb, -range, range)));
    }
    const Tensor w = check.random(dtype, {6, 4}, -range, range);
    results.push_back(linear(check.random(dtype, {3, 4}, -range, range), w));  // transposed b
    check.expect_agree(results, dtype == DType::kFloat32 ? std::optional(kProducts) : std::nullopt);
  }
  Agreement check;
  const Tensor a = check.random(DType::kFloat32, {2, 4, 3}, -1, 1);
  const Tensor b = check.random(DType::kFloat32, {5, 4}, -1, 1);
  const Tensor bt = check.random(DType::kFloat32, {2, 4, 5}, -1, 1);
  check.expect_agree({node(Op::kMatmul, DType::kFloat32, {2, 3, 5}, {a, bt}, {1, 0}),
                      node(Op::kMatmul, DType::kFloat32, {2, 3, 5}, {a, b}, {1, 1})},
                     kProducts);
}

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }
void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

struct ConvCase {
  const char* name;
  int64_t n, c, h, w, o, kh, kw;
  Conv2dOptions options;
};

class Conv2dAgreement : public testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dAgreement, ForwardAndGradients) {
  const ConvCase& c = GetParam();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor x = check.random(dtype, {c.n, c.c, c.h, c.w}, -1, 1);
    const Tensor w = check.random(dtype, {c.o, c.c / c.options.groups, c.kh, c.kw}, -1, 1);
    const Tensor bias = check.random(dtype, {c.o}, -1, 1);
    std::vector<Tensor> results = {conv2d(x, w, bias, c.options)};
    if (dtype == DType::kFloat32) {  // the gradients are conv2d again, with other attributes
      x.requires_grad_();
      w.requires_grad_();
      const Tensor y = conv2d(x, w, {}, c.options);
      sum(y * check.random(dtype, y.shape(), -1, 1)).backward();
      results.push_back(x.grad());
      results.push_back(w.grad());
    }
    check.expect_agree(results, dtype == DType::kFloat32 ? std::optional(kProducts) : std::nullopt);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dAgreement,
    testing::Values(
        ConvCase{"plain", 2, 3, 7, 9, 4, 3, 3, {}},
        ConvCase{"strided_padded_grouped", 1, 4, 8, 7, 6, 3, 2, {{2, 1}, {1, 2}, {1, 1}, 2}},
        ConvCase{"dilated_groups_of_two", 2, 6, 9, 9, 3, 3, 3, {{1, 2}, {2, 1}, {2, 1}, 3}},
        ConvCase{"one_by_one", 1, 2, 5, 5, 4, 1, 1, {}},
        ConvCase{"kernel_wider_than_output", 2, 3, 4, 4, 5, 3, 3, {}},
        ConvCase{"fewer_outputs_than_inputs", 1, 8, 6, 7, 2, 3, 3, {{1, 1}, {1, 1}}}),
    [](const testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

// ---- Attention ---------------------------------------------------------------------------------

// The fused attention node and its backward node: causal, bool and added masks, k and v shared
// by the batch, sizes crossing the kernels' 64-row blocks.
TEST(AttentionAgreement, ForwardAndGradients) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor q = check.random(dtype, {2, 2, 70, 8}, -1, 1);
    const Tensor k = check.random(dtype, {2, 66, 8}, -1, 1);
    const Tensor v = check.random(dtype, {2, 66, 4}, -1, 1);
    const Tensor keep = check.random(DType::kBool, {70, 66});
    const Tensor keep_first = logical_or(keep, lt(arange(0, 66), 1.0));  // no row all dropped
    const Tensor added = check.random(dtype, {2, 1, 66}, -1, 1);
    std::vector<Tensor> results = {nn::scaled_dot_product_attention(q, k, v),
                                   nn::scaled_dot_product_attention(q, k, v, keep_first),
                                   nn::scaled_dot_product_attention(q, k, v, added)};
    for (const Tensor& t : {q, k, v}) t.requires_grad_();
    const Tensor y = nn::scaled_dot_product_attention(q, k, v, {}, true, 0.6);
    sum(y * check.random(dtype, y.shape(), -1, 1)).backward();
    results.push_back(y);
    for (const Tensor& t : {q, k, v}) results.push_back(t.grad());
    check.expect_agree(results, dtype == DType::kFloat32 ? std::optional(kProducts) : std::nullopt);
  }
}

// ---- Pooling ---------------------------------------------------------------------------------

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

struct PoolCase {
  const char* name;
  bool is_max;
  int64_t h, w;
  Pool2dOptions options;
};

class PoolAgreement : public testing::TestWithParam<PoolCase> {};

void PrintTo(const PoolCase& c, std::ostream* os) { *os << c.name; }

TEST_P(PoolAgreement, ForwardAndGradients) {
  const PoolCase& c = GetParam();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    // Small integers make ties, which decide where a max-pool gradient goes; bf16 is a cast of
    // the f32 leaf, whose gradient passes through the bf16 pooling gradient.
    const Tensor leaf = check.integers(dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32,
                                       {2, 3, c.h, c.w}, -3, 3);
    leaf.requires_grad_();
    const Tensor x = dtype == DType::kBFloat16 ? cast(leaf, dtype) : leaf;
    auto pool = [&](const Tensor& t) {
      return c.is_max ? max_pool2d(t, c.options) : avg_pool2d(t, c.options);
    };
    const Tensor y = pool(x);
    sum(y * check.random(dtype, y.shape(), -1, 1)).backward();
    // The f32 leaf's gradient carries the bf16 gradient's rounding: bf16 tolerance for all.
    check.expect_agree({y, leaf.grad(), pool(check.random(dtype, {1, 2, c.h, c.w}, -3, 3, true))},
                       default_tolerance(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Windows, PoolAgreement,
    testing::Values(
        PoolCase{"max_2x2_odd_sizes", true, 7, 9, {{2}}},
        PoolCase{"max_overlapping", true, 6, 6, {{3}, {1}}},
        PoolCase{"max_padded_dilated_ceil", true, 7, 8, {{3, 2}, {2, 2}, {1, 1}, {1, 2}, true}},
        PoolCase{"max_padded_dilated", true, 5, 9, {{3}, {2}, {1}, {2}, false}},
        PoolCase{"max_ceil", true, 8, 5, {{2}, {3}, {0}, {1}, true}},
        PoolCase{"avg_2x2_odd_sizes", false, 7, 9, {{2}}},
        PoolCase{"avg_padded_counted", false, 7, 8, {{3}, {2}, {1}, {1, 1}, false, true}},
        PoolCase{"avg_padded_uncounted", false, 7, 8, {{3}, {2}, {1}, {1, 1}, false, false}},
        PoolCase{"avg_ceil_counted", false, 8, 5, {{3, 2}, {2, 3}, {1, 1}, {1, 1}, true, true}},
        PoolCase{"avg_ceil_uncounted", false, 8, 5, {{2}, {3}, {0}, {1, 1}, true, false}}),
    [](const testing::TestParamInfo<PoolCase>& info) { return std::string(info.param.name); });

// ---- Data movement ---------------------------------------------------------------------------

TEST(DataMovementAgreement, ShapesPermutationsSlicesAndConcatenation) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor x = check.random(dtype, {3, 4, 5}, -50, 50, true);
    std::vector<Tensor> results = {reshape(x, {5, -1}), flatten(x, 1), unsqueeze(x, 3),
                                   squeeze(unsqueeze(x, 0), 0), transpose(x, 0, 2)};
    for (const std::vector<int64_t>& perm :
         std::vector<std::vector<int64_t>>{{0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}) {
      results.push_back(permute(x, perm));
    }
    results.push_back(permute(check.random(dtype, {2, 3, 4, 5}, -9, 9), {0, 2, 3, 1}));
    results.push_back(expand(check.random(dtype, {3, 1}, -9, 9), {2, 3, 4}));
    results.push_back(expand(check.random(dtype, {}, -9, 9), {2, 2}));
    results.push_back(slice(x, 0, 1, 3));
    results.push_back(slice(x, 1, -3, 100, 2));
    results.push_back(slice(x, 2, 0, 5, 3));
    results.push_back(slice(x, 2, 4, 2));  // empty
    const Tensor y = check.random(dtype, {3, 2, 5}, -9, 9);
    results.push_back(cat({x, y, slice(x, 1, 0, 0)}, 1));
    results.push_back(cat({x, x}, 0));
    results.push_back(cat({x, check.random(dtype, {3, 4, 1}, -9, 9)}, -1));
    results.push_back(stack({y, y, y}, 1));
    check.expect_agree(results, kExact);
  }
}

TEST(DataMovementAgreement, IndexingOps) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Agreement check;
    const Tensor x = check.random(dtype, {3, 4, 5}, -50, 50, true);
    std::vector<Tensor> results = {
        index_select(x, 0, check.input<int64_t>({2, 0, 2, 1}, {4})),
        index_select(x, 1, check.input<int32_t>({3}, {1})),
        index_select(x, 2, check.input<int64_t>({}, {0})),
        index_select(check.random(dtype, {}, -9, 9), 0, check.input<int64_t>({0}, {1})),
        gather(x, 0, check.random(DType::kInt64, {2, 3, 5}, 0, 2)),
        gather(x, 1, check.random(DType::kInt32, {3, 6, 2}, 0, 3)),
        gather(x, 2, check.random(DType::kInt64, {1, 4, 7}, 0, 4))};
    if (dtype != DType::kBool) {  // pred cannot be added to
      const Tensor index = check.random(DType::kInt64, {3, 6, 5}, 0, 3);
      results.push_back(scatter_add(x, 1, index, check.random(dtype, {3, 6, 5}, -9, 9)));
      results.push_back(scatter_add(x, 0, check.random(DType::kInt32, {7, 2, 2}, 0, 2),
                                    check.random(dtype, {7, 2, 2}, -9, 9)));
    }
    check.expect_agree(results, dtype == DType::kBFloat16 ? std::nullopt : std::optional(kExact));
  }
  Agreement check;
  check.expect_agree({one_hot(check.random(DType::kInt64, {5}, 0, 3), 4),
                      one_hot(check.random(DType::kInt32, {2, 3}, 0, 6), 7),
                      one_hot(check.input<int64_t>({2}, {}), 3)});
}

TEST(DataMovementAgreement, AnIndexOutOfRangeFailsInBoth) {
  Agreement check;
  const Tensor result =
      index_select(check.random(DType::kFloat32, {3, 2}), 0, check.input<int64_t>({1, 3}, {2}));
  EXPECT_THROW((void)check.both({result}), std::invalid_argument);  // the reference
  EXPECT_THROW((void)result.cpu(), std::exception);                 // the device
}

// ---- Random ----------------------------------------------------------------------------------

struct Moments {
  double low = kInf, high = -kInf, mean = 0, variance = 0;
};

Moments moments_of(const CpuTensor& t) {
  const auto v = t.values<double>();
  Moments m;
  for (double x : v) {
    m.low = std::min(m.low, x);
    m.high = std::max(m.high, x);
    m.mean += x / static_cast<double>(v.size());
  }
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean) / static_cast<double>(v.size());
  return m;
}

TEST(RandomAgreement, SameRangesDTypesAndDistributions) {
  Agreement check;
  const Tensor p = check.random(DType::kFloat32, {8000}, 0, 1);
  const std::vector<Tensor> results = {rand({8000}),
                                       rand({8000}, DType::kFloat64),
                                       rand({8000}, DType::kBFloat16),
                                       randn({8000}),
                                       randn({8000}, DType::kFloat64),
                                       randint(-3, 5, {8000}, DType::kInt32),
                                       randint(10, 1000, {8000}),
                                       randint(0, 2, {8000}, DType::kBool),
                                       bernoulli({8000}, 0.3),
                                       bernoulli(p)};
  // Expected [low, high], mean and variance of each distribution.
  const double uniform_var = 1.0 / 12;
  const std::vector<Moments> expected = {{0, 1, 0.5, uniform_var},
                                         {0, 1, 0.5, uniform_var},
                                         {0, 1, 0.5, uniform_var},
                                         {-6, 6, 0, 1},
                                         {-6, 6, 0, 1},
                                         {-3, 4, 0.5, (64.0 - 1) / 12},
                                         {10, 999, 504.5, (990.0 * 990 - 1) / 12},
                                         {0, 1, 0.5, 0.25},
                                         {0, 1, 0.3, 0.21},
                                         {0, 1, 0.5, 0.25}};
  const auto values = check.both(results);
  for (std::size_t i = 0; i < values.size(); ++i) {
    SCOPED_TRACE("random result " + std::to_string(i));
    const auto& [reference, device] = values[i];
    ASSERT_EQ(reference.dtype, device.dtype);
    ASSERT_EQ(reference.shape, device.shape);
    for (const CpuTensor* t : {&reference, &device}) {
      const Moments m = moments_of(*t);
      const Moments& want = expected[i];
      EXPECT_GE(m.low, want.low);
      EXPECT_LE(m.high, want.high);
      if (i < 3) {
        EXPECT_LT(m.high, 1.0);  // uniform draws never reach high
      }
      const double spread = std::sqrt(want.variance / 8000);
      EXPECT_NEAR(m.mean, want.mean, 5 * spread + 1e-3);
      EXPECT_NEAR(m.variance, want.variance, 0.08 * want.variance);
    }
  }
}

// ---- Collectives -----------------------------------------------------------------------------

TEST(CollectiveAgreement, AsAGroupOfOne) {
  Agreement check;
  const Tensor f = check.random(DType::kFloat32, {4, 6}, -5, 5, true);
  const Tensor i = check.random(DType::kInt32, {7}, -50, 50);
  const Tensor b = check.random(DType::kBool, {5});
  const std::vector<Tensor> reduced = all_reduce(
      ReduceType::kSum, std::vector<Tensor>{f, check.random(DType::kFloat32, {3})}, 0.25);
  check.expect_agree({all_reduce(ReduceType::kSum, f, 0.5), all_reduce(ReduceType::kMax, i, 2.5),
                      all_reduce(ReduceType::kMul, i), all_reduce(ReduceType::kOr, b, 3.0),
                      reduced[0], reduced[1], all_gather(f, 1), all_gather(i, 0),
                      reduce_scatter(ReduceType::kSum, f, 0.125, 0, 1),
                      reduce_scatter(ReduceType::kMin, i, 1.0, 0, 1), all_to_all(f, 0, 1, 1),
                      collective_permute(f, {{0, 0}}), collective_permute(i, {})});
}

// ---- Whole steps -----------------------------------------------------------------------------

TEST(StepAgreement, AnMlpAndACnnTrainingStep) {
  Agreement check(7);
  const Tensor x = check.random(DType::kFloat32, {8, 1, 9, 9}, -1, 1);
  const Tensor labels = check.random(DType::kInt64, {8}, 0, 4);
  const Tensor conv_w = check.random(DType::kFloat32, {4, 1, 3, 3}, -0.5, 0.5);
  const Tensor w1 = check.random(DType::kFloat32, {16, 100}, -0.3, 0.3);
  const Tensor b1 = check.random(DType::kFloat32, {16}, -0.1, 0.1);
  const Tensor w2 = check.random(DType::kFloat32, {5, 16}, -0.3, 0.3);
  for (const Tensor& p : {conv_w, w1, b1, w2}) p.requires_grad_();
  Tensor h = relu(conv2d(x, conv_w, {}, {{1, 1}, {1, 1}}));
  h = avg_pool2d(max_pool2d(h, {{2}, {1}}), {{2}, {2}, {1}, {1, 1}, false, false});  // [8,4,5,5]
  h = gelu(linear(flatten(h, 1), w1, b1));
  const Tensor logits = linear(h, w2);
  const Tensor picked = gather(log_softmax(logits, 1), 1, unsqueeze(labels, 1));
  const Tensor loss = neg(mean(picked));
  loss.backward();
  std::vector<Tensor> results = {loss};
  for (const Tensor& p : {conv_w, w1, b1, w2}) results.push_back(p - p.grad() * 0.1);
  check.expect_agree(results, kProducts);
}

// ---- Storage dtypes --------------------------------------------------------------------------

class Bf16StorageAgreement : public testing::Test {
 protected:
  void SetUp() override {
    config::set("XLA_USE_BF16", "1");
    ops::reload_dtype_config();
    LazySystem::restart();
  }
  void TearDown() override {
    config::unset("XLA_USE_BF16");
    ops::reload_dtype_config();
    LazySystem::restart();
  }
};

TEST_F(Bf16StorageAgreement, F32AndF64AreComputedInBf16) {
  Agreement check;
  const Tensor a = check.random(DType::kFloat32, {4, 6}, -2, 2, true);
  const Tensor b = check.random(DType::kFloat64, {6}, -2, 2);
  const Tensor w = check.random(DType::kFloat32, {6, 3}, -1, 1);
  ASSERT_EQ(a.impl()->value_node({})->dtype(), DType::kBFloat16);
  check.expect_agree({a * b + 1.5, exp(a), sum(a, {1}), matmul(a, w), softmax(a, 0),
                      cast(a, DType::kInt32), gt(a, b), where(gt(a, 0.0), a, b),
                      cast(check.random(DType::kInt64, {5}, -300, 300), DType::kFloat32)});
}

}  // namespace
}  // namespace axle
