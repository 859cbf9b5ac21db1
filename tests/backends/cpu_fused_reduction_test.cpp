// backends/cpu kFused ending in a reduction: the fused kernel gives the bits of its chain run one
// kernel per step and then reduced by the reduction kernel (same terms in the same order), stays
// within rounding of a plain double loop, and rejects malformed reductions with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tests/backends/fused_chain.h"

namespace axle::testing {
namespace {

struct Case {
  Shape shape;
  std::vector<int64_t> dims;
  bool keepdim = false;
};

std::string describe(const Case& c) {
  std::string out = c.shape.to_string() + " dims {";
  for (int64_t d : c.dims) out += std::to_string(d) + ",";
  return out + (c.keepdim ? "} keepdim" : "}");
}

Shape reduced_shape(const Case& c) {
  Shape out;
  for (int d = 0; d < c.shape.rank(); ++d) {
    const bool reduced = std::ranges::find(c.dims, d) != c.dims.end();
    if (!reduced || c.keepdim) out.push_back(reduced ? 1 : c.shape[d]);
  }
  return out;
}

// Rows that straddle blocks at every lane offset (1500 and 341 are not multiples of 16, 4097 is
// longer than a block), rows shorter than the lanes, columns (reduced dims in front of kept
// ones), size-1 dims between reduced dims, whole tensors and empty ones; columns long enough to
// be summed in row parts (reducer.h), the last part shorter.
const std::vector<Case> kCases = {
    {{3, 1500}, {0, 1}},
    {{7, 341}, {1}},
    {{5, 4097}, {1}, true},
    {{300, 16}, {1}},
    {{40, 10}, {1}},
    {{64, 33}, {0}},
    {{6, 1, 40}, {0, 1}},
    {{4, 5, 66}, {1, 2}},
    {{9, 2, 1, 70}, {1, 2, 3}, true},
    {{2, 3, 500}, {0}, true},
    {{1, 2000}, {0, 1}},
    {{2100, 130}, {0}},
    {{3, 1400, 64}, {0, 1}, true},
    {{3, 0}, {1}},
    {{0, 5}, {1}},
    // Per-channel statistics (dims before and after the kept ones): in parts (enough terms) of
    // any rows (runs a multiple of 16 terms) or of 16 rows (900-term runs, 32 rows); in one part
    // (fewer terms, or neither multiple); runs shorter than a lane group; size-1 dims; keepdim;
    // an empty batch.
    {{2, 48, 28, 28}, {0, 2, 3}},
    {{3, 32, 30, 30}, {0, 2, 3}},
    {{4, 24, 8, 8}, {0, 2, 3}},
    {{3, 48, 7, 7}, {0, 2, 3}, true},
    {{5, 20, 3, 5}, {0, 2, 3}},
    {{2, 1, 6, 1, 3}, {0, 3, 4}},
    {{7, 33, 2}, {0, 2}},
    {{0, 3, 5}, {0, 2}},
};

// Operands of every kind for a chain of `shape`: x itself, a row broadcast along the leading
// dims, a column broadcast along the last, and a scalar. Values stay moderate, so the chain has
// no NaN or infinity and sums keep their digits.
std::vector<HostTensor> operands(DType dtype, const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const int rank = shape.rank();
  Shape row{rank > 0 ? shape[rank - 1] : 1};
  Shape column = shape;
  if (rank > 0) column[rank - 1] = 1;
  return {random_tensor(dtype, shape, rng), random_tensor(dtype, row, rng),
          random_tensor(dtype, column, rng, 0.5, 2.0), random_tensor(dtype, {}, rng, 0.25, 1.0)};
}

// exp and tanh check that approximated steps run at the unfused kernel's vector positions.
const std::vector<Step> kChain = {
    {Kernel::kMul, 0, 1},       // x * row
    {Kernel::kAdd, -1, 2},      // + column
    {Kernel::kTanh, -2},        //
    {Kernel::kExp, -3},         //
    {Kernel::kSub, -4, 3},      // - scalar
    {Kernel::kMaximum, -5, 0},  // max(., x)
    {Kernel::kMul, 3, -6},      // scalar * .
};

HostTensor fused_reduction(Kernel reduction, const std::vector<HostTensor>& externals, DType dtype,
                           const Case& c) {
  std::vector<int64_t> ints = fused_ints(kChain, /*last_to_buffer=*/true);
  ints.insert(ints.end(), {static_cast<int64_t>(reduction), -1,
                           -static_cast<int64_t>(kChain.size()), c.shape.rank()});
  ints.insert(ints.end(), c.shape.dims().begin(), c.shape.dims().end());
  ints.push_back(c.keepdim ? 1 : 0);
  ints.insert(ints.end(), c.dims.begin(), c.dims.end());
  return run_kernel(Kernel::kFused, externals, dtype, reduced_shape(c), ints);
}

// Plain double loops over the chain's values: per output, the reduction (values) and how far a
// result may be from it (scale). Sums in double, in any order, are within (n + 1) ulps of double
// per unit of the terms' magnitudes; the result then rounds once to the dtype (an ulp of it).
// Max and min are exact.
Reference reference(Kernel reduction, const HostTensor& chain, const Case& c) {
  const Shape out = reduced_shape(c);
  const auto outputs = static_cast<std::size_t>(out.numel());
  Reference ref{out, std::vector<double>(outputs, 0), std::vector<double>(outputs, 0)};
  std::vector<double> magnitude(outputs, 0);
  std::vector<int64_t> terms(outputs, 0);
  if (reduction == Kernel::kReduceMax) std::ranges::fill(ref.values, -kInf);
  if (reduction == Kernel::kReduceMin) std::ranges::fill(ref.values, kInf);
  for (int64_t i = 0; i < c.shape.numel(); ++i) {
    int64_t rest = i, at = 0, stride = 1;
    for (int d = c.shape.rank() - 1; d >= 0; --d) {
      const int64_t index = rest % c.shape[d];
      rest /= c.shape[d];
      if (std::ranges::find(c.dims, d) != c.dims.end()) continue;
      at += index * stride;
      stride *= c.shape[d];
    }
    const double v = chain.values[static_cast<std::size_t>(i)];
    const auto o = static_cast<std::size_t>(at);
    if (reduction == Kernel::kReduceMax) ref.values[o] = std::max(ref.values[o], v);
    if (reduction == Kernel::kReduceMin) ref.values[o] = std::min(ref.values[o], v);
    if (reduction == Kernel::kSum || reduction == Kernel::kMean) ref.values[o] += v;
    magnitude[o] += std::abs(v);
    ++terms[o];
  }
  if (reduction == Kernel::kReduceMax || reduction == Kernel::kReduceMin) return ref;
  const double ulp = chain.dtype == DType::kFloat32 ? 0x1p-23 : 0x1p-52;
  for (std::size_t o = 0; o < outputs; ++o) {
    const auto n = static_cast<double>(terms[o]);
    if (reduction == Kernel::kMean) {
      ref.values[o] /= n;  // NaN for no terms, as the kernel
      magnitude[o] /= n;
    }
    ref.scale[o] = (n + 1) * 0x1p-52 * magnitude[o] + ulp * std::abs(ref.values[o]);
  }
  return ref;
}

class FusedReduction : public ::testing::TestWithParam<std::tuple<DType, Kernel>> {};

TEST_P(FusedReduction, MatchesTheReductionKernelBitForBitAndDoubleLoops) {
  const auto [dtype, reduction] = GetParam();
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const bool extreme = reduction == Kernel::kReduceMax || reduction == Kernel::kReduceMin;
    if (extreme && c.shape.numel() == 0) continue;  // no identity: rejected (see below)
    const std::vector<HostTensor> externals = operands(dtype, c.shape, 11);
    const HostTensor chain = unfused(kChain, externals, dtype, c.shape);
    std::vector<int64_t> ints = {c.keepdim ? 1 : 0};
    ints.insert(ints.end(), c.dims.begin(), c.dims.end());
    const HostTensor want = run_kernel(reduction, {chain}, dtype, reduced_shape(c), ints);
    const HostTensor got = fused_reduction(reduction, externals, dtype, c);
    expect_same_bits(got, want);
    const Reference ref = reference(reduction, chain, c);
    expect_values(got.values, ref.values, 1.0, describe(c), ref.scale);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, FusedReduction,
                         ::testing::Combine(::testing::Values(DType::kFloat32, DType::kFloat64),
                                            ::testing::Values(Kernel::kSum, Kernel::kMean,
                                                              Kernel::kReduceMax,
                                                              Kernel::kReduceMin)),
                         [](const auto& info) {
                           return label(std::get<0>(info.param)) + "_" +
                                  std::string(kernel_name(std::get<1>(info.param)));
                         });

// Column sums in row parts, and per-channel sums in parts of channels, give the same bits on one
// thread, two and three.
TEST(FusedReductionSteps, RowPartsGiveOneThreadsBitsOnSeveral) {
  for (const Case& c : {Case{{4096, 128}, {0}}, Case{{3, 1400, 64}, {0, 1}},
                        Case{{6, 64, 14, 14}, {0, 2, 3}}, Case{{3, 40, 32, 32}, {0, 2, 3}}}) {
    const std::vector<HostTensor> externals = operands(DType::kFloat32, c.shape, 12);
    std::vector<int64_t> ints = fused_ints(kChain, /*last_to_buffer=*/true);
    ints.insert(ints.end(), {static_cast<int64_t>(Kernel::kSum), -1,
                             -static_cast<int64_t>(kChain.size()), c.shape.rank()});
    ints.insert(ints.end(), c.shape.dims().begin(), c.shape.dims().end());
    ints.push_back(0);
    ints.insert(ints.end(), c.dims.begin(), c.dims.end());
    const HostTensor one =
        call_kernel_directly(Kernel::kFused, externals, DType::kFloat32, reduced_shape(c), ints, 1);
    for (int threads : {2, 3}) {
      SCOPED_TRACE(describe(c) + " on " + std::to_string(threads) + " threads");
      expect_same_bits(call_kernel_directly(Kernel::kFused, externals, DType::kFloat32,
                                            reduced_shape(c), ints, threads),
                       one);
    }
  }
}

TEST(FusedReductionSteps, NaNWinsMaxAndMin) {
  HostTensor x{DType::kFloat32, {2, 40}, std::vector<double>(80, 1.0)};
  x.values[57] = kNaN;  // row 1, past the first lane group
  const auto neg = static_cast<int64_t>(Kernel::kNeg);
  for (Kernel k : {Kernel::kReduceMax, Kernel::kReduceMin}) {
    const HostTensor got =
        run_kernel(Kernel::kFused, {x}, DType::kFloat32, {2},
                   {1, neg, 0, 0, 0, 0, static_cast<int64_t>(k), -1, -1, 2, 2, 40, 0, 1});
    EXPECT_EQ(got.values[0], -1.0) << kernel_name(k);
    EXPECT_TRUE(std::isnan(got.values[1])) << kernel_name(k);
  }
}

TEST(FusedReductionSteps, MalformedReductionsAreRejected) {
  const HostTensor x{DType::kFloat32, {4}, {1, 2, 3, 4}};
  const auto exp_k = static_cast<int64_t>(Kernel::kExp);
  const auto sum_k = static_cast<int64_t>(Kernel::kSum);
  // exp(x) into buffer 0, then a sum of buffer 0 over a shape of [4] (all of it, into []).
  auto ints = [&](std::vector<int64_t> reduction, int64_t destination = 0) {
    std::vector<int64_t> all = {1, exp_k, destination, 0, 0, 0};
    all.insert(all.end(), reduction.begin(), reduction.end());
    return all;
  };
  auto message = [&](std::vector<int64_t> ints, Shape out = {},
                     std::optional<HostTensor> in = std::nullopt) {
    return invalid_argument_message(Kernel::kFused, {in.value_or(x)}, DType::kFloat32, out,
                                    std::move(ints));
  };
  EXPECT_EQ(message(ints({sum_k, -1, -1, 1, 4, 0, 0})), "");
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4, 0, 0}, -1)), "unless a reduction"));
  EXPECT_TRUE(contains(message(ints({sum_k, 0, -1, 1, 4, 0, 0})), "writes 0, not -1"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1})), "the reduction must be"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 9, 4, 0, 0})), "the reduction must be"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4})), "the reduction must be"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -2, 1, 4, 0, 0})), "reads operand -2"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, 1, 1, 4, 0, 0})), "reads operand 1"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, -4, 0, 0})), "negative or too large"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4, 2, 0})), "keepdim 2"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 5, 0, 0})), "does not broadcast"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4, 0, 1})), "dims must be sorted"));
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4, 0, 0}), {4}), "but the output is"));
  EXPECT_TRUE(
      contains(message(ints({sum_k, -1, -1, 4, 2, 3, 4, 5, 0, 0, 2}), {3, 5},
                       HostTensor{DType::kFloat32, {2, 3, 4, 5}, std::vector<double>(120, 1)}),
               "not adjacent"));
  EXPECT_TRUE(contains(message(ints({static_cast<int64_t>(Kernel::kReduceMax), -1, -1, 1, 0, 0, 0}),
                               {}, HostTensor{DType::kFloat32, {0}, {}}),
                       "no identity"));
  EXPECT_TRUE(
      contains(message(ints({static_cast<int64_t>(Kernel::kLogSumExp), -1, -1, 1, 4, 0, 0})),
               "not a fusible"));
  // Nothing may follow the reduction.
  EXPECT_TRUE(contains(message(ints({sum_k, -1, -1, 1, 4, 0, 0, exp_k, -1, 0, 0, 0})),
                       "dims must be sorted"));
}

