// Tests the epilogues lowering folds into kMatmul (backends/cpu/linalg.cpp): gelu's backward,
// relu's backward and a residual applied to the product as it is written give the bits of the
// separate calls they replace, and malformed operands are refused with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"
#include "tests/backends/matmul_cases.h"

namespace axle::testing {
namespace {

// The message of a [3, 5] x [5, 4] product of `operands` into an `out` output whose last operand
// (x or a residual) is `x_dtype` of `x_shape`, with these ints; empty when the call runs.
std::string last_operand_message(DType operands, DType out, const Shape& x_shape, DType x_dtype,
                                 std::vector<int64_t> ints) {
  return invalid_argument_message(
      Kernel::kMatmul,
      {HostTensor{operands, {3, 5}, std::vector<double>(15, 1.0)},
       HostTensor{operands, {5, 4}, std::vector<double>(20, 1.0)},
       HostTensor{x_dtype, x_shape, std::vector<double>(x_shape.numel(), 1.0)}},
      out, {3, 4}, std::move(ints));
}

// ---- gelu's backward on the product (gelu_backward(matmul(a, b), x) folded into the call) -----

TEST(MatmulGeluBackward, HasTheBitsOfTheProductThenGeluBackward) {
  std::mt19937 rng(29);
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const BiasCase& c : kBiasCases) {
      const Shape out = product_shape(c);
      const HostTensor a = random_tensor(dtype, c.a, rng);
      const HostTensor b = random_tensor(dtype, c.b, rng);
      const HostTensor bias = random_tensor(dtype, {out[out.rank() - 1]}, rng);
      const HostTensor x = random_tensor(dtype, out, rng, -4, 4);
      for (const bool biased : {false, true}) {
        std::vector<HostTensor> operands = {a, b};
        if (biased) operands.push_back(bias);
        for (const int threads : {1, 2}) {
          const HostTensor product =
              call_kernel_directly(Kernel::kMatmul, operands, dtype, out, {c.ta, c.tb}, threads);
          const HostTensor want =
              call_kernel_directly(Kernel::kGeluBackward, {product, x}, dtype, out, {0}, threads);
          operands.push_back(x);
          const HostTensor got = call_kernel_directly(Kernel::kMatmul, operands, dtype, out,
                                                      {c.ta, c.tb, 0, 1}, threads);
          operands.pop_back();
          EXPECT_EQ(got.values, want.values)
              << label(dtype) << " a " << c.a.to_string() << ", b " << c.b.to_string() << ", bias "
              << biased << ", " << threads << " threads";
        }
      }
    }
  }
}

TEST(MatmulGeluBackward, NeedsAnXOfTheOutputsDtypeAndShapeAndAnF32OrBf16Product) {
  auto message = [](DType dtype, const Shape& x_shape, DType x_dtype,
                    std::vector<int64_t> ints = {0, 0, 0, 1}) {
    return last_operand_message(dtype, dtype, x_shape, x_dtype, std::move(ints));
  };
  EXPECT_TRUE(message(DType::kFloat32, {3, 4}, DType::kFloat32).empty());
  std::string e = message(DType::kFloat32, {4, 3}, DType::kFloat32);
  EXPECT_TRUE(contains(e, "gelu_backward's x f32[4,3] must have the output's dtype and shape"))
      << e;
  e = message(DType::kBFloat16, {3, 4}, DType::kFloat32);
  EXPECT_TRUE(contains(e, "gelu_backward's x f32[3,4]")) << e;
  e = message(DType::kFloat64, {3, 4}, DType::kFloat64);
  EXPECT_TRUE(contains(e, "f32 and bf16 products only")) << e;
  e = message(DType::kFloat32, {3, 4}, DType::kFloat32, {0, 0, 0, 1, 0, 0, 0, 1});
  EXPECT_TRUE(contains(e, "ints must be")) << e;
}

// ---- relu's backward on the product (where(x > 0, matmul(a, b), 0) folded into the call) ------

