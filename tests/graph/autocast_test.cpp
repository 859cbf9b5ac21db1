// Tests graph/autocast.h on each runtime (tests/graph/test_runtime.h): inside a region, matmul,
// linear and conv2d give bf16 results equal to a double product of the bf16-rounded operands up
// to f32 accumulation and one final bf16 rounding; ops on the f32 list give f32, the bits of the
// same op on the operand cast to f32; other ops follow type promotion; regions nest and disable;
// gradients of f32 parameters are f32 and near the f32 run's; a small MLP trains in a region.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/graph/autocast.h"
#include "axle/graph/nn/functional.h"
#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// bf16's unit roundoff: 8 significant bits, so rounding to nearest errs by at most 2^-8 relative.
constexpr double kBf16Roundoff = 1.0 / 256;
// f32's unit roundoff.
constexpr double kF32Roundoff = 1.0 / (1 << 24);

Ref rounded_to_bf16(Ref x) {
  for (double& v : x.values) v = to_bf16(static_cast<float>(v));
  return x;
}

// Checks a bf16 product against `want`, the exact (double) product of the bf16-rounded
// operands, whose terms' magnitudes sum to `scale`. An f32 sum of k terms errs by at most
// k·u32·scale; rounding that to bf16 adds u16 of the result. A sum kept in bf16 would err by
// about u16 per addition, far outside this bound for the contraction lengths used here.
::testing::AssertionResult bf16_product_matches(const Tensor& t, const Ref& want,
                                                const std::vector<double>& scale, int64_t k) {
  if (t.dtype() != DType::kBFloat16) {
    return ::testing::AssertionFailure() << "dtype is " << dtype_name(t.dtype()) << ", not bf16";
  }
  if (!(t.shape() == shape_of(want.dims))) {
    return ::testing::AssertionFailure() << "shape is " << t.shape().to_string();
  }
  const std::vector<double> got = t.to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double accumulation = static_cast<double>(k + 1) * kF32Roundoff * scale[i];
    const double bound =
        kBf16Roundoff * std::abs(want.values[i]) + accumulation * (1 + kBf16Roundoff);
    if (std::abs(got[i] - want.values[i]) > bound) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want.values[i] << " (bound " << bound << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// matmul_ref (tests/graph/ops/reference.h): torch.matmul in double, with the sums of |terms|.

Ref transposed(const Ref& x) {
  Ref t{{x.dims[1], x.dims[0]}, {}};
  for (int64_t j = 0; j < x.dims[1]; ++j) {
    for (int64_t i = 0; i < x.dims[0]; ++i) t.values.push_back(x.values[i * x.dims[1] + j]);
  }
  return t;
}

class Autocast : public OpsValue {};

TEST_F(Autocast, MatmulRunsInBf16WithF32Accumulation) {
  std::mt19937 rng(1);
  const int64_t k = 384;
  const Ref a = random_ref(rng, {7, k}, -1, 1), b = random_ref(rng, {k, 5}, -1, 1);
  std::vector<double> scale;
  const Ref want = matmul_ref(rounded_to_bf16(a), rounded_to_bf16(b), scale);
  Tensor product;
  {
    autocast region(Device{}, DType::kBFloat16);
    product = matmul(on_device(a), on_device(b));
  }
  EXPECT_TRUE(bf16_product_matches(product, want, scale, k));
}

TEST_F(Autocast, LinearCastsInputWeightAndBias) {
  std::mt19937 rng(2);
  const int64_t k = 300;
  const Ref x = random_ref(rng, {6, k}, -1, 1), w = random_ref(rng, {4, k}, -1, 1);
  const Ref bias = random_ref(rng, {4}, -1, 1);
  std::vector<double> scale;
  const Ref want = matmul_ref(rounded_to_bf16(x), transposed(rounded_to_bf16(w)), scale);
  autocast region;
  const Tensor product = linear(on_device(x), on_device(w));
  EXPECT_TRUE(bf16_product_matches(product, want, scale, k));
  // The bias is cast to bf16 too and added to the product. The device rounds the f32 sum plus
  // the bias once, as torch's addmm under autocast does (lowering folds the add into the
  // product); the reference evaluator rounds the product, then the sum. Either is within the
  // product's error and two roundings of the exact result; a bias left out is not.
  const Tensor out = linear(on_device(x), on_device(w), on_device(bias));
  EXPECT_EQ(out.dtype(), DType::kBFloat16);
  const Ref bias_bf16 = rounded_to_bf16(bias);
  const std::vector<double> got = out.to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double exact = want.values[i] + bias_bf16.values[i % 4];
    const double bound = kBf16Roundoff * (std::abs(want.values[i]) + std::abs(exact)) +
                         static_cast<double>(k + 2) * kF32Roundoff * (scale[i] + 1) * 2;
    EXPECT_LE(std::abs(got[i] - exact), bound) << "element " << i;
  }
}

