// Tests backends/cpu/linalg.cpp: kMatmul against plain double loops, over transposes, NumPy batch
// broadcasting, empty dims, every supported dtype, and the shape checks; its bias operand, bf16
// values as f32 and f32 operands of a bf16 product (the epilogues: cpu_matmul_epilogue_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"
#include "tests/backends/matmul_cases.h"

namespace axle::testing {
namespace {

// Element offset of the matrix that `index` (over the output's batch dims) selects in `t`,
// whose batch dims align with the output's from the right and broadcast when 1.
int64_t matrix_offset(const Shape& t, const std::vector<int64_t>& index) {
  const int t_batch = t.rank() - 2;
  const int out_batch = static_cast<int>(index.size());
  int64_t offset = 0, stride = t[t.rank() - 1] * t[t.rank() - 2];
  for (int i = t_batch - 1; i >= 0; --i) {
    offset += (t[i] == 1 ? 0 : index[out_batch - t_batch + i]) * stride;
    stride *= t[i];
  }
  return offset;
}

Reference reference_matmul(const HostTensor& a, const HostTensor& b, bool ta, bool tb) {
  const int ra = a.shape.rank(), rb = b.shape.rank();
  const int64_t m = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t k = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  const int batch_rank = std::max(ra, rb) - 2;
  Reference ref;
  for (int i = 0; i < batch_rank; ++i) {
    const int ia = i - (batch_rank - (ra - 2)), ib = i - (batch_rank - (rb - 2));
    const int64_t da = ia >= 0 ? a.shape[ia] : 1, db = ib >= 0 ? b.shape[ib] : 1;
    ref.shape.push_back(da == 1 ? db : da);
  }
  ref.shape.push_back(m);
  ref.shape.push_back(n);
  int64_t batch = 1;
  for (int i = 0; i < batch_rank; ++i) batch *= ref.shape[i];
  for (int64_t bi = 0; bi < batch; ++bi) {
    std::vector<int64_t> index(batch_rank);
    for (int64_t i = batch_rank - 1, rest = bi; i >= 0; --i) {
      index[i] = rest % ref.shape[i];
      rest /= ref.shape[i];
    }
    const int64_t oa = matrix_offset(a.shape, index), ob = matrix_offset(b.shape, index);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = a.values[oa + (ta ? p * m + i : i * k + p)];
          const double y = b.values[ob + (tb ? j * k + p : p * n + j)];
          sum += x * y;
          scale += std::abs(x * y);
        }
        ref.values.push_back(sum);
        ref.scale.push_back(scale);
      }
    }
  }
  return ref;
}

/// Runs kMatmul on random operands of `dtype` and compares every entry with the loops.
void expect_matmul_matches_loops(DType dtype, const Shape& a_shape, const Shape& b_shape, bool ta,
                                 bool tb, std::mt19937& rng) {
  const HostTensor a = random_tensor(dtype, a_shape, rng);
  const HostTensor b = random_tensor(dtype, b_shape, rng);
  const Reference ref = reference_matmul(a, b, ta, tb);
  const HostTensor out = run_kernel(Kernel::kMatmul, {a, b}, dtype, ref.shape, {ta, tb});
  expect_close(out, ref, dtype,
               "a " + a_shape.to_string() + ", b " + b_shape.to_string() + ", transpose_a=" +
                   (ta ? "true" : "false") + ", transpose_b=" + (tb ? "true" : "false"));
}

/// The std::invalid_argument message kMatmul gives for all-ones operands of these shapes ("" if
/// it accepts them).
std::string matmul_rejection(DType a_dtype, const Shape& a, DType b_dtype, const Shape& b,
                             const Shape& out, std::vector<int64_t> ints = {0, 0}) {
  return invalid_argument_message(Kernel::kMatmul,
                                  {HostTensor{a_dtype, a, std::vector<double>(a.numel(), 1.0)},
                                   HostTensor{b_dtype, b, std::vector<double>(b.numel(), 1.0)}},
                                  a_dtype, out, std::move(ints));
}