TEST(MatmulReluBackward, HasTheBitsOfTheProductThenWhereXAboveZero) {
  std::mt19937 rng(37);
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const BiasCase& c : kBiasCases) {
      const Shape out = product_shape(c);
      const HostTensor a = random_tensor(dtype, c.a, rng);
      const HostTensor b = random_tensor(dtype, c.b, rng);
      const HostTensor bias = random_tensor(dtype, {out[out.rank() - 1]}, rng);
      HostTensor x = random_tensor(dtype, out, rng, -4, 4);
      // Where the sign alone does not decide: zeros of both signs, NaN, infinities.
      const double special[] = {0.0, -0.0, std::nan(""), INFINITY, -INFINITY, 1e-30};
      for (std::size_t i = 0; i < std::size(special) && i < x.values.size(); ++i) {
        x.values[i] = special[i];
      }
      const HostTensor zero{dtype, {}, {0.0}};
      for (const bool biased : {false, true}) {
        std::vector<HostTensor> operands = {a, b};
        if (biased) operands.push_back(bias);
        for (const int threads : {1, 2}) {
          const HostTensor product =
              call_kernel_directly(Kernel::kMatmul, operands, dtype, out, {c.ta, c.tb}, threads);
          const HostTensor mask =
              call_kernel_directly(Kernel::kGt, {x, zero}, DType::kBool, out, {}, threads);
          const HostTensor want =
              call_kernel_directly(Kernel::kWhere, {mask, product, zero}, dtype, out, {}, threads);
          operands.push_back(x);
          const HostTensor got = call_kernel_directly(Kernel::kMatmul, operands, dtype, out,
                                                      {c.ta, c.tb, 0, 0, 0, 1}, threads);
          operands.pop_back();
          ASSERT_EQ(got.values.size(), want.values.size());
          for (std::size_t i = 0; i < got.values.size(); ++i) {
            // +0 and -0 compare equal: compare the sign too.
            EXPECT_TRUE(got.values[i] == want.values[i] &&
                        std::signbit(got.values[i]) == std::signbit(want.values[i]))
                << label(dtype) << " a " << c.a.to_string() << ", b " << c.b.to_string()
                << ", bias " << biased << ", " << threads << " threads: element " << i << " is "
                << got.values[i] << ", want " << want.values[i];
          }
        }
      }
    }
  }
}

TEST(MatmulReluBackward, NeedsAnXOfTheOutputsDtypeAndShapeAndNoOtherEpilogue) {
  auto message = [](DType dtype, const Shape& x_shape, DType x_dtype,
                    std::vector<int64_t> ints = {0, 0, 0, 0, 0, 1}) {
    return last_operand_message(dtype, dtype, x_shape, x_dtype, std::move(ints));
  };
  EXPECT_TRUE(message(DType::kFloat32, {3, 4}, DType::kFloat32).empty());
  EXPECT_TRUE(message(DType::kBFloat16, {3, 4}, DType::kBFloat16).empty());
  std::string e = message(DType::kFloat32, {4, 3}, DType::kFloat32);
  EXPECT_TRUE(contains(e, "relu_backward's x f32[4,3] must have the output's dtype and shape"))
      << e;
  e = message(DType::kFloat64, {3, 4}, DType::kFloat64);
  EXPECT_TRUE(contains(e, "relu's backward is applied to f32 and bf16 products only")) << e;
  e = message(DType::kFloat32, {3, 4}, DType::kFloat32, {0, 0, 0, 1, 0, 1});
  EXPECT_TRUE(contains(e, "neither gelu's backward nor a residual")) << e;
}

// ---- relu on the product (relu(matmul(a, b) (+ bias)) folded into the call) -----------------

TEST(MatmulRelu, HasTheBitsOfTheProductThenRelu) {
  std::mt19937 rng(41);
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const BiasCase& c : kBiasCases) {
      const Shape out = product_shape(c);
      const HostTensor a = random_tensor(dtype, c.a, rng);
      const HostTensor b = random_tensor(dtype, c.b, rng);
      HostTensor bias = random_tensor(dtype, {out[out.rank() - 1]}, rng);
      // Columns whose every value is NaN or infinite, so relu meets them.
      bias.values[0] = std::nan("");
      bias.values[1] = -INFINITY;
      bias.values[2] = INFINITY;
      for (const bool biased : {false, true}) {
        std::vector<HostTensor> operands = {a, b};
        if (biased) operands.push_back(bias);
        for (const int threads : {1, 2}) {
          const HostTensor product =
              call_kernel_directly(Kernel::kMatmul, operands, dtype, out, {c.ta, c.tb}, threads);
          const HostTensor want =
              call_kernel_directly(Kernel::kRelu, {product}, dtype, out, {}, threads);
          const HostTensor got = call_kernel_directly(Kernel::kMatmul, operands, dtype, out,
                                                      {c.ta, c.tb, 0, 0, 0, 0, 1}, threads);
          ASSERT_EQ(got.values.size(), want.values.size());
          for (std::size_t i = 0; i < got.values.size(); ++i) {
            EXPECT_TRUE((got.values[i] == want.values[i] &&
                         std::signbit(got.values[i]) == std::signbit(want.values[i])) ||
                        (std::isnan(got.values[i]) && std::isnan(want.values[i])))
                << label(dtype) << " a " << c.a.to_string() << ", b " << c.b.to_string()
                << ", bias " << biased << ", " << threads << " threads: element " << i << " is "
                << got.values[i] << ", want " << want.values[i];
          }
        }
      }
    }
  }
}

