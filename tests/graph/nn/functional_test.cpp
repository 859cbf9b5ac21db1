// graph/nn/functional.h end to end: embedding, layer_norm, dropout and
// scaled_dot_product_attention against double-precision loops written here from torch's
// definitions, their gradients against finite differences, and the errors for arguments that do
// not fit (each naming the function and the caller's line).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
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
  EXPECT_EQ(f32.dtype(), DType::kF32);
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
  auto flat_table = [&] { (void)nn::embedding(zeros({2}, DType::kI64), zeros({5})); };
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
}

}  // namespace
}  // namespace axle::testing
