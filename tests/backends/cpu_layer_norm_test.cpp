// backends/cpu kLayerNorm and kLayerNormBackward: each row's normalisation and its gradient
// against two-pass loops in double, over one and two trailing dims, in every floating dtype, on
// rows far from zero (where a one-pass variance loses its digits); every thread count gives the
// same bits; a folded weight and residual give the bits of their own calls; malformed calls are
// refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "axle/backends/cpu/isa.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

struct Expected {
  std::vector<double> xhat, dx;
};

// Rows of `width` values: xhat = (x - mean) rstd and dx = rstd (g - mean(g) - xhat mean(g xhat)).
Expected reference(const HostTensor& g, const HostTensor& x, int64_t width, double eps) {
  Expected e{std::vector<double>(x.values.size()), std::vector<double>(x.values.size())};
  for (std::size_t at = 0; at < x.values.size(); at += static_cast<std::size_t>(width)) {
    const auto n = static_cast<double>(width);
    double mean = 0, squares = 0, g_mean = 0, gx_mean = 0;
    for (int64_t i = 0; i < width; ++i) mean += x.values[at + i] / n;
    for (int64_t i = 0; i < width; ++i) squares += std::pow(x.values[at + i] - mean, 2);
    const double rstd = 1 / std::sqrt(squares / n + eps);
    for (int64_t i = 0; i < width; ++i) {
      e.xhat[at + i] = (x.values[at + i] - mean) * rstd;
      g_mean += g.values[at + i] / n;
      gx_mean += g.values[at + i] * e.xhat[at + i] / n;
    }
    for (int64_t i = 0; i < width; ++i) {
      e.dx[at + i] = rstd * (g.values[at + i] - g_mean - e.xhat[at + i] * gx_mean);
    }
  }
  return e;
}

class LayerNormRows : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(LayerNormRows, NormaliseAndDifferentiateEachRow) {
  const auto [dtype, k] = GetParam();
  std::mt19937 rng(41);
  // Rows of 3 × 37 or 37 values (a ragged tail after the vectors), 5 × 4 of them.
  const Shape shape{5, 4, 3, 37};
  const int64_t width = k == 2 ? 3 * 37 : 37;
  HostTensor x = random_tensor(dtype, shape, rng, -2, 2);
  for (std::size_t i = 0; i < x.values.size(); ++i) {
    if ((i / static_cast<std::size_t>(width)) % 3 == 0) {  // a third of the rows around 300
      x.values[i] = round_to(dtype, 300 + x.values[i] / 4);
    }
  }
  const HostTensor g = random_tensor(dtype, shape, rng, -1, 1);
  const double eps = 1e-5;
  const Expected want = reference(g, x, width, eps);
  const double tol = dtype == DType::kFloat64 ? 1e-12 : dtype == DType::kFloat32 ? 2e-5 : 2e-2;
  // Relative to the values a row's results are made of (xhat is of order 1; dx of order rstd).
  std::vector<double> scale(x.values.size());
  for (std::size_t i = 0; i < scale.size(); ++i) {
    scale[i] = std::max(1.0, std::abs(want.dx[i]));
  }
  expect_values(run_kernel(Kernel::kLayerNorm, {x}, dtype, shape, {k}, {eps}).values, want.xhat,
                tol, "layer_norm");
  expect_values(run_kernel(Kernel::kLayerNormBackward, {g, x}, dtype, shape, {k}, {eps}).values,
                want.dx, tol, "layer_norm_backward", scale);
}