TEST(Matmul, MatchesLoopsOnRandomShapesF32) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> dim(1, 40);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t k = dim(rng);
    expect_matmul_matches_loops(DType::kFloat32, {dim(rng), k}, {k, dim(rng)}, false, false, rng);
  }
}

TEST(Matmul, MatchesLoopsOnRandomShapesF64) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int64_t> dim(1, 40);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t k = dim(rng);
    expect_matmul_matches_loops(DType::kFloat64, {dim(rng), k}, {k, dim(rng)}, false, false, rng);
  }
}

TEST(Matmul, MatchesLoopsOnLargeSquareF32) {
  std::mt19937 rng(3);
  expect_matmul_matches_loops(DType::kFloat32, {130, 150}, {150, 140}, false, false, rng);
}

TEST(Matmul, TransposesA) {
  std::mt19937 rng(4);
  expect_matmul_matches_loops(DType::kFloat32, {11, 7}, {11, 5}, true, false, rng);
  expect_matmul_matches_loops(DType::kFloat64, {2, 64, 33}, {2, 64, 70}, true, false, rng);
}

TEST(Matmul, TransposesB) {
  std::mt19937 rng(5);
  expect_matmul_matches_loops(DType::kFloat32, {7, 11}, {5, 11}, false, true, rng);
  expect_matmul_matches_loops(DType::kFloat64, {2, 33, 64}, {2, 70, 64}, false, true, rng);
}

TEST(Matmul, TransposesBoth) {
  std::mt19937 rng(6);
  expect_matmul_matches_loops(DType::kFloat32, {11, 7}, {5, 11}, true, true, rng);
  expect_matmul_matches_loops(DType::kFloat64, {3, 64, 33}, {3, 70, 64}, true, true, rng);
}

TEST(Matmul, BroadcastsBatchDimsBothWays) {
  std::mt19937 rng(7);
  // a [2,1,M,K] with b [3,K,N] -> [2,3,M,N]: each side repeats along the other's batch dim.
  expect_matmul_matches_loops(DType::kFloat32, {2, 1, 4, 6}, {3, 6, 5}, false, false, rng);
  expect_matmul_matches_loops(DType::kFloat32, {4, 1, 3, 6}, {1, 2, 5, 3}, true, true, rng);
}

TEST(Matmul, BroadcastsUnbatchedRightOperandOverBatch) {
  std::mt19937 rng(8);
  expect_matmul_matches_loops(DType::kFloat32, {3, 4, 5, 6}, {6, 7}, false, false, rng);
  expect_matmul_matches_loops(DType::kFloat32, {3, 4, 5, 6}, {1, 7, 6}, false, true, rng);
  expect_matmul_matches_loops(DType::kFloat32, {3, 4, 6, 5}, {6, 7}, true, false, rng);
}

TEST(Matmul, BroadcastsUnbatchedLeftOperandOverBatch) {
  std::mt19937 rng(9);
  expect_matmul_matches_loops(DType::kFloat64, {5, 6}, {4, 6, 7}, false, false, rng);
  expect_matmul_matches_loops(DType::kFloat64, {6, 5}, {2, 3, 7, 6}, true, true, rng);
}

TEST(Matmul, RandomBatchedShapesWithRandomTransposes) {
  std::mt19937 rng(10);
  std::uniform_int_distribution<int64_t> dim(1, 9), batch(1, 3);
  std::bernoulli_distribution coin(0.5);
  for (int trial = 0; trial < 25; ++trial) {
    const int64_t m = dim(rng), k = dim(rng), n = dim(rng), b0 = batch(rng), b1 = batch(rng);
    const bool ta = coin(rng), tb = coin(rng);
    const Shape a = ta ? Shape{b0, 1, k, m} : Shape{b0, 1, m, k};
    const Shape b = tb ? Shape{b1, n, k} : Shape{b1, k, n};
    expect_matmul_matches_loops(DType::kFloat32, a, b, ta, tb, rng);
  }
}