TEST_F(Autocast, BatchedAndVectorMatmulAreBf16) {
  std::mt19937 rng(3);
  const Tensor a = on_device(random_ref(rng, {2, 3, 8}, -1, 1));
  const Tensor b = on_device(random_ref(rng, {8, 4}, -1, 1));
  const Tensor v = on_device(random_ref(rng, {8}, -1, 1));
  autocast region;
  EXPECT_EQ(matmul(a, b).dtype(), DType::kBFloat16);
  EXPECT_EQ(matmul(a, v).dtype(), DType::kBFloat16);
  EXPECT_EQ(matmul(a, v).shape(), Shape({2, 3}));
}

TEST_F(Autocast, Conv2dRunsInBf16WithF32Accumulation) {
  std::mt19937 rng(4);
  const Ref x = random_ref(rng, {2, 16, 7, 7}, -1, 1), w = random_ref(rng, {3, 16, 3, 3}, -1, 1);
  const Ref x16 = rounded_to_bf16(x), w16 = rounded_to_bf16(w);
  const int64_t oh = 5, ow = 5, taps = 16 * 9;
  Ref want{{2, 3, oh, ow}, {}};
  std::vector<double> scale;
  for_each_index(want.dims, [&](const Dims& i) {
    double acc = 0, magnitude = 0;
    for (int64_t c = 0; c < 16; ++c) {
      for (int64_t ky = 0; ky < 3; ++ky) {
        for (int64_t kx = 0; kx < 3; ++kx) {
          const double term = at(x16, {i[0], c, i[2] + ky, i[3] + kx}) * at(w16, {i[1], c, ky, kx});
          acc += term;
          magnitude += std::abs(term);
        }
      }
    }
    want.values.push_back(acc);
    scale.push_back(magnitude);
  });
  Tensor out;
  {
    autocast region;
    out = conv2d(on_device(x), on_device(w));
  }
  EXPECT_TRUE(bf16_product_matches(out, want, scale, taps));
}

TEST_F(Autocast, ReluAndMaxPoolAreOnTheLowerPrecisionList) {
  std::mt19937 rng(5);
  const Tensor x = on_device(random_ref(rng, {1, 2, 4, 4}, -1, 1));
  autocast region;
  EXPECT_EQ(relu(x).dtype(), DType::kBFloat16);
  EXPECT_EQ(max_pool2d(x, {.kernel_size = {2}}).dtype(), DType::kBFloat16);
}

// Each op of the f32 list, in a region, on a bf16 operand: f32, with the bits of the same op on
// the operand cast to f32 outside any region.
TEST_F(Autocast, F32ListOpsComputeInF32) {
  std::mt19937 rng(6);
  const Tensor x = on_device(random_ref(rng, {4, 6}, 0.1, 2), DType::kBFloat16);
  const Tensor y = on_device(random_ref(rng, {4, 6}, 0.1, 2), DType::kBFloat16);
  const Tensor target = tensor(std::vector<int64_t>{0, 5, 2, 3}, Shape{4});
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
  };
  const std::vector<Case> cases = {
      {"softmax", [](const Tensor& t) { return softmax(t, 1); }},
      {"log_softmax", [](const Tensor& t) { return log_softmax(t, -1); }},
      {"logsumexp", [](const Tensor& t) { return logsumexp(t, {1}); }},
      {"sum", [](const Tensor& t) { return sum(t); }},
      {"cumsum", [](const Tensor& t) { return cumsum(t, 1); }},
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"pow", [](const Tensor& t) { return pow(t, 3.0); }},
      {"pow tensor", [&](const Tensor& t) { return pow(t, y); }},
      {"layer_norm", [](const Tensor& t) { return nn::layer_norm(t, {6}); }},
      {"cross_entropy", [&](const Tensor& t) { return nn::cross_entropy(t, target); }},
      {"nll_loss", [&](const Tensor& t) { return nn::nll_loss(t, target); }},
      {"mse_loss", [&](const Tensor& t) { return nn::mse_loss(t, y); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor amp;
    {
      autocast region;
      amp = c.op(x);
    }
    ASSERT_EQ(amp.dtype(), DType::kFloat32);
    Tensor plain;
    {
      // mse_loss and pow read y too: the f32 run casts both, as the region does.
      const Tensor x32 = cast(x, DType::kFloat32);
      if (std::string(c.name) == "mse_loss") {
        plain = nn::mse_loss(x32, cast(y, DType::kFloat32));
      } else if (std::string(c.name) == "pow tensor") {
        plain = pow(x32, cast(y, DType::kFloat32));
      } else {
        plain = c.op(x32);
      }
    }
    EXPECT_EQ(amp.to_vector<float>(), plain.to_vector<float>());
    // Outside a region the same op keeps bf16.
    if (std::string(c.name) != "cross_entropy" && std::string(c.name) != "nll_loss" &&
        std::string(c.name) != "mse_loss" && std::string(c.name) != "pow tensor") {
      EXPECT_EQ(c.op(x).dtype(), DType::kBFloat16);
    }
  }
}

