// graph/nn/functional.h end to end: embedding, layer_norm, dropout and
// scaled_dot_product_attention against double-precision loops written here from torch's
// definitions, their gradients against finite differences, and the errors for arguments that do
// not fit (each naming the function and the caller's line).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "tests/graph/grad_check.h"
#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using Functional = NnTest;
using Args = const std::vector<Tensor>&;

// ---- embedding ---------------------------------------------------------------------------------

TEST_F(Functional, EmbeddingLooksUpRowsForIndicesOfAnyShape) {
  std::mt19937 rng(1);
  const std::vector<double> table = uniform_values(rng, 5 * 3);
  const std::vector<int64_t> index = {4, 0, 2, 2, 1, 4};
  for (const Shape& shape : {Shape{6}, Shape{2, 3}, Shape{3, 1, 2}}) {
    const Tensor out = nn::embedding(tensor(index, shape), f64_tensor(table, {5, 3}));
    Shape want = shape;
    want.push_back(3);
    EXPECT_EQ(out.shape(), want);
    std::vector<double> expected;
    for (int64_t i : index) {
      for (int64_t d = 0; d < 3; ++d) expected.push_back(table[i * 3 + d]);
    }
    EXPECT_TRUE(all_close(values(out), expected));
  }
  const Tensor one = nn::embedding(tensor(std::vector<int32_t>{3}, {}), f64_tensor(table, {5, 3}));
  EXPECT_EQ(one.shape(), Shape({3}));
  EXPECT_TRUE(all_close(values(one), {table[9], table[10], table[11]}));
}

TEST_F(Functional, EmbeddingGradientAddsIntoRepeatedRows) {
  std::mt19937 rng(2);
  const Tensor index = tensor(std::vector<int64_t>{1, 3, 1, 0, 1, 3}, {2, 3});
  EXPECT_TRUE(gradients_match([&](Args t) { return nn::embedding(index, t[0]); },
                              {random_arg(rng, {4, 2})}));
}

// ---- layer_norm --------------------------------------------------------------------------------

// Rows of `width` normalised with the biased variance, then scaled and shifted elementwise.
std::vector<double> layer_norm_ref(const std::vector<double>& x, int64_t width,
                                   const std::vector<double>& weight,
                                   const std::vector<double>& bias, double eps) {
  std::vector<double> out;
  for (std::size_t r = 0; r < x.size() / width; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < width; ++i) mean += x[r * width + i] / static_cast<double>(width);
    for (int64_t i = 0; i < width; ++i) {
      var += std::pow(x[r * width + i] - mean, 2) / static_cast<double>(width);
    }
    for (int64_t i = 0; i < width; ++i) {
      const double y = (x[r * width + i] - mean) / std::sqrt(var + eps);
      out.push_back(y * (weight.empty() ? 1 : weight[i]) + (bias.empty() ? 0 : bias[i]));
    }
  }
  return out;
}

TEST_F(Functional, LayerNormNormalisesTheTrailingDims) {
  std::mt19937 rng(3);
  const std::vector<double> x = uniform_values(rng, 2 * 3 * 4, -3, 5);
  const std::vector<double> w = uniform_values(rng, 12), b = uniform_values(rng, 12);
  const Tensor out = nn::layer_norm(f64_tensor(x, {2, 3, 4}), {3, 4}, f64_tensor(w, {3, 4}),
                                    f64_tensor(b, {3, 4}), 1e-3);
  EXPECT_TRUE(all_close(values(out), layer_norm_ref(x, 12, w, b, 1e-3), 1e-12, 1e-10));
  const Tensor bare = nn::layer_norm(f64_tensor(x, {2, 3, 4}), {4});
  EXPECT_TRUE(all_close(values(bare), layer_norm_ref(x, 4, {}, {}, 1e-5), 1e-12, 1e-10));
  const Tensor f32 = nn::layer_norm(f32_tensor(x, {6, 4}), {4}, f32_tensor({1, 2, 3, 4}, {4}));
  EXPECT_EQ(f32.dtype(), DType::kFloat32);
  EXPECT_TRUE(
      all_close(values(f32), layer_norm_ref(as_f32(x), 4, {1, 2, 3, 4}, {}, 1e-5), 1e-5, 1e-5));
}

TEST_F(Functional, LayerNormGradientsMatchFiniteDifferences) {
  std::mt19937 rng(4);
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        return nn::layer_norm(t[0], {2, 3}, t[1], t[2], 1e-3);
      },
      {random_arg(rng, {2, 2, 3}), random_arg(rng, {2, 3}), random_arg(rng, {2, 3})},
      {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-4}));
}