TEST(Matmul, EmptyContractionGivesZeros) {
  const HostTensor a{DType::kFloat32, {2, 3, 0}, {}};
  const HostTensor b{DType::kFloat32, {2, 0, 4}, {}};
  const HostTensor out =
      call_kernel_directly(Kernel::kMatmul, {a, b}, DType::kFloat32, {2, 3, 4}, {0, 0});
  for (double v : out.values) EXPECT_EQ(v, 0.0);
}

TEST(Matmul, EmptyContractionGivesZerosInBf16) {
  const HostTensor a{DType::kBFloat16, {0, 3}, {}};
  const HostTensor b{DType::kBFloat16, {0, 4}, {}};
  const HostTensor out =
      call_kernel_directly(Kernel::kMatmul, {a, b}, DType::kBFloat16, {3, 4}, {1, 0});
  for (double v : out.values) EXPECT_EQ(v, 0.0);
}

TEST(Matmul, EmptyRowsOrBatchGiveEmptyOutput) {
  std::mt19937 rng(11);
  expect_matmul_matches_loops(DType::kFloat32, {2, 0, 5}, {2, 5, 3}, false, false, rng);
  expect_matmul_matches_loops(DType::kFloat32, {0, 4, 5}, {5, 3}, false, false, rng);
  expect_matmul_matches_loops(DType::kFloat64, {4, 5}, {5, 0}, false, false, rng);
}

TEST(Matmul, Bf16MatchesLoopsWithinBf16Tolerance) {
  std::mt19937 rng(12);
  expect_matmul_matches_loops(DType::kBFloat16, {33, 70}, {70, 21}, false, false, rng);
  expect_matmul_matches_loops(DType::kBFloat16, {2, 70, 33}, {21, 70}, true, true, rng);
}

TEST(Matmul, Bf16AccumulatesInF32) {
  // 1000 products 1 * (1 + 2^-7). In f32 every partial sum k + k/128 is exact, so the result is
  // 1007.8125, stored as the nearest bf16, 1008. A bf16 running sum (8-bit significand) drops
  // the 2^-7 once it passes 64 and then the whole term past 512, in any blocking order.
  const int64_t k = 1000;
  const HostTensor a{DType::kBFloat16, {1, k}, std::vector<double>(k, 1.0)};
  const HostTensor b{DType::kBFloat16, {k, 2}, std::vector<double>(2 * k, 1.0 + 1.0 / 128)};
  const HostTensor out = run_kernel(Kernel::kMatmul, {a, b}, DType::kBFloat16, {1, 2}, {0, 0});
  EXPECT_EQ(out.values, (std::vector<double>{1008.0, 1008.0}));
}

TEST(Matmul, IntegersAreExactInS32) {
  std::mt19937 rng(13);
  expect_matmul_matches_loops(DType::kInt32, {9, 13}, {13, 8}, false, false, rng);
  expect_matmul_matches_loops(DType::kInt32, {2, 13, 9}, {8, 13}, true, true, rng);
}

TEST(Matmul, IntegersAreExactInS64) {
  std::mt19937 rng(14);
  expect_matmul_matches_loops(DType::kInt64, {3, 9, 13}, {13, 8}, false, false, rng);
}

TEST(Matmul, RejectsContractionMismatch) {
  const std::string msg =
      matmul_rejection(DType::kFloat32, {3, 5}, DType::kFloat32, {6, 2}, {3, 2});
  EXPECT_TRUE(contains(msg, "matmul")) << msg;
  EXPECT_TRUE(contains(msg, "K=5")) << msg;
  EXPECT_TRUE(contains(msg, "K=6")) << msg;
}

TEST(Matmul, RejectsBatchDimsThatDoNotBroadcast) {
  const std::string msg =
      matmul_rejection(DType::kFloat32, {2, 3, 5}, DType::kFloat32, {4, 5, 2}, {4, 3, 2});
  EXPECT_TRUE(contains(msg, "broadcast")) << msg;
  EXPECT_TRUE(contains(msg, "[2,3,5]")) << msg;
}