INSTANTIATE_TEST_SUITE_P(CpuLayerNorm, LayerNormRows,
                         ::testing::Combine(::testing::ValuesIn(kFloats),
                                            ::testing::Values<int64_t>(1, 2)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param)) + "_k" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(CpuLayerNorm, EveryThreadCountGivesTheSameBits) {
  std::mt19937 rng(42);
  const Shape shape{700, 128};
  for (DType dtype : kFloats) {
    const HostTensor x = random_tensor(dtype, shape, rng, -3, 3);
    const HostTensor g = random_tensor(dtype, shape, rng, -1, 1);
    for (const Kernel kernel : {Kernel::kLayerNorm, Kernel::kLayerNormBackward}) {
      std::vector<HostTensor> inputs = {x};
      if (kernel == Kernel::kLayerNormBackward) inputs.insert(inputs.begin(), g);
      const HostTensor one = call_kernel_directly(kernel, inputs, dtype, shape, {1}, 1, {1e-5});
      for (int threads : {2, 3}) {
        ASSERT_EQ(call_kernel_directly(kernel, inputs, dtype, shape, {1}, threads, {1e-5}).values,
                  one.values)
            << kernel_name(kernel) << " " << label(dtype) << ", " << threads << " threads";
      }
    }
  }
}

// The folded operands (f32) give the bits of the calls they replace: a mul by the weight (one
// value per row element, broadcast over the rows) before, an add of the residual after.
TEST(CpuLayerNorm, FoldedWeightAndResidualGiveTheBitsOfTheirOwnCalls) {
  std::mt19937 rng(43);
  const DType dtype = DType::kFloat32;
  for (const int64_t k : {1, 2}) {
    const Shape shape{6, 3, 37};
    const Shape row = k == 2 ? Shape{3, 37} : Shape{37};
    const HostTensor x = random_tensor(dtype, shape, rng, -3, 3);
    const HostTensor g = random_tensor(dtype, shape, rng, -1, 1);
    const HostTensor w = random_tensor(dtype, row, rng, 0.5, 1.5);
    const HostTensor r = random_tensor(dtype, shape, rng, -1, 1);
    const HostTensor gw = run_kernel(Kernel::kMul, {g, w}, dtype, shape);
    const HostTensor dx =
        run_kernel(Kernel::kLayerNormBackward, {gw, x}, dtype, shape, {k}, {1e-5});
    const HostTensor sum = run_kernel(Kernel::kAdd, {r, dx}, dtype, shape);
    const std::string where = "k = " + std::to_string(k);
    EXPECT_EQ(run_kernel(Kernel::kLayerNormBackward, {g, x, w}, dtype, shape,
                         {k, kLayerNormFoldedWeight}, {1e-5})
                  .values,
              dx.values)
        << where;
    EXPECT_EQ(run_kernel(Kernel::kLayerNormBackward, {gw, x, r}, dtype, shape,
                         {k, kLayerNormFoldedResidual}, {1e-5})
                  .values,
              sum.values)
        << where;
    for (int threads : {1, 3}) {
      EXPECT_EQ(call_kernel_directly(Kernel::kLayerNormBackward, {g, x, w, r}, dtype, shape,
                                     {k, kLayerNormFoldedWeight | kLayerNormFoldedResidual},
                                     threads, {1e-5})
                    .values,
                sum.values)
          << where << ", " << threads << " threads";
    }
  }
}