TEST_F(Autocast, OtherOpsFollowTypePromotion) {
  std::mt19937 rng(7);
  const Tensor h = on_device(random_ref(rng, {3, 5}, -1, 1), DType::kBFloat16);
  const Tensor f = on_device(random_ref(rng, {3, 5}, -1, 1));
  const Tensor d = on_device(random_ref(rng, {5, 2}, -1, 1), DType::kFloat64);
  autocast region;
  EXPECT_EQ(add(h, f).dtype(), DType::kFloat32);  // bf16 with f32 gives f32
  EXPECT_EQ(mul(h, 2.0).dtype(), DType::kBFloat16);
  EXPECT_EQ(gelu(h).dtype(), DType::kBFloat16);
  EXPECT_EQ(tanh(f).dtype(), DType::kFloat32);
  EXPECT_EQ(mean(h).dtype(), DType::kBFloat16);
  EXPECT_EQ(var(h, {1}).dtype(), DType::kBFloat16);  // one op in torch: its inner sum is not upcast
  EXPECT_EQ(cat({h, f}, 0).dtype(), DType::kFloat32);
  EXPECT_EQ(matmul(d, transpose(d, 0, 1)).dtype(), DType::kFloat64);  // f64 is never cast
  // f32 → bf16, and a product never promotes: bf16 with f64 fails, as in torch.
  EXPECT_THROW((void)matmul(f, d), ShapeError);
}

TEST_F(Autocast, RegionsNestAndDisable) {
  const Tensor a = ones({2, 3}), b = ones({3, 2});
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), DType::kFloat32);
  {
    autocast outer(Device{}, DType::kBFloat16);
    EXPECT_TRUE(is_autocast_enabled());
    EXPECT_EQ(get_autocast_dtype(), DType::kBFloat16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::kBFloat16);
    {
      autocast off(Device{}, DType::kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(is_autocast_enabled());
      EXPECT_EQ(matmul(a, b).dtype(), DType::kFloat32);
      {
        autocast again;
        EXPECT_EQ(matmul(a, b).dtype(), DType::kBFloat16);
      }
      EXPECT_EQ(matmul(a, b).dtype(), DType::kFloat32);
    }
    EXPECT_TRUE(is_autocast_enabled());
    EXPECT_EQ(matmul(a, b).dtype(), DType::kBFloat16);
  }
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), DType::kFloat32);
  set_autocast_enabled(true);
  EXPECT_EQ(matmul(a, b).dtype(), DType::kBFloat16);
  set_autocast_enabled(false);
  EXPECT_EQ(matmul(a, b).dtype(), DType::kFloat32);
}

TEST_F(Autocast, RejectsADtypeItCannotRunIn) {
  try {
    autocast region(Device{}, DType::kFloat64);
    FAIL() << "autocast accepted f64";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("autocast: dtype f64"), std::string::npos) << what;
    EXPECT_NE(what.find("autocast_test.cpp"), std::string::npos) << what;
  }
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_THROW(set_autocast_dtype(DType::kFloat32), std::invalid_argument);
  autocast disabled(Device{}, DType::kFloat32, /*enabled=*/false);  // a disabled region takes any
  EXPECT_FALSE(is_autocast_enabled());
}

// A two-layer MLP's loss and parameter gradients, forward pass in a region or not.
struct MlpRun {
  Tensor loss;
  std::vector<Tensor> grads;
};