TEST(Matmul, RejectsOutputShapeTheOperandsDoNotGive) {
  const std::string msg =
      matmul_rejection(DType::kFloat32, {2, 3, 5}, DType::kFloat32, {5, 4}, {2, 4, 3});
  EXPECT_TRUE(contains(msg, "[2,3,4]")) << msg;
}

TEST(Matmul, RejectsMixedDtypes) {
  EXPECT_FALSE(matmul_rejection(DType::kFloat32, {3, 5}, DType::kFloat64, {5, 2}, {3, 2}).empty());
}

TEST(Matmul, RejectsRankOneOperands) {
  EXPECT_FALSE(matmul_rejection(DType::kFloat32, {5}, DType::kFloat32, {5, 2}, {2}).empty());
}

TEST(Matmul, RejectsBool) {
  EXPECT_FALSE(matmul_rejection(DType::kBool, {3, 5}, DType::kBool, {5, 2}, {3, 2}).empty());
}

// ---- the bias (`matmul(a, b) + bias` folded into the call) -------------------------------------

TEST(MatmulBias, F32HasTheBitsOfTheProductAndASeparateAdd) {
  std::mt19937 rng(21);
  for (const BiasCase& c : kBiasCases) {
    const Shape out = product_shape(c);
    const int64_t n = out[out.rank() - 1];
    const HostTensor a = random_tensor(DType::kFloat32, c.a, rng);
    const HostTensor b = random_tensor(DType::kFloat32, c.b, rng);
    for (const Shape& bias_shape : {Shape{n}, Shape{1, 1, n}}) {
      const HostTensor bias = random_tensor(DType::kFloat32, bias_shape, rng);
      for (const int threads : {1, 2}) {
        const HostTensor plain = call_kernel_directly(Kernel::kMatmul, {a, b}, DType::kFloat32, out,
                                                      {c.ta, c.tb}, threads);
        const HostTensor with_bias = call_kernel_directly(
            Kernel::kMatmul, {a, b, bias}, DType::kFloat32, out, {c.ta, c.tb}, threads);
        for (std::size_t i = 0; i < plain.values.size(); ++i) {
          const float want = static_cast<float>(plain.values[i]) +
                             static_cast<float>(bias.values[i % static_cast<std::size_t>(n)]);
          ASSERT_EQ(static_cast<float>(with_bias.values[i]), want)
              << "a " << c.a.to_string() << ", b " << c.b.to_string() << ", bias "
              << bias_shape.to_string() << ", " << threads << " threads, element " << i;
        }
      }
    }
  }
}

// The loops' exact product plus the bias.
Reference with_bias(Reference ref, const HostTensor& bias) {
  const std::size_t n = bias.values.size();
  for (std::size_t i = 0; i < ref.values.size(); ++i) {
    ref.values[i] += bias.values[i % n];
    ref.scale[i] += std::abs(bias.values[i % n]);
  }
  return ref;
}

TEST(MatmulBias, Bf16AndF64MatchTheLoopsPlusTheBias) {
  std::mt19937 rng(22);
  for (const DType dtype : {DType::kBFloat16, DType::kFloat64}) {
    for (const BiasCase& c : kBiasCases) {
      const HostTensor a = random_tensor(dtype, c.a, rng);
      const HostTensor b = random_tensor(dtype, c.b, rng);
      const Reference ref = reference_matmul(a, b, c.ta, c.tb);
      const HostTensor bias = random_tensor(dtype, {ref.shape[ref.shape.rank() - 1]}, rng);
      for (const int threads : {1, 2}) {
        const HostTensor out = call_kernel_directly(Kernel::kMatmul, {a, b, bias}, dtype, ref.shape,
                                                    {c.ta, c.tb}, threads);
        expect_close(out, with_bias(ref, bias), dtype,
                     label(dtype) + " a " + c.a.to_string() + ", b " + c.b.to_string());
      }
    }
  }
}