// The f32 rows have code of their own per instruction set (layer_norm_avx512.cpp): every path the
// processor has gives the avx2 path's bits, rows far from zero and ragged widths included, with
// the weight and the residual folded in or not.
TEST(CpuLayerNorm, EveryInstructionSetGivesTheSameBits) {
  std::mt19937 rng(44);
  const DType dtype = DType::kFloat32;
  const cpu::CpuIsa before = cpu::cpu_isa();
  for (const int64_t width : {128, 37, 300}) {
    const Shape shape{33, width}, row{width};
    HostTensor x = random_tensor(dtype, shape, rng, -3, 3);
    for (std::size_t i = 0; i < x.values.size(); i += 3) x.values[i] += 250;
    const HostTensor g = random_tensor(dtype, shape, rng, -1, 1);
    const HostTensor w = random_tensor(dtype, row, rng, 0.5, 1.5);
    const HostTensor r = random_tensor(dtype, shape, rng, -1, 1);
    auto results = [&] {
      return std::vector<std::vector<double>>{
          call_kernel_directly(Kernel::kLayerNorm, {x}, dtype, shape, {1}, 2, {1e-5}).values,
          call_kernel_directly(Kernel::kLayerNormBackward, {g, x}, dtype, shape, {1}, 2, {1e-5})
              .values,
          call_kernel_directly(Kernel::kLayerNormBackward, {g, x, w, r}, dtype, shape,
                               {1, kLayerNormFoldedWeight | kLayerNormFoldedResidual}, 2, {1e-5})
              .values};
    };
    cpu::set_cpu_isa(cpu::CpuIsa::kAvx2);
    const std::vector<std::vector<double>> narrow = results();
    for (cpu::CpuIsa isa : {cpu::CpuIsa::kAvx512, cpu::CpuIsa::kAvx512Bf16}) {
      if (isa > cpu::detected_cpu_isa()) continue;
      cpu::set_cpu_isa(isa);
      EXPECT_EQ(results(), narrow) << cpu::cpu_isa_name(isa) << ", width " << width;
    }
  }
  cpu::set_cpu_isa(before);
}

TEST(CpuLayerNorm, RefusesMalformedCalls) {
  const HostTensor x{DType::kFloat32, {2, 4}, std::vector<double>(8, 1.0)};
  auto message = [&](Kernel kernel, const std::vector<HostTensor>& inputs, const Shape& out,
                     std::vector<int64_t> ints, DType dtype = DType::kFloat32) {
    try {
      call_kernel_directly(kernel, inputs, dtype, out, std::move(ints), 1, {1e-5});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(contains(message(Kernel::kLayerNorm, {x}, {2, 4}, {3}), "ints = [normalized dims"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNorm, {x}, {2, 4}, {0}), "ints = [normalized dims"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNorm, {x, x}, {2, 4}, {1}), "takes 1 operands"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNormBackward, {x, x}, {4, 2}, {1}),
                       "an operand is [2,4], the output [4,2]"));
  const HostTensor w{DType::kFloat32, {4}, std::vector<double>(4, 1.0)};
  EXPECT_TRUE(contains(message(Kernel::kLayerNormBackward, {x, x, w}, {2, 4}, {1, 4}),
                       "ints[1] = 4 is not a set of folded operands"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNormBackward, {x, x, w}, {2, 4}, {1, 3}),
                       "takes 4 operands, got 3"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNormBackward, {x, x, x}, {2, 4}, {1, 1}),
                       "the weight is [2,4], not one value per element of a row of 4"));
  EXPECT_TRUE(contains(message(Kernel::kLayerNormBackward, {x, x, w, w}, {2, 4}, {1, 3}),
                       "the residual is [4], the output [2,4]"));
  const HostTensor x16{DType::kBFloat16, {2, 4}, std::vector<double>(8, 1.0)};
  const HostTensor w16{DType::kBFloat16, {4}, std::vector<double>(4, 1.0)};
  EXPECT_TRUE(contains(
      message(Kernel::kLayerNormBackward, {x16, x16, w16}, {2, 4}, {1, 1}, DType::kBFloat16),
      "folded operands are f32, not bf16"));
  const HostTensor x64{DType::kFloat64, {2, 4}, std::vector<double>(8, 1.0)};
  EXPECT_TRUE(contains(
      message(Kernel::kLayerNormBackward, {x64, x64, x64}, {2, 4}, {1, 2}, DType::kFloat64),
      "folded operands are f32, not f64"));
  const HostTensor ints{DType::kInt32, {2, 4}, std::vector<double>(8, 1.0)};
  EXPECT_TRUE(contains(message(Kernel::kLayerNorm, {ints}, {2, 4}, {1}, DType::kInt32),
                       "layer_norm is not defined for s32"));
}

}  // namespace
}  // namespace axle::testing
