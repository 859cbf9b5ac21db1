// backends/cpu kGeluBackward: grad times gelu's derivative against the formula in double, for
// both forms and every floating dtype; bf16 rounded once from f32; the same bits on any thread
// count; operands it cannot take are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "axle/backends/cpu/element.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

double gelu_derivative(double x, bool tanh_form) {
  if (tanh_form) {
    const double k = std::sqrt(2 / std::numbers::pi), c = 0.044715;
    const double t = std::tanh(k * (x + c * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
  }
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
  return 0.5 * (1 + std::erf(x / std::numbers::sqrt2)) + x * pdf;
}

class GeluBackward : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(GeluBackward, IsTheGradientTimesTheDerivative) {
  const auto [dtype, tanh_form] = GetParam();
  std::mt19937 rng(21);
  const Shape shape{3, 1100};  // more than one part and a ragged tail
  const HostTensor g = random_tensor(dtype, shape, rng, -3, 3);
  HostTensor x = random_tensor(dtype, shape, rng, -7, 7);
  x.values[0] = 0;
  x.values[1] = kNaN;
  std::vector<double> want(g.values.size()), scale(g.values.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double v = x.values[i];
    want[i] = g.values[i] * gelu_derivative(v, tanh_form);
    // For negative x the derivative is a difference of terms near 1/2 and x phi(x): rounding
    // errors scale with those terms, not with the small result.
    const double terms = 1 + std::abs(v) * std::exp(-0.5 * v * v);
    scale[i] = std::max(std::abs(g.values[i]) * terms, 1e-30);
  }
  const HostTensor got = run_kernel(Kernel::kGeluBackward, {g, x}, dtype, shape, {tanh_form});
  // bf16: rounded once from f32 (half a bf16 ulp, 2^-9) plus f32's few ulps.
  const double tol = dtype == DType::kBFloat16 ? 0x1p-8 : dtype == DType::kFloat32 ? 1e-6 : 1e-14;
  expect_values(got.values, want, tol, "gelu_backward", scale);
}

INSTANTIATE_TEST_SUITE_P(CpuGeluBackward, GeluBackward,
                         ::testing::Combine(::testing::ValuesIn(kFloats), ::testing::Bool()),
                         [](const auto& info) {
                           return label(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_tanh" : "_erf");
                         });

// bf16 operands are widened, computed in f32 and rounded once: the bf16 result is the f32
// kernel's on the same (bf16) values, rounded to bf16.
TEST(CpuGeluBackward, Bf16IsTheF32ResultRoundedOnce) {
  std::mt19937 rng(22);
  const Shape shape{4099};
  HostTensor g = random_tensor(DType::kBFloat16, shape, rng, -3, 3);
  HostTensor x = random_tensor(DType::kBFloat16, shape, rng, -5, 5);
  const HostTensor got = run_kernel(Kernel::kGeluBackward, {g, x}, DType::kBFloat16, shape, {0});
  g.dtype = x.dtype = DType::kFloat32;  // the same values, exactly representable
  const HostTensor f32 = run_kernel(Kernel::kGeluBackward, {g, x}, DType::kFloat32, shape, {0});
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    ASSERT_EQ(got.values[i], round_to(DType::kBFloat16, f32.values[i])) << "element " << i;
  }
}

TEST(CpuGeluBackward, EveryThreadCountGivesTheSameBits) {
  std::mt19937 rng(23);
  const Shape shape{70001};
  for (DType dtype : kFloats) {
    const HostTensor g = random_tensor(dtype, shape, rng, -3, 3);
    const HostTensor x = random_tensor(dtype, shape, rng, -5, 5);
    const HostTensor one = call_kernel_directly(Kernel::kGeluBackward, {g, x}, dtype, shape, {0});
    for (int threads : {2, 3}) {
      const HostTensor many =
          call_kernel_directly(Kernel::kGeluBackward, {g, x}, dtype, shape, {0}, threads);
      ASSERT_EQ(many.values, one.values) << label(dtype) << ", " << threads << " threads";
    }
  }
}

TEST(CpuGeluBackward, RefusesOperandsOfAnotherShapeOrDtype) {
  EXPECT_TRUE(contains(rejection(Kernel::kGeluBackward, {{4}, {1}}, {4}, {0}),
                       "gelu_backward: x is [1], the output [4]"));
  EXPECT_TRUE(contains(rejection(Kernel::kGeluBackward, {{4}}, {4}, {0}), "takes [grad, x]"));
  EXPECT_TRUE(contains(rejection(Kernel::kGeluBackward, {{4}, {4}}, {4}, {0}, DType::kInt32),
                       "gelu_backward is not defined for s32"));
}

}  // namespace
}  // namespace axle::testing