TEST(MatmulBias, Bf16IsRoundedOnceAfterTheBias) {
  // The sum 1 + 2^-8 lies halfway between the bf16 values 1 and 1 + 2^-7 and rounds to 1 (even);
  // with the bias 2^-9 added first it lies above halfway and rounds to 1 + 2^-7. Rounding the
  // sum before adding the bias would give 1. k = 300 takes the staged path (two depth blocks).
  for (const int64_t k : {2, 300}) {
    std::vector<double> row(static_cast<std::size_t>(k), 0.0);
    row[0] = 1.0;
    row[1] = 1.0 / 256;
    const HostTensor a{DType::kBFloat16, {1, k}, row};
    const HostTensor b{DType::kBFloat16, {k, 2}, std::vector<double>(2 * k, 1.0)};
    const HostTensor bias{DType::kBFloat16, {2}, {1.0 / 512, 0.0}};
    const HostTensor out =
        run_kernel(Kernel::kMatmul, {a, b, bias}, DType::kBFloat16, {1, 2}, {0, 0});
    EXPECT_EQ(out.values, (std::vector<double>{1.0 + 1.0 / 128, 1.0})) << "k = " << k;
  }
}

TEST(MatmulBias, EmptyContractionGivesTheBias) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    const HostTensor a{dtype, {3, 0}, {}};
    const HostTensor b{dtype, {0, 2}, {}};
    const HostTensor bias{dtype, {2}, {1.5, -2.0}};
    const HostTensor out =
        call_kernel_directly(Kernel::kMatmul, {a, b, bias}, dtype, {3, 2}, {0, 0});
    EXPECT_EQ(out.values, (std::vector<double>{1.5, -2.0, 1.5, -2.0, 1.5, -2.0})) << label(dtype);
  }
}

TEST(MatmulBias, RejectsBiasesThatAreNotOneValuePerColumn) {
  auto message = [](DType dtype, const Shape& bias, DType bias_dtype = DType::kFloat32) {
    return invalid_argument_message(
        Kernel::kMatmul,
        {HostTensor{dtype, {3, 5}, std::vector<double>(15, 1.0)},
         HostTensor{dtype, {5, 4}, std::vector<double>(20, 1.0)},
         HostTensor{bias_dtype, bias,
                    std::vector<double>(static_cast<std::size_t>(bias.numel()), 1.0)}},
        dtype, {3, 4}, {0, 0});
  };
  for (const Shape& wrong : {Shape{3}, Shape{2, 4}, Shape{3, 4}, Shape{}}) {
    const std::string msg = message(DType::kFloat32, wrong);
    EXPECT_TRUE(contains(msg, "one value per output column (N=4)")) << msg;
    EXPECT_TRUE(contains(msg, wrong.to_string())) << msg;
  }
  EXPECT_TRUE(contains(message(DType::kFloat32, {4}, DType::kFloat64), "the operands' dtype"));
  const std::string ints = message(DType::kInt32, {4}, DType::kInt32);
  EXPECT_TRUE(contains(ints, "f32, f64 or bf16 products only")) << ints;
  EXPECT_TRUE(message(DType::kFloat32, {1, 4}).empty());
}

// ---- bf16 values as f32 (a cast of the product folded into the call) -------------------------

TEST(MatmulBf16AsF32, HoldsTheValuesOfTheBf16Output) {
  std::mt19937 rng(23);
  for (const BiasCase& c : kBiasCases) {
    const Shape out = product_shape(c);
    const HostTensor a = random_tensor(DType::kBFloat16, c.a, rng);
    const HostTensor b = random_tensor(DType::kBFloat16, c.b, rng);
    const HostTensor bias = random_tensor(DType::kBFloat16, {out[out.rank() - 1]}, rng);
    for (const bool biased : {false, true}) {
      std::vector<HostTensor> operands = {a, b};
      if (biased) operands.push_back(bias);
      for (const int threads : {1, 2}) {
        const HostTensor bf16 = call_kernel_directly(Kernel::kMatmul, operands, DType::kBFloat16,
                                                     out, {c.ta, c.tb}, threads);
        const HostTensor f32 = call_kernel_directly(Kernel::kMatmul, operands, DType::kFloat32, out,
                                                    {c.ta, c.tb, 1}, threads);
        EXPECT_EQ(f32.values, bf16.values) << "a " << c.a.to_string() << ", b " << c.b.to_string()
                                           << ", bias " << biased << ", " << threads << " threads";
      }
    }
  }
}

