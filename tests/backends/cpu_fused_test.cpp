// backends/cpu kFused: a fused chain gives the same bits as its steps run as separate kernels
// (with broadcasting, across block boundaries, in f32, f64 and bf16), and malformed step lists are
// rejected with a message.
#include <gtest/gtest.h>

#include "tests/backends/fused_chain.h"

namespace axle::testing {
namespace {

HostTensor fused(const std::vector<Step>& steps, const std::vector<HostTensor>& externals,
                 DType dtype, const Shape& shape) {
  return run_kernel(Kernel::kFused, externals, dtype, shape, fused_ints(steps, false));
}

// Every fusible kernel, reading operands of every broadcast kind.
std::vector<Step> long_chain() {
  return {
      {Kernel::kMul, 0, 1},                   // x * row
      {Kernel::kAdd, -1, 2},                  // + column
      {Kernel::kExp, -2},                     //
      {Kernel::kSub, -3, 3},                  // - scalar
      {Kernel::kTanh, -4},                    //
      {Kernel::kSigmoid, -5},                 //
      {Kernel::kGelu, -6, 0, true},           //
      {Kernel::kGelu, -7},                    //
      {Kernel::kMaximum, -8, 0},              // max(., x)
      {Kernel::kMinimum, 1, -9},              // min(row, .)
      {Kernel::kNeg, -10},                    //
      {Kernel::kAbs, -11},                    //
      {Kernel::kSqrt, -12},                   //
      {Kernel::kRsqrt, 3},                    // rsqrt(scalar), broadcast
      {Kernel::kDiv, -13, -14},               //
      {Kernel::kLog, -15},                    //
      {Kernel::kRelu, -16},                   //
      {Kernel::kPow, -17, 2},                 // ^ column
      {Kernel::kGeluBackward, -18, 0},        // . * gelu'(x)
      {Kernel::kGeluBackward, 0, -19, true},  // x * gelu'(.), tanh form
  };
}

std::vector<HostTensor> operands(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  HostTensor x = random_tensor(dtype, {rows, cols}, rng);
  HostTensor row = random_tensor(dtype, {cols}, rng);
  HostTensor column = random_tensor(dtype, {rows, 1}, rng, 0.5, 2.0);
  HostTensor scalar = random_tensor(dtype, {}, rng, 0.25, 1.0);
  if (x.values.size() > 3) x.values[3] = kNaN;  // NaN through maximum and minimum
  return {x, row, column, scalar};
}

class FusedKernel : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(FusedKernel, MatchesTheUnfusedKernelsBitForBit) {
  const auto [dtype, cols] = GetParam();
  const int64_t rows = 3;
  const std::vector<HostTensor> externals = operands(dtype, rows, cols, 7);
  const std::vector<Step> steps = long_chain();
  const HostTensor want = unfused(steps, externals, dtype, {rows, cols});
  expect_same_bits(fused(steps, externals, dtype, {rows, cols}), want);
  // The chain keeps real values to compare (only the planted NaN's element is NaN).
  const auto finite = std::ranges::count_if(want.values, [](double v) { return std::isfinite(v); });
  EXPECT_GE(finite + 1, static_cast<std::ptrdiff_t>(want.values.size()));
}

INSTANTIATE_TEST_SUITE_P(Sizes, FusedKernel,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat64,
                                                              DType::kBFloat16),
                                            // empty, one vector, across blocks, and ragged tails
                                            ::testing::Values<int64_t>(0, 1, 8, 341, 1500, 4097)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Each float function (backends/float_functions.h) as a step of a chain, on the absolute value
// of the one before so that log and sqrt see numbers, in every floating dtype.
TEST(FusedKernel, EveryFloatFunctionMatchesItsKernelBitForBit) {
  std::vector<Step> steps;
  int32_t previous = 0;  // external operand x, then the scratch buffers
  int32_t scratch = 0;
#define AXLE_TEST_FLOAT_FUNCTION(name, str)         \
  steps.push_back({Kernel::kAbs, previous});        \
  steps.push_back({Kernel::k##name, -(++scratch)}); \
  previous = -(++scratch);
  AXLE_FLOAT_FUNCTIONS(AXLE_TEST_FLOAT_FUNCTION)
#undef AXLE_TEST_FLOAT_FUNCTION
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    std::mt19937 rng(12);
    const std::vector<HostTensor> externals = {random_tensor(dtype, {3, 341}, rng, -3, 3)};
    expect_same_bits(fused(steps, externals, dtype, {3, 341}),
                     unfused(steps, externals, dtype, {3, 341}));
  }
}

TEST(FusedKernelSteps, MayWriteTheBufferTheyRead) {
  std::mt19937 rng(3);
  const HostTensor x = random_tensor(DType::kFloat32, {2000}, rng);
  // exp into buffer 0, then tanh of buffer 0 back into buffer 0, then the output.
  const std::vector<int64_t> ints = {1, static_cast<int64_t>(Kernel::kExp),  0,  0,  0,
                                     0, static_cast<int64_t>(Kernel::kTanh), 0,  -1, 0,
                                     0, static_cast<int64_t>(Kernel::kMul),  -1, -1, 0,
                                     0};
  const HostTensor got = run_kernel(Kernel::kFused, {x}, DType::kFloat32, {2000}, ints);
  const HostTensor e = run_kernel(Kernel::kExp, {x}, DType::kFloat32, {2000});
  const HostTensor t = run_kernel(Kernel::kTanh, {e}, DType::kFloat32, {2000});
  expect_same_bits(got, run_kernel(Kernel::kMul, {t, x}, DType::kFloat32, {2000}));
}

TEST(FusedKernelSteps, OneElementOperandsOnEitherSideGiveTheUnfusedBits) {
  // A one-element operand of a binary step is read as a scalar, unless both are one element.
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const std::vector<HostTensor> externals = operands(dtype, 5, 333, 5);
    const std::vector<Step> steps = {
        {Kernel::kSub, 3, 0},       // scalar - x
        {Kernel::kDiv, 3, -1},      // scalar / .
        {Kernel::kAdd, 3, 3},       // scalar + scalar
        {Kernel::kMul, -2, -3},     //
        {Kernel::kPow, 3, -4},      // scalar ^ .
        {Kernel::kMaximum, 3, -5},  //
        {Kernel::kMinimum, -6, 3},  //
        {Kernel::kDiv, -7, 3},      // . / scalar
    };
    expect_same_bits(fused(steps, externals, dtype, {5, 333}),
                     unfused(steps, externals, dtype, {5, 333}));
  }
}

// A norm's squares: |x| ^ 2, a scalar exponent of 2, as the unfused kernel's products.
TEST(FusedKernelSteps, SquaresGiveTheUnfusedBits) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    std::vector<HostTensor> externals = operands(dtype, 5, 333, 5);
    externals[3] = HostTensor{dtype, {}, {2.0}};
    const std::vector<Step> steps = {
        {Kernel::kAbs, 0}, {Kernel::kPow, -1, 3}, {Kernel::kPow, 0, 3}};
    expect_same_bits(fused(steps, externals, dtype, {5, 333}),
                     unfused(steps, externals, dtype, {5, 333}));
    const HostTensor squares = fused(steps, externals, dtype, {5, 333});
    const HostTensor products =
        run_kernel(Kernel::kMul, {externals[0], externals[0]}, dtype, {5, 333});
    expect_same_bits(squares, products);
  }
}