MlpRun mlp_run(const std::vector<Ref>& params, const Ref& x, const Tensor& target, bool amp,
               bool backward_in_region) {
  std::vector<Tensor> p;
  for (const Ref& r : params) p.push_back(on_device(r).requires_grad_());
  MlpRun run;
  {
    autocast region(Device{}, DType::kBFloat16, amp);
    const Tensor hidden = relu(linear(on_device(x), p[0], p[1]));
    run.loss = nn::cross_entropy(linear(hidden, p[2], p[3]), target);
    if (backward_in_region) run.loss.backward();
  }
  if (!backward_in_region) run.loss.backward();
  for (const Tensor& t : p) run.grads.push_back(t.grad());
  return run;
}

double norm_of(const std::vector<float>& v) {
  double s = 0;
  for (float e : v) s += static_cast<double>(e) * e;
  return std::sqrt(s);
}

// Every value on a gradient's path is rounded to bf16 at most four times (operand casts, the
// forward product, the backward product), each time by at most u16 = 2^-8 relative; to first
// order the errors add, so each gradient is within 4·u16 of the f32 run's, norm-wise. The
// bound is 8·u16 = 2^-5 (a factor 2 for the f32 ops between them); an f32-free run would pass it
// too, but the gradients must also differ from the f32 run's, or autocast did nothing.
TEST_F(Autocast, ParameterGradientsAreF32AndNearTheF32Run) {
  std::mt19937 rng(8);
  const std::vector<Ref> params = {
      random_ref(rng, {32, 24}, -0.3, 0.3), random_ref(rng, {32}, -0.1, 0.1),
      random_ref(rng, {10, 32}, -0.3, 0.3), random_ref(rng, {10}, -0.1, 0.1)};
  const Ref x = random_ref(rng, {16, 24}, -1, 1);
  const Tensor target = on_device(random_ints(rng, {16}, 0, 9), DType::kInt64);
  const MlpRun f32 = mlp_run(params, x, target, false, false);
  const MlpRun amp = mlp_run(params, x, target, true, false);
  const MlpRun amp_inside = mlp_run(params, x, target, true, true);
  EXPECT_EQ(amp.loss.dtype(), DType::kFloat32);
  const double bound = 8 * kBf16Roundoff;
  EXPECT_NEAR(amp.loss.item(), f32.loss.item(), bound * std::abs(f32.loss.item()));
  for (std::size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(amp.grads[i].dtype(), DType::kFloat32);
    const std::vector<float> want = f32.grads[i].to_vector<float>();
    const std::vector<float> got = amp.grads[i].to_vector<float>();
    std::vector<float> diff(want.size());
    for (std::size_t j = 0; j < want.size(); ++j) diff[j] = got[j] - want[j];
    EXPECT_LE(norm_of(diff), bound * norm_of(want));
    EXPECT_GT(norm_of(diff), 0.0);
    // backward() inside the region traces the same gradients.
    EXPECT_EQ(amp_inside.grads[i].to_vector<float>(), got);
  }
}

TEST_F(Autocast, SmallMlpTrainsInARegion) {
  std::mt19937 rng(9);
  // Two classes split by the sign of the features' sum.
  const Ref xr = random_ref(rng, {64, 8}, -1, 1);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 64; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 8; ++j) s += xr.values[i * 8 + j];
    labels.push_back(s > 0 ? 1 : 0);
  }
  const Tensor x = on_device(xr);
  const Tensor y = tensor(labels, Shape{64});
  std::vector<Tensor> p = {
      on_device(random_ref(rng, {16, 8}, -0.3, 0.3)).requires_grad_(), zeros({16}).requires_grad_(),
      on_device(random_ref(rng, {2, 16}, -0.3, 0.3)).requires_grad_(), zeros({2}).requires_grad_()};
  optim::SGD sgd(p, {.lr = 0.5});
  std::vector<double> losses;
  int64_t compiles_after_warmup = 0;
  for (int step = 0; step < 40; ++step) {
    sgd.zero_grad();
    Tensor loss;
    {
      autocast region;
      loss = nn::cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), y);
    }
    loss.backward();
    sgd.step();
    sync_step();
    losses.push_back(loss.item());
    for (const Tensor& t : p) ASSERT_EQ(t.dtype(), DType::kFloat32);
    // The casts are the same ops every step: once the optimizer's state exists (step 2), no step
    // compiles again.
    if (step == 4) compiles_after_warmup = counter_value("UncachedCompile").value_or(0);
  }
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << losses.front() << " -> " << losses.back();
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0), compiles_after_warmup);
}

}  // namespace
}  // namespace axle::testing