TEST(MatmulBf16AsF32, NeedsBf16OperandsAndAnF32Output) {
  auto message = [](DType operands, DType out) {
    return invalid_argument_message(Kernel::kMatmul,
                                    {HostTensor{operands, {3, 5}, std::vector<double>(15, 1.0)},
                                     HostTensor{operands, {5, 4}, std::vector<double>(20, 1.0)}},
                                    out, {3, 4}, {0, 0, 1});
  };
  EXPECT_TRUE(contains(message(DType::kFloat64, DType::kFloat32), "need bf16 or f32 operands"));
  EXPECT_TRUE(contains(message(DType::kBFloat16, DType::kBFloat16), "need an f32 output"));
  EXPECT_TRUE(message(DType::kBFloat16, DType::kFloat32).empty());
  EXPECT_TRUE(message(DType::kFloat32, DType::kFloat32).empty());  // rounded as read
}

// ---- f32 operands of a bf16 product (a cast to bf16 folded into the call) ---------------------

// Each f32 operand is rounded to bf16 as the product reads it: the bits of casting it first, for
// a bf16 output, bf16 values as f32, a bias and gelu's backward, on one thread and two.
TEST(MatmulF32OperandsOfABf16Product, HaveTheBitsOfOperandsCastToBf16First) {
  std::mt19937 rng(31);
  auto cast = [](const HostTensor& x) {
    return call_kernel_directly(Kernel::kCast, {x}, DType::kBFloat16, x.shape, {});
  };
  for (const BiasCase& c : kBiasCases) {
    const Shape out = product_shape(c);
    HostTensor a = random_tensor(DType::kFloat32, c.a, rng, -3, 3);
    const HostTensor b = random_tensor(DType::kFloat32, c.b, rng, -3, 3);
    a.values[0] = std::nan("");  // rounds to a quiet NaN either way
    const HostTensor bias = random_tensor(DType::kBFloat16, {out[out.rank() - 1]}, rng);
    const HostTensor x = random_tensor(DType::kBFloat16, out, rng, -4, 4);
    struct Form {
      DType out;
      std::vector<int64_t> ints;
      bool biased, gelu;
    };
    for (const Form& f : {Form{DType::kBFloat16, {c.ta, c.tb}, false, false},
                          Form{DType::kBFloat16, {c.ta, c.tb}, true, false},
                          Form{DType::kFloat32, {c.ta, c.tb, 1}, true, false},
                          Form{DType::kBFloat16, {c.ta, c.tb, 0, 1}, false, true}}) {
      for (const int which : {1, 2, 3}) {  // bit 1: a is f32, bit 2: b is f32
        std::vector<HostTensor> cast_first = {cast(a), cast(b)};
        std::vector<HostTensor> read_f32 = {(which & 1) ? a : cast(a), (which & 2) ? b : cast(b)};
        for (auto* operands : {&cast_first, &read_f32}) {
          if (f.biased) operands->push_back(bias);
          if (f.gelu) operands->push_back(x);
        }
        for (const int threads : {1, 2}) {
          const HostTensor want =
              call_kernel_directly(Kernel::kMatmul, cast_first, f.out, out, f.ints, threads);
          const HostTensor got =
              call_kernel_directly(Kernel::kMatmul, read_f32, f.out, out, f.ints, threads);
          ASSERT_EQ(got.values.size(), want.values.size());
          for (std::size_t i = 0; i < got.values.size(); ++i) {
            ASSERT_TRUE(got.values[i] == want.values[i] ||
                        (std::isnan(got.values[i]) && std::isnan(want.values[i])))
                << "a " << c.a.to_string() << ", b " << c.b.to_string() << ", f32 operands "
                << which << ", " << threads << " threads: element " << i << " is " << got.values[i]
                << ", " << want.values[i] << " cast first";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace axle::testing