// ---- dropout -----------------------------------------------------------------------------------

TEST_F(Functional, DropoutIsTheIdentityOutOfTrainingAndAtPZero) {
  std::mt19937 rng(5);
  const std::vector<double> x = uniform_values(rng, 50);
  EXPECT_EQ(values(nn::dropout(f64_tensor(x, {50}), 0.5, false)), x);
  EXPECT_EQ(values(nn::dropout(f64_tensor(x, {50}), 0.0)), x);
  EXPECT_EQ(values(nn::dropout(f64_tensor(x, {50}), 1.0)), std::vector<double>(50, 0.0));
}

TEST_F(Functional, DropoutZeroesAboutPAndScalesTheRest) {
  std::mt19937 rng(6);
  constexpr int64_t n = 40000;
  constexpr double p = 0.3;
  const std::vector<double> x = uniform_values(rng, n, 1, 2);  // never 0
  const std::vector<double> y = values(nn::dropout(f64_tensor(x, {n}), p));
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(y[i], x[i] / (1 - p), 1e-12) << i;
    }
  }
  // Within 5 standard errors of p.
  EXPECT_NEAR(static_cast<double>(zeros) / n, p, 5 * std::sqrt(p * (1 - p) / n));
}

// ---- scaled_dot_product_attention --------------------------------------------------------------

// softmax(q k^T * scale + bias) v for each of `batch` independent problems; `bias` ([L, S],
// shared by the batch) is added, -inf where a bool mask drops a key.
std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, int64_t batch, int64_t L, int64_t S,
                                  int64_t E, int64_t Ev, double scale,
                                  const std::vector<double>& bias) {
  std::vector<double> out;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> scores(S);
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q[(b * L + i) * E + e] * k[(b * S + j) * E + e];
        scores[j] = dot * scale + (bias.empty() ? 0 : bias[i * S + j]);
        top = std::max(top, scores[j]);
      }
      double z = 0;
      for (double& s : scores) z += (s = std::exp(s - top));
      for (int64_t d = 0; d < Ev; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += scores[j] / z * v[(b * S + j) * Ev + d];
        out.push_back(acc);
      }
    }
  }
  return out;
}

struct Attention {
  int64_t batch = 2, L = 3, S = 4, E = 5, Ev = 2;
  std::vector<double> q, k, v;
  explicit Attention(unsigned seed, int64_t problems = 2) : batch(problems) {
    std::mt19937 rng(seed);
    q = uniform_values(rng, batch * L * E, -2, 2);
    k = uniform_values(rng, batch * S * E, -2, 2);
    v = uniform_values(rng, batch * S * Ev, -2, 2);
  }
  [[nodiscard]] Tensor query() const { return f64_tensor(q, {batch, L, E}); }
  [[nodiscard]] Tensor key() const { return f64_tensor(k, {batch, S, E}); }
  [[nodiscard]] Tensor value() const { return f64_tensor(v, {batch, S, Ev}); }
  [[nodiscard]] std::vector<double> ref(double scale, const std::vector<double>& bias) const {
    return attention_ref(q, k, v, batch, L, S, E, Ev, scale, bias);
  }
};

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

TEST_F(Functional, AttentionWithoutAMaskScalesByOneOverSqrtE) {
  const Attention a(7);
  const Tensor out = nn::scaled_dot_product_attention(a.query(), a.key(), a.value());
  EXPECT_EQ(out.shape(), Shape({a.batch, a.L, a.Ev}));
  EXPECT_TRUE(all_close(values(out), a.ref(1 / std::sqrt(5.0), {}), 1e-12, 1e-10));
  const Tensor scaled =
      nn::scaled_dot_product_attention(a.query(), a.key(), a.value(), {}, false, 0.7);
  EXPECT_TRUE(all_close(values(scaled), a.ref(0.7, {}), 1e-12, 1e-10));
}

TEST_F(Functional, AttentionTakesBoolAndFloatMasks) {
  const Attention a(8);
  // Each query keeps some keys (true = take part); the float mask is added as is.
  const std::vector<int64_t> keep = {1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1};
  std::vector<double> bias;
  for (int64_t m : keep) bias.push_back(m ? 0 : kMinusInf);
  const Tensor bool_mask = cast(tensor(keep, {3, 4}), DType::kBool);
  EXPECT_TRUE(
      all_close(values(nn::scaled_dot_product_attention(a.query(), a.key(), a.value(), bool_mask)),
                a.ref(1 / std::sqrt(5.0), bias), 1e-12, 1e-10));
  std::mt19937 rng(9);
  const std::vector<double> additive = uniform_values(rng, 12, -2, 2);
  EXPECT_TRUE(all_close(values(nn::scaled_dot_product_attention(a.query(), a.key(), a.value(),
                                                                f64_tensor(additive, {3, 4}))),
                        a.ref(1 / std::sqrt(5.0), additive), 1e-12, 1e-10));
}