TEST(FusedReductionSteps, DamagedListsAreRejectedOrRun) {
  // A valid list (x * y into buffer 0, exp, then the mean over dim 1 of [3, 4]), truncated at
  // every length and with every value replaced by each of a few likely corruptions: the kernel
  // either runs or names what is wrong, and never reads or writes out of bounds (the address
  // sanitizer build checks that).
  const HostTensor x{DType::kFloat32, {3, 4}, std::vector<double>(12, 0.5)};
  const HostTensor y{DType::kFloat32, {4}, {1, 2, 3, 4}};
  const std::vector<int64_t> valid = {1,
                                      static_cast<int64_t>(Kernel::kMul),
                                      0,
                                      0,
                                      1,
                                      0,
                                      static_cast<int64_t>(Kernel::kExp),
                                      0,
                                      -1,
                                      0,
                                      0,
                                      static_cast<int64_t>(Kernel::kMean),
                                      -1,
                                      -1,
                                      2,
                                      3,
                                      4,
                                      0,
                                      1};
  auto outcome = [&](std::vector<int64_t> ints) {
    const std::string message =
        invalid_argument_message(Kernel::kFused, {x, y}, DType::kFloat32, {3}, std::move(ints));
    EXPECT_TRUE(message.empty() || message.starts_with("fused")) << message;
  };
  ASSERT_EQ(invalid_argument_message(Kernel::kFused, {x, y}, DType::kFloat32, {3}, valid), "");
  for (std::size_t length = 0; length < valid.size(); ++length) {
    outcome({valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(length)});
  }
  const std::vector<int64_t> corruptions = {-1000,
                                            -3,
                                            -2,
                                            -1,
                                            0,
                                            1,
                                            2,
                                            3,
                                            4,
                                            5,
                                            8,
                                            9,
                                            static_cast<int64_t>(Kernel::kSum),
                                            static_cast<int64_t>(Kernel::kCount),
                                            int64_t{1} << 40};
  for (std::size_t i = 0; i < valid.size(); ++i) {
    for (int64_t value : corruptions) {
      std::vector<int64_t> ints = valid;
      ints[i] = value;
      outcome(std::move(ints));
    }
  }
}

}  // namespace
}  // namespace axle::testing