TEST(FusedKernelSteps, OperandsBroadcastAlongAnyDimsGiveTheUnfusedBits) {
  // A channel bias [1, C, 1, 1] (runs of H * W copies), a per-image-and-column [N, 1, 1, W]
  // (runs of one), a [C, H, 1] (strided runs), and a [H, W] plane (contiguous runs), over
  // [N, C, H, W] shapes whose runs do and do not meet the block boundaries.
  for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{4, 8, 30, 31}, Shape{3, 2, 64, 64}}) {
    std::mt19937 rng(11);
    const int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
    const std::vector<HostTensor> externals = {random_tensor(DType::kFloat32, shape, rng),
                                               random_tensor(DType::kFloat32, {1, c, 1, 1}, rng),
                                               random_tensor(DType::kFloat32, {n, 1, 1, w}, rng),
                                               random_tensor(DType::kFloat32, {c, h, 1}, rng),
                                               random_tensor(DType::kFloat32, {h, w}, rng)};
    const std::vector<Step> steps = {
        {Kernel::kAdd, 0, 1},   // x + bias
        {Kernel::kRelu, -1},    //
        {Kernel::kMul, -2, 2},  // * [n, 1, 1, w]
        {Kernel::kSub, 3, -3},  // [c, h, 1] - .
        {Kernel::kAdd, -4, 4},  // + [h, w]
    };
    expect_same_bits(fused(steps, externals, DType::kFloat32, shape),
                     unfused(steps, externals, DType::kFloat32, shape));
  }
}

TEST(FusedKernelSteps, MalformedListsAreRejected) {
  const HostTensor x{DType::kFloat32, {4}, {1, 2, 3, 4}};
  const auto exp_k = static_cast<int64_t>(Kernel::kExp);
  auto message = [&](std::vector<int64_t> ints, std::vector<HostTensor> inputs = {},
                     DType dtype = DType::kFloat32, Shape shape = {4}) {
    if (inputs.empty()) inputs = {x};
    return invalid_argument_message(Kernel::kFused, inputs, dtype, shape, std::move(ints));
  };
  EXPECT_TRUE(contains(message({0, exp_k, -1, 0}), "ints must be"));
  EXPECT_TRUE(contains(message({0, exp_k, 0, 0, 0, 0}), "the last step writes -1"));
  EXPECT_TRUE(contains(message({0, exp_k, -1, 1, 0, 0}), "reads operand 1"));
  EXPECT_TRUE(contains(message({0, exp_k, -1, -1, 0, 0}), "reads operand -1"));
  EXPECT_TRUE(
      contains(message({0, static_cast<int64_t>(Kernel::kMatmul), -1, 0, 0, 0}), "not a fusible"));
  EXPECT_TRUE(contains(message({0, 9999, -1, 0, 0, 0}), "kernel number 9999"));
  EXPECT_TRUE(contains(message({-3, exp_k, -1, 0, 0, 0}), "-3 scratch buffers"));
  EXPECT_TRUE(
      contains(message({0, exp_k, -1, 0, 0, 0}, {HostTensor{DType::kFloat32, {3}, {1, 2, 3}}}),
               "does not broadcast"));
  EXPECT_TRUE(
      contains(message({0, exp_k, -1, 0, 0, 0}, {HostTensor{DType::kFloat64, {4}, {1, 2, 3, 4}}}),
               "operand 0 is f64"));
  EXPECT_TRUE(contains(message({0, exp_k, -1, 0, 0, 0},
                               {HostTensor{DType::kInt32, {4}, {1, 2, 3, 4}}}, DType::kInt32),
                       "f32, f64 and bf16 fuse"));
  EXPECT_EQ(message({0, exp_k, -1, 0, 0, 0}), "");
}

}  // namespace
}  // namespace axle::testing