TEST_F(Functional, CausalAttentionKeepsEarlierKeys) {
  const Attention a(10);
  std::vector<double> causal;
  for (int64_t i = 0; i < a.L; ++i) {
    for (int64_t j = 0; j < a.S; ++j) causal.push_back(j <= i ? 0 : kMinusInf);
  }
  EXPECT_TRUE(
      all_close(values(nn::scaled_dot_product_attention(a.query(), a.key(), a.value(), {}, true)),
                a.ref(1 / std::sqrt(5.0), causal), 1e-12, 1e-10));
}

// [batch, heads, L, E] as transformers call it: 2 x 3 problems, one causal mask for all.
TEST_F(Functional, AttentionOverBatchAndHeadDims) {
  const Attention a(12, 6);
  std::vector<double> causal;
  for (int64_t i = 0; i < a.L; ++i) {
    for (int64_t j = 0; j < a.S; ++j) causal.push_back(j <= i ? 0 : kMinusInf);
  }
  const Tensor q = f64_tensor(a.q, {2, 3, a.L, a.E}), k = f64_tensor(a.k, {2, 3, a.S, a.E});
  const Tensor v = f64_tensor(a.v, {2, 3, a.S, a.Ev});
  const Tensor out = nn::scaled_dot_product_attention(q, k, v, {}, true);
  EXPECT_EQ(out.shape(), Shape({2, 3, a.L, a.Ev}));
  EXPECT_TRUE(all_close(values(out), a.ref(1 / std::sqrt(5.0), causal), 1e-12, 1e-10));
  const Tensor keep =
      cast(tensor(std::vector<int64_t>{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0}, {3, 4}), DType::kBool);
  std::vector<double> bias;
  for (int64_t m : keep.to_vector<int64_t>()) bias.push_back(m ? 0 : kMinusInf);
  EXPECT_TRUE(all_close(values(nn::scaled_dot_product_attention(q, k, v, keep)),
                        a.ref(1 / std::sqrt(5.0), bias), 1e-12, 1e-10));
}

TEST_F(Functional, AttentionGradientsMatchFiniteDifferences) {
  std::mt19937 rng(11);
  const std::vector<GradArg> args = {random_arg(rng, {2, 3, 4}), random_arg(rng, {2, 5, 4}),
                                     random_arg(rng, {2, 5, 3})};
  EXPECT_TRUE(gradients_match(
      [](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2]); }, args));
  EXPECT_TRUE(gradients_match(
      [](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], {}, true); }, args));
  const Tensor mask =
      cast(tensor(std::vector<int64_t>{1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1}, {3, 5}),
           DType::kBool);
  EXPECT_TRUE(gradients_match(
      [&](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], mask, false, 0.4); },
      args));
}

// The fused op against torch's math path (matmul, masking, softmax, matmul), values and
// gradients, over broadcast batch dims and sizes crossing the fused kernels' 64-row blocks.
struct PathResults {
  std::vector<double> out, dq, dk, dv;
};

PathResults run_path(bool fused, const Tensor& q0, const Tensor& k0, const Tensor& v0,
                     const Tensor& mask, bool causal, std::optional<double> scale) {
  Tensor q = q0.detach(), k = k0.detach(), v = v0.detach();
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const Tensor out = fused ? nn::scaled_dot_product_attention(q, k, v, mask, causal, scale)
                           : nn::scaled_dot_product_attention_math(q, k, v, mask, causal, scale);
  std::mt19937 rng(77);
  const Tensor w = f64_tensor(uniform_values(rng, out.numel()), out.shape());
  sum(mul(out, cast(w, out.dtype()))).backward();
  return {values(out), values(q.grad()), values(k.grad()), values(v.grad())};
}