TEST(MatmulRelu, GoesWithABiasOnlyOnF32AndBf16Products) {
  auto message = [](DType dtype, std::vector<int64_t> ints) {
    return invalid_argument_message(Kernel::kMatmul,
                                    {HostTensor{dtype, {3, 5}, std::vector<double>(15, 1.0)},
                                     HostTensor{dtype, {5, 4}, std::vector<double>(20, 1.0)}},
                                    dtype, {3, 4}, std::move(ints));
  };
  EXPECT_TRUE(message(DType::kFloat32, {0, 0, 0, 0, 0, 0, 1}).empty());
  EXPECT_TRUE(message(DType::kBFloat16, {0, 0, 0, 0, 0, 0, 1}).empty());
  std::string e = message(DType::kFloat64, {0, 0, 0, 0, 0, 0, 1});
  EXPECT_TRUE(contains(e, "relu is applied to f32 and bf16 products only")) << e;
  e = last_operand_message(DType::kFloat32, DType::kFloat32, {3, 4}, DType::kFloat32,
                           {0, 0, 0, 0, 0, 1, 1});
  EXPECT_TRUE(contains(e, "relu goes with a bias only")) << e;
  e = message(DType::kFloat32, {0, 0, 0, 0, 0, 0, 1, 0});
  EXPECT_TRUE(contains(e, "ints must be")) << e;
}

// ---- a residual added to a bf16 product's values as f32 (r + matmul(a, b) folded in) ---------

TEST(MatmulResidual, HasTheBitsOfTheValuesAsF32PlusTheResidual) {
  std::mt19937 rng(31);
  for (const BiasCase& c : kBiasCases) {
    const Shape out = product_shape(c);
    const HostTensor a = random_tensor(DType::kBFloat16, c.a, rng);
    const HostTensor b = random_tensor(DType::kBFloat16, c.b, rng);
    const HostTensor bias = random_tensor(DType::kBFloat16, {out[out.rank() - 1]}, rng);
    const HostTensor residual = random_tensor(DType::kFloat32, out, rng, -8, 8);
    for (const bool biased : {false, true}) {
      std::vector<HostTensor> operands = {a, b};
      if (biased) operands.push_back(bias);
      for (const int threads : {1, 2}) {
        const HostTensor values = call_kernel_directly(Kernel::kMatmul, operands, DType::kFloat32,
                                                       out, {c.ta, c.tb, 1}, threads);
        const HostTensor want =
            call_kernel_directly(Kernel::kAdd, {residual, values}, DType::kFloat32, out, {});
        operands.push_back(residual);
        const HostTensor got = call_kernel_directly(Kernel::kMatmul, operands, DType::kFloat32, out,
                                                    {c.ta, c.tb, 1, 0, 1}, threads);
        operands.pop_back();
        EXPECT_EQ(got.values, want.values) << "a " << c.a.to_string() << ", b " << c.b.to_string()
                                           << ", bias " << biased << ", " << threads << " threads";
      }
    }
  }
}

TEST(MatmulResidual, NeedsAnF32ResidualOfTheOutputsShapeUnderBf16ValuesAsF32) {
  auto message = [](DType operands, const Shape& r_shape, DType r_dtype,
                    std::vector<int64_t> ints = {0, 0, 1, 0, 1}) {
    return last_operand_message(operands, DType::kFloat32, r_shape, r_dtype, std::move(ints));
  };
  EXPECT_TRUE(message(DType::kBFloat16, {3, 4}, DType::kFloat32).empty());
  std::string e = message(DType::kBFloat16, {4, 3}, DType::kFloat32);
  EXPECT_TRUE(contains(e, "the residual f32[4,3] must be f32 in the output's shape")) << e;
  e = message(DType::kBFloat16, {3, 4}, DType::kBFloat16);
  EXPECT_TRUE(contains(e, "the residual bf16[3,4]")) << e;
  e = message(DType::kFloat32, {3, 4}, DType::kFloat32, {0, 0, 0, 0, 1});
  EXPECT_TRUE(contains(e, "a bf16 product's values as f32 only")) << e;
  e = message(DType::kBFloat16, {3, 4}, DType::kFloat32, {0, 0, 1, 1, 1});
  EXPECT_TRUE(contains(e, "a bf16 product's values as f32 only")) << e;
}

}  // namespace
}  // namespace axle::testing