::testing::AssertionResult paths_agree(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& mask, bool causal, std::optional<double> scale,
                                       double tol) {
  const PathResults fused = run_path(true, q, k, v, mask, causal, scale);
  const PathResults math = run_path(false, q, k, v, mask, causal, scale);
  for (auto [name, a, b] :
       {std::tuple{"out", &fused.out, &math.out}, std::tuple{"dq", &fused.dq, &math.dq},
        std::tuple{"dk", &fused.dk, &math.dk}, std::tuple{"dv", &fused.dv, &math.dv}}) {
    ::testing::AssertionResult close = all_close(*a, *b, tol, tol);
    if (!close) return close << " (" << name << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST_F(Functional, FusedAttentionAgreesWithTheMathPath) {
  std::mt19937 rng(21);
  auto random = [&](const Shape& shape, DType dtype) {
    const Tensor t = f64_tensor(uniform_values(rng, shape.numel(), -2, 2), shape);
    return dtype == DType::kFloat64 ? t : cast(t, dtype);
  };
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = dtype == DType::kFloat64 ? 1e-11 : 2e-5;
    // [batch, heads] with k and v shared by the batch; L and S cross the 64-row blocks.
    const Tensor q = random({2, 3, 70, 8}, dtype), k = random({3, 90, 8}, dtype);
    const Tensor v = random({1, 3, 90, 5}, dtype);
    EXPECT_TRUE(paths_agree(q, k, v, {}, false, std::nullopt, tol));
    EXPECT_TRUE(paths_agree(q, k, v, {}, true, 0.5, tol));
    std::bernoulli_distribution coin(0.7);
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < 70 * 90; ++i) keep.push_back(i % 90 == 0 || coin(rng) ? 1 : 0);
    const Tensor bool_mask = cast(tensor(keep, {70, 90}), DType::kBool);
    EXPECT_TRUE(paths_agree(q, k, v, bool_mask, false, std::nullopt, tol));
    EXPECT_TRUE(paths_agree(q, k, v, random({2, 1, 70, 90}, dtype), false, std::nullopt, tol));
  }
}

TEST_F(Functional, FusedAttentionInBf16AccumulatesInF32) {
  std::mt19937 rng(22);
  // bf16 values, exact in f32 and f64.
  auto random = [&](const Shape& shape) {
    return cast(
        cast(f64_tensor(uniform_values(rng, shape.numel(), -2, 2), shape), DType::kBFloat16),
        DType::kFloat64);
  };
  const Tensor q = random({2, 70, 8}), k = random({2, 80, 8}), v = random({2, 80, 4});
  const Tensor out = nn::scaled_dot_product_attention(
      cast(q, DType::kBFloat16), cast(k, DType::kBFloat16), cast(v, DType::kBFloat16), {}, true);
  EXPECT_EQ(out.dtype(), DType::kBFloat16);
  // Sums in f32, then one rounding to bf16: within half a bf16 ulp (2^-9 relative). On
  // AVX512_BF16 the probabilities are rounded to bf16 before the value product too (as torch's
  // bf16 flash attention rounds them): at most 2^-9 of sum_j p_j |v_j| <= 2^-9 * 2 more.
  const std::vector<double> want = values(nn::scaled_dot_product_attention_math(q, k, v, {}, true));
  EXPECT_TRUE(all_close(values(cast(out, DType::kFloat64)), want, 1.0 / 256, 1.0 / 256));
}

// As torch's math path: softmax over only -inf is NaN.
TEST_F(Functional, AQueryThatKeepsNoKeyGivesNanAsTheMathPath) {
  const Attention a(23);
  const Tensor keep =
      cast(tensor(std::vector<int64_t>{1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1}, {3, 4}), DType::kBool);
  const std::vector<double> fused =
      values(nn::scaled_dot_product_attention(a.query(), a.key(), a.value(), keep));
  const std::vector<double> math =
      values(nn::scaled_dot_product_attention_math(a.query(), a.key(), a.value(), keep));
  ASSERT_EQ(fused.size(), math.size());
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const bool dropped_row = (i / 2) % 3 == 1;  // [batch, L = 3, Ev = 2]: query 1
    EXPECT_EQ(std::isnan(fused[i]), dropped_row) << i;
    EXPECT_EQ(std::isnan(math[i]), dropped_row) << i;
    if (!dropped_row) {
      EXPECT_NEAR(fused[i], math[i], 1e-12) << i;
    }
  }
}

TEST_F(Functional, FusedAttentionGradientsMatchFiniteDifferencesWhenBatchDimsBroadcast) {
  std::mt19937 rng(24);
  // q [2, 2, 3, 4] against k, v shared by the first dim; an added mask per head.
  const std::vector<GradArg> args = {random_arg(rng, {2, 2, 3, 4}), random_arg(rng, {2, 5, 4}),
                                     random_arg(rng, {1, 2, 5, 3})};
  const Tensor added = f64_tensor(uniform_values(rng, 10, -1, 1), {2, 1, 5});
  EXPECT_TRUE(gradients_match(
      [&](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], added); }, args));
  EXPECT_TRUE(gradients_match(
      [](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], {}, true, 0.8); },
      args));
}

// A float mask that requires grad takes the math path, whose gradient reaches the mask.
TEST_F(Functional, AttentionMaskThatRequiresGradGetsItsGradient) {
  std::mt19937 rng(25);
  const std::vector<GradArg> args = {random_arg(rng, {2, 3, 4}), random_arg(rng, {2, 5, 4}),
                                     random_arg(rng, {2, 5, 3}), random_arg(rng, {3, 5})};
  EXPECT_TRUE(gradients_match(
      [](Args t) { return nn::scaled_dot_product_attention(t[0], t[1], t[2], t[3]); }, args));
}

// ---- errors ------------------------------------------------------------------------------------

// The message of the ShapeError `f` throws; checks that it names `op` and `line` of this file.
template <class F>
std::string shape_error(F&& f, const char* op, int line) {
  const std::string what = error_message<ShapeError>(f);
  EXPECT_TRUE(contains(what, std::string(op) + ":")) << what;
  EXPECT_TRUE(contains(what, at_line(__FILE__, line))) << what;
  return what;
}

TEST_F(Functional, RejectArgumentsThatDoNotFitNamingTheCallersLine) {
  const Tensor table = zeros({5, 3});
  auto float_index = [&] { (void)nn::embedding(zeros({2}), table); };
  EXPECT_TRUE(contains(shape_error(float_index, "embedding", __LINE__ - 1), "f32[2]"));
  auto flat_table = [&] { (void)nn::embedding(zeros({2}, DType::kInt64), zeros({5})); };
  EXPECT_TRUE(contains(shape_error(flat_table, "embedding", __LINE__ - 1), "f32[5]"));
  auto wrong_dims = [&] { (void)nn::layer_norm(zeros({2, 3}), {4}); };
  EXPECT_TRUE(contains(shape_error(wrong_dims, "layer_norm", __LINE__ - 1), "[4]"));
  auto wrong_weight = [&] { (void)nn::layer_norm(zeros({2, 3}), {3}, zeros({2})); };
  EXPECT_TRUE(contains(shape_error(wrong_weight, "layer_norm", __LINE__ - 1), "f32[2]"));
  auto bad_p = [&] { (void)nn::dropout(zeros({2}), 1.5); };
  EXPECT_TRUE(contains(shape_error(bad_p, "dropout", __LINE__ - 1), "1.5"));
  // Attention: each call on the line after its lambda's, whatever the formatter does to the rest.
  const Tensor q = zeros({2, 3, 4}), k3 = zeros({2, 5, 3}), v5 = zeros({2, 5, 2});
  constexpr const char* kSdpa = "scaled_dot_product_attention";
  const int wrong_e_line = __LINE__ + 1;
  auto wrong_e = [&] { (void)nn::scaled_dot_product_attention(q, k3, v5); };
  EXPECT_TRUE(contains(shape_error(wrong_e, kSdpa, wrong_e_line), "f32[2,5,3]"));
  const Tensor k5 = zeros({2, 5, 4}), v6 = zeros({2, 6, 2});
  const int wrong_s_line = __LINE__ + 1;
  auto wrong_s = [&] { (void)nn::scaled_dot_product_attention(q, k5, v6); };
  EXPECT_TRUE(contains(shape_error(wrong_s, kSdpa, wrong_s_line), "f32[2,6,2]"));
  const Tensor square = ones({3, 3}, DType::kBool), narrow = zeros({3, 2}, DType::kBool);
  const int both_line = __LINE__ + 1;
  auto both = [&] { (void)nn::scaled_dot_product_attention(q, q, q, square, true); };
  EXPECT_TRUE(contains(shape_error(both, kSdpa, both_line), "is_causal"));
  const int bad_mask_line = __LINE__ + 1;
  auto bad_mask = [&] { (void)nn::scaled_dot_product_attention(q, q, q, narrow); };
  EXPECT_TRUE(contains(shape_error(bad_mask, kSdpa, bad_mask_line), "pred[3,2]"));
  const Tensor q3 = zeros({3, 3, 4}), v3 = zeros({2, 5, 2});
  const int batch_line = __LINE__ + 1;
  auto batch_dims = [&] { (void)nn::scaled_dot_product_attention(q3, k5, v3); };
  EXPECT_TRUE(contains(shape_error(batch_dims, kSdpa, batch_line), "f32[3,3,4], k f32[2,5,4]"));
}

}  // namespace
}  // namespace axle::testing
