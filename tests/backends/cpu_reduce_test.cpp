// Tests backends/cpu/reduce.cpp: every reduction against plain double-precision loops over random
// shapes (fixed seed) and every dim subset, plus accuracy, empty dims and NaN/inf behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

// The elements of x reduced into each output element, in input order.
std::vector<std::vector<double>> reduced_groups(const HostTensor& x, const std::vector<int>& dims) {
  const Shape& s = x.shape;
  std::vector<bool> reduced(static_cast<std::size_t>(s.rank()), false);
  for (int d : dims) reduced[d] = true;
  int64_t out_numel = 1;
  for (int d = 0; d < s.rank(); ++d) out_numel *= reduced[d] ? 1 : s[d];
  std::vector<std::vector<double>> groups(static_cast<std::size_t>(out_numel));
  for (int64_t i = 0; i < s.numel(); ++i) {
    int64_t rest = i, out = 0, out_stride = 1;
    for (int d = s.rank() - 1; d >= 0; --d) {
      const int64_t index = rest % s[d];
      rest /= s[d];
      if (reduced[d]) continue;
      out += index * out_stride;
      out_stride *= s[d];
    }
    groups[out].push_back(x.values[i]);
  }
  return groups;
}

Shape reduced_shape(const Shape& in, const std::vector<int>& dims, bool keepdim) {
  Shape out;
  for (int d = 0; d < in.rank(); ++d) {
    const bool r = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!r)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

HostTensor run_reduce(Kernel k, const HostTensor& x, const std::vector<int>& dims, bool keepdim,
                      DType out_dtype) {
  std::vector<int64_t> ints{keepdim};
  ints.insert(ints.end(), dims.begin(), dims.end());
  return run_kernel(k, {x}, out_dtype, reduced_shape(x.shape, dims, keepdim), ints);
}

// Every subset of {0, .., rank-1}, ascending, including the empty one and non-adjacent ones.
std::vector<std::vector<int>> all_dim_sets(int rank) {
  std::vector<std::vector<int>> sets;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    std::vector<int> dims;
    for (int d = 0; d < rank; ++d) {
      if (mask & (1 << d)) dims.push_back(d);
    }
    sets.push_back(dims);
  }
  return sets;
}

std::string describe(const Shape& s, const std::vector<int>& dims, bool keepdim) {
  std::string out = s.to_string() + " dims {";
  for (int d : dims) out += std::to_string(d) + ",";
  return out + (keepdim ? "} keepdim" : "}");
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double abs_sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::abs(x);
  return std::max(s, 1.0);
}
double max_of(const std::vector<double>& v) {
  double m = -kInf;
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? kNaN : std::max(m, x);
  return m;
}
double min_of(const std::vector<double>& v) {
  double m = kInf;
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? kNaN : std::min(m, x);
  return m;
}
double logsumexp_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  return std::log(s);
}

const std::vector<Shape> kShapes = {Shape{4, 1, 6}, Shape{3, 5, 2, 7}, Shape{2, 3, 40},
                                    Shape{37, 3}, Shape{6}};

// ---- Sum, mean, max, min, logsumexp over every dim set ---------------------------------------

class Reduction : public ::testing::TestWithParam<Kernel> {};

TEST_P(Reduction, MatchesDoubleReferenceOverEveryDimSetAndDtype) {
  const Kernel k = GetParam();
  const bool floats_only = k == Kernel::kMean || k == Kernel::kLogSumExp;
  std::mt19937 rng(20);
  for (DType dtype : floats_only ? kFloats : kAll) {
    // torch sums bool into s64; everything else keeps the input dtype here.
    const DType out_dtype = k == Kernel::kSum && dtype == DType::kBool ? DType::kInt64 : dtype;
    for (const Shape& shape : kShapes) {
      const HostTensor x = random_tensor(dtype, shape, rng, -3, 3);
      for (const auto& dims : all_dim_sets(shape.rank())) {
        for (bool keepdim : {false, true}) {
          const auto groups = reduced_groups(x, dims);
          std::vector<double> want, scale;
          for (const auto& g : groups) {
            const double v = k == Kernel::kSum         ? sum_of(g)
                             : k == Kernel::kMean      ? sum_of(g) / static_cast<double>(g.size())
                             : k == Kernel::kReduceMax ? max_of(g)
                             : k == Kernel::kReduceMin ? min_of(g)
                                                       : logsumexp_of(g);
            want.push_back(round_to(out_dtype, v));
            // A sum is exact only up to the size of its terms, not of its (cancelling) result.
            const double terms = k == Kernel::kSum ? abs_sum_of(g)
                                 : k == Kernel::kMean
                                     ? abs_sum_of(g) / static_cast<double>(g.size())
                                     : 1.0;
            scale.push_back(std::max(terms, std::abs(v)));
          }
          const HostTensor got = run_reduce(k, x, dims, keepdim, out_dtype);
          expect_values(got.values, want, tolerance(out_dtype),
                        std::string(kernel_name(k)) + " " + label(dtype) + " " +
                            describe(shape, dims, keepdim),
                        scale);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuReduce, Reduction,
                         ::testing::Values(Kernel::kSum, Kernel::kMean, Kernel::kReduceMax,
                                           Kernel::kReduceMin, Kernel::kLogSumExp),
                         [](const auto& info) { return std::string(kernel_name(info.param)); });

// Rows and columns longer than the kernels' unrolled blocks and column chunks, with tails.
TEST(CpuReduce, LastAndFirstDimOfLargeMatrixMatchReference) {
  std::mt19937 rng(21);
  const HostTensor x = random_tensor(DType::kFloat32, Shape{257, 1031}, rng);
  for (Kernel k : {Kernel::kSum, Kernel::kReduceMax, Kernel::kLogSumExp}) {
    for (int dim : {0, 1}) {
      std::vector<double> want, scale;
      for (const auto& g : reduced_groups(x, {dim})) {
        want.push_back(k == Kernel::kSum         ? sum_of(g)
                       : k == Kernel::kReduceMax ? max_of(g)
                                                 : logsumexp_of(g));
        scale.push_back(k == Kernel::kSum ? abs_sum_of(g) : std::max(1.0, std::abs(want.back())));
      }
      expect_values(run_reduce(k, x, {dim}, false, DType::kFloat32).values, want,
                    tolerance(DType::kFloat32),
                    std::string(kernel_name(k)) + " dim " + std::to_string(dim), scale);
    }
  }
}

// Reducing dims {0, 2} of [a, c, b] reads each output's a runs of b in place; that must give the
// bits of reducing the same terms as one contiguous row ([c, a, b] over {1, 2}), runs that end
// inside a group of the reducer's lanes included, and agree with double loops (NaNs too).
TEST(CpuReduce, ReducingOuterAndInnerDimsGivesTheContiguousRowsBits) {
  std::mt19937 rng(26);
  for (const Shape& shape : {Shape{5, 3, 21}, Shape{16, 12, 420}, Shape{2, 7, 3}}) {
    const int64_t a = shape[0], c = shape[1], b = shape[2];
    HostTensor x = random_tensor(DType::kFloat32, shape, rng, -3, 3);
    x.values[static_cast<std::size_t>(b + 1)] = std::nan("");  // output 1 holds a NaN
    HostTensor rows{DType::kFloat32, Shape{c, a, b}, std::vector<double>(x.values.size())};
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        std::copy_n(x.values.begin() + (i * c + j) * b, b, rows.values.begin() + (j * a + i) * b);
      }
    }
    for (Kernel k : {Kernel::kSum, Kernel::kMean, Kernel::kReduceMax, Kernel::kReduceMin}) {
      const std::string what = std::string(kernel_name(k)) + " of " + shape.to_string();
      const HostTensor got = run_reduce(k, x, {0, 2}, false, DType::kFloat32);
      const HostTensor want = run_reduce(k, rows, {1, 2}, false, DType::kFloat32);
      ASSERT_EQ(got.values.size(), static_cast<std::size_t>(c)) << what;
      const auto groups = reduced_groups(x, {0, 2});
      for (int64_t j = 0; j < c; ++j) {
        const double v = got.values[j];
        EXPECT_TRUE(v == want.values[j] || (std::isnan(v) && std::isnan(want.values[j])))
            << what << " output " << j << ": " << v << " against " << want.values[j];
        const auto& g = groups[j];
        const double ref = k == Kernel::kSum         ? sum_of(g)
                           : k == Kernel::kMean      ? sum_of(g) / static_cast<double>(g.size())
                           : k == Kernel::kReduceMax ? max_of(g)
                                                     : min_of(g);
        if (std::isnan(ref)) {
          EXPECT_TRUE(std::isnan(v)) << what << " output " << j;
        } else {
          const double scale = k == Kernel::kSum ? abs_sum_of(g) : std::abs(ref);
          EXPECT_NEAR(v, ref, 1e-6 * std::max(1.0, scale)) << what << " output " << j;
        }
      }
    }
  }
}

// Reductions down columns wide enough to split their columns over threads, or long enough to
// split their rows into parts (the last shorter), give one thread's bits on two and three, with
// column counts that split into ragged runs and outer dims kept.
TEST(CpuReduce, ColumnReductionsOnSeveralThreadsGiveOneThreadsBits) {
  std::mt19937 rng(27);
  struct Case {
    Shape shape;
    std::vector<int> dims;
  };
  for (const Case& c :
       {Case{Shape{40, 4100}, {0}}, Case{Shape{3, 20, 8200}, {1}}, Case{Shape{4, 8, 2048}, {0, 1}},
        Case{Shape{2000, 40}, {0}}, Case{Shape{7000, 40}, {0}}}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt64}) {
      HostTensor x = random_tensor(dtype, c.shape, rng, -3, 3);
      if (dtype != DType::kInt64) x.values[5] = std::nan("");  // column 5 holds a NaN
      std::vector<int64_t> ints{0};
      ints.insert(ints.end(), c.dims.begin(), c.dims.end());
      const Shape out = reduced_shape(x.shape, c.dims, false);
      for (Kernel k : {Kernel::kSum, Kernel::kMean, Kernel::kReduceMax, Kernel::kReduceMin}) {
        if (k == Kernel::kMean && dtype == DType::kInt64) continue;
        const HostTensor one = call_kernel_directly(k, {x}, dtype, out, ints, 1);
        for (int threads : {2, 3}) {
          const HostTensor many = call_kernel_directly(k, {x}, dtype, out, ints, threads);
          ASSERT_EQ(many.values.size(), one.values.size());
          for (std::size_t i = 0; i < one.values.size(); ++i) {
            const double a = many.values[i], b = one.values[i];
            ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b)))
                << kernel_name(k) << " " << label(dtype) << " of " << c.shape.to_string() << " on "
                << threads << " threads: output " << i << " is " << a << ", " << b << " on one";
          }
        }
      }
    }
  }
}

TEST(CpuReduce, F32SumOfMillionElementsStaysWithin1e5OfDouble) {
  std::mt19937 rng(22);
  // A large leading row, then a million small terms: each small term is below half an f32 ulp of
  // a running sum of 1e4, so an f32 accumulator (even one per lane) would drop them all (~6e-4).
  HostTensor x = random_tensor(DType::kFloat32, Shape{1 << 16, 16}, rng, 0, 2e-4);
  for (int i = 0; i < 16; ++i) x.values[i] = 1e4;
  for (int dim : {0, -1}) {  // down the 16 columns, and all 1M elements as one row
    HostTensor shaped = x;
    if (dim < 0) shaped.shape = Shape{1 << 20};
    const std::vector<int> dims{std::max(dim, 0)};
    std::vector<double> want;
    for (const auto& g : reduced_groups(shaped, dims)) want.push_back(sum_of(g));
    expect_values(run_reduce(Kernel::kSum, shaped, dims, false, DType::kFloat32).values, want, 1e-5,
                  dim < 0 ? "row" : "columns", want);
  }
}

TEST(CpuReduce, Bf16SumAccumulatesBeyondBf16Precision) {
  // 4096 ones: a bf16 accumulator would stop at 256 (256 + 1 rounds back to 256).
  const HostTensor x{DType::kBFloat16, Shape{4096}, std::vector<double>(4096, 1.0)};
  EXPECT_EQ(run_reduce(Kernel::kSum, x, {0}, false, DType::kBFloat16).values[0], 4096);
}

TEST(CpuReduce, IntegerSumAccumulatesInInt64) {
  const HostTensor x{DType::kInt32, Shape{3}, {2e9, 2e9, 2e9}};
  EXPECT_EQ(run_reduce(Kernel::kSum, x, {0}, false, DType::kInt64).values[0], 6e9);
}

TEST(CpuReduce, BoolSumCountsTrueElements) {
  const HostTensor x{DType::kBool, Shape{2, 3}, {1, 0, 1, 1, 1, 1}};
  EXPECT_EQ(run_reduce(Kernel::kSum, x, {1}, false, DType::kInt64).values,
            (std::vector<double>{2, 3}));
}

TEST(CpuReduce, EmptyDimListCopiesInput) {
  std::mt19937 rng(23);
  const HostTensor x = random_tensor(DType::kFloat32, Shape{3, 4}, rng);
  for (Kernel k : {Kernel::kSum, Kernel::kReduceMax, Kernel::kMean}) {
    EXPECT_EQ(run_reduce(k, x, {}, false, DType::kFloat32).values, x.values) << kernel_name(k);
  }
}

// ---- Empty reductions, NaN and infinities ----------------------------------------------------

TEST(CpuReduce, SumOverEmptyDimIsZero) {
  const HostTensor x{DType::kFloat32, Shape{0, 3}, {}};
  EXPECT_EQ(run_reduce(Kernel::kSum, x, {0}, false, DType::kFloat32).values,
            (std::vector<double>{0, 0, 0}));
  const HostTensor y{DType::kInt64, Shape{3, 0}, {}};
  EXPECT_EQ(run_reduce(Kernel::kSum, y, {1}, true, DType::kInt64).values,
            (std::vector<double>{0, 0, 0}));
}

TEST(CpuReduce, MeanOverEmptyDimIsNaN) {
  const HostTensor x{DType::kFloat64, Shape{0, 2}, {}};
  const HostTensor got = run_reduce(Kernel::kMean, x, {0}, false, DType::kFloat64);
  ASSERT_EQ(got.values.size(), 2u);
  EXPECT_TRUE(std::isnan(got.values[0]) && std::isnan(got.values[1]));
}

TEST(CpuReduce, ReductionOverKeptEmptyDimGivesEmptyOutput) {
  const HostTensor x{DType::kFloat32, Shape{0, 3}, {}};
  EXPECT_TRUE(run_reduce(Kernel::kReduceMax, x, {1}, false, DType::kFloat32).values.empty());
}

TEST(CpuReduce, MaxAndMinOverEmptyDimThrow) {
  const HostTensor x{DType::kFloat32, Shape{3, 0}, {}};
  EXPECT_THROW(run_reduce(Kernel::kReduceMax, x, {1}, false, DType::kFloat32), std::runtime_error);
  EXPECT_THROW(run_reduce(Kernel::kReduceMin, x, {1}, false, DType::kFloat32), std::runtime_error);
}

TEST(CpuReduce, MaxAndMinPropagateNaNAlongRowsAndColumns) {
  const HostTensor x{DType::kFloat32, Shape{2, 3}, {1, kNaN, 3, 4, 5, 6}};
  for (Kernel k : {Kernel::kReduceMax, Kernel::kReduceMin}) {
    const HostTensor rows = run_reduce(k, x, {1}, false, DType::kFloat32);
    EXPECT_TRUE(std::isnan(rows.values[0])) << kernel_name(k);
    EXPECT_EQ(rows.values[1], k == Kernel::kReduceMax ? 6 : 4);
    const HostTensor cols = run_reduce(k, x, {0}, false, DType::kFloat32);
    EXPECT_TRUE(std::isnan(cols.values[1])) << kernel_name(k);
    EXPECT_EQ(cols.values[2], k == Kernel::kReduceMax ? 6 : 3);
  }
}

TEST(CpuReduce, LogSumExpHandlesInfinitiesAndLargeValues) {
  const HostTensor x{DType::kFloat32, Shape{4, 2}, {-kInf, -kInf, -kInf, 0, 1000, 1000, kInf, 1}};
  const HostTensor got = run_reduce(Kernel::kLogSumExp, x, {1}, false, DType::kFloat32);
  EXPECT_EQ(got.values[0], -kInf);
  EXPECT_NEAR(got.values[1], 0, 1e-6);
  EXPECT_NEAR(got.values[2], 1000 + std::log(2.0), 1e-3);
  EXPECT_EQ(got.values[3], kInf);
  // The same along columns.
  const HostTensor t{DType::kFloat32, Shape{2, 4}, {-kInf, -kInf, 1000, kInf, -kInf, 0, 1000, 1}};
  const HostTensor cols = run_reduce(Kernel::kLogSumExp, t, {0}, false, DType::kFloat32);
  EXPECT_EQ(cols.values[0], -kInf);
  EXPECT_NEAR(cols.values[1], 0, 1e-6);
  EXPECT_NEAR(cols.values[2], 1000 + std::log(2.0), 1e-3);
  EXPECT_EQ(cols.values[3], kInf);
}

TEST(CpuReduce, MeanOfIntegersThrows) {
  const HostTensor x{DType::kInt32, Shape{2}, {1, 2}};
  EXPECT_THROW(run_reduce(Kernel::kMean, x, {0}, false, DType::kInt32), std::runtime_error);
}

TEST(CpuReduce, UnsortedDimsThrow) {
  const HostTensor x{DType::kFloat32, Shape{2, 2}, {1, 2, 3, 4}};
  EXPECT_THROW(run_kernel(Kernel::kSum, {x}, DType::kFloat32, Shape{}, {0, 1, 0}),
               std::runtime_error);
}

TEST(CpuReduce, OutputShapeDisagreeingWithKeepdimThrows) {
  const HostTensor x{DType::kFloat32, Shape{2, 3}, {1, 2, 3, 4, 5, 6}};
  EXPECT_THROW(run_kernel(Kernel::kSum, {x}, DType::kFloat32, Shape{2}, {1, 1}),
               std::runtime_error);
}

// ---- argmax ----------------------------------------------------------------------------------

int64_t argmax_of(const std::vector<double>& v) {
  int64_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (std::isnan(v[best])) break;
    if (v[i] > v[best] || std::isnan(v[i])) best = static_cast<int64_t>(i);
  }
  return best;
}

TEST(CpuReduce, ArgMaxMatchesReferenceAlongEveryDimAndDtype) {
  std::mt19937 rng(24);
  for (DType dtype : kAll) {
    for (const Shape& shape : kShapes) {
      // Few distinct values, so ties are common and first-index order is exercised.
      const HostTensor x = random_tensor(dtype, shape, rng, -2, 2);
      for (int dim = 0; dim < shape.rank(); ++dim) {
        for (bool keepdim : {false, true}) {
          std::vector<double> want;
          for (const auto& g : reduced_groups(x, {dim})) {
            want.push_back(static_cast<double>(argmax_of(g)));
          }
          const HostTensor got = run_kernel(Kernel::kArgMax, {x}, DType::kInt64,
                                            reduced_shape(shape, {dim}, keepdim), {keepdim, dim});
          EXPECT_EQ(got.values, want) << label(dtype) << " " << describe(shape, {dim}, keepdim);
        }
      }
    }
  }
}

TEST(CpuReduce, ArgMaxTiesPickFirstIndex) {
  const HostTensor x{DType::kFloat32, Shape{2, 4}, {1, 5, 5, 2, 3, 3, 3, 3}};
  EXPECT_EQ(run_kernel(Kernel::kArgMax, {x}, DType::kInt64, Shape{2}, {0, 1}).values,
            (std::vector<double>{1, 0}));
  const HostTensor t{DType::kInt32, Shape{3, 2}, {7, 1, 7, 9, 2, 9}};
  EXPECT_EQ(run_kernel(Kernel::kArgMax, {t}, DType::kInt64, Shape{2}, {0, 0}).values,
            (std::vector<double>{0, 1}));
}

TEST(CpuReduce, ArgMaxTreatsNaNAsMaximum) {
  const HostTensor x{DType::kFloat64, Shape{5}, {1, kNaN, 9, kNaN, 3}};
  EXPECT_EQ(run_kernel(Kernel::kArgMax, {x}, DType::kInt64, Shape{}, {0, 0}).values,
            (std::vector<double>{1}));
}

TEST(CpuReduce, ArgMaxOverEmptyDimThrows) {
  const HostTensor x{DType::kFloat32, Shape{2, 0}, {}};
  EXPECT_THROW(run_kernel(Kernel::kArgMax, {x}, DType::kInt64, Shape{2}, {0, 1}),
               std::runtime_error);
}

// ---- softmax ---------------------------------------------------------------------------------

std::vector<double> softmax_reference(const HostTensor& x, int dim, bool log) {
  // Scatter each group's softmax back to its input positions: groups list elements in input
  // order, so walk the input again in the same order.
  const auto groups = reduced_groups(x, {dim});
  std::vector<std::vector<double>> results(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double m = max_of(groups[g]);
    double s = 0;
    for (double v : groups[g]) s += std::exp(v - m);
    for (double v : groups[g])
      results[g].push_back(log ? v - m - std::log(s) : std::exp(v - m) / s);
  }
  // Map each input element to its group by building groups of indices the same way.
  HostTensor indices{x.dtype, x.shape, {}};
  for (int64_t i = 0; i < x.shape.numel(); ++i) indices.values.push_back(static_cast<double>(i));
  const auto index_groups = reduced_groups(indices, {dim});
  std::vector<double> out(x.values.size());
  for (std::size_t g = 0; g < index_groups.size(); ++g) {
    for (std::size_t j = 0; j < index_groups[g].size(); ++j) {
      out[static_cast<std::size_t>(index_groups[g][j])] = results[g][j];
    }
  }
  return out;
}

TEST(CpuReduce, SoftmaxAndLogSoftmaxMatchReferenceAlongEveryDim) {
  std::mt19937 rng(25);
  for (DType dtype : kFloats) {
    for (const Shape& shape : kShapes) {
      const HostTensor x = random_tensor(dtype, shape, rng, -5, 5);
      for (int dim = 0; dim < shape.rank(); ++dim) {
        for (bool log : {false, true}) {
          const Kernel k = log ? Kernel::kLogSoftmax : Kernel::kSoftmax;
          expect_values(run_kernel(k, {x}, dtype, shape, {dim}).values,
                        softmax_reference(x, dim, log), tolerance(dtype),
                        std::string(kernel_name(k)) + " " + label(dtype) + " " +
                            describe(shape, {dim}, false));
        }
      }
    }
  }
}

// The kernels' scratch comes from the heap, where the allocator places it at any 16-byte
// boundary (each thread has its own arena). Eigen computes elements before the first aligned
// one on its scalar path, whose exp and log can differ from the vector ones in the last bit, so
// the same inputs must give the same bits wherever the scratch lands: here the heap is shifted
// between calls by blocks held of the scratch's own sizes.
TEST(CpuReduce, SoftmaxAndLogSumExpBitsDoNotDependOnWhereTheHeapPutsScratch) {
  std::mt19937 rng(17);
  const HostTensor rows = random_tensor(DType::kFloat32, {6, 37}, rng, -6, 6);
  const HostTensor columns = random_tensor(DType::kFloat32, {3, 37, 29}, rng, -6, 6);
  auto all = [&] {
    std::vector<HostTensor> out;
    for (Kernel k : {Kernel::kSoftmax, Kernel::kLogSoftmax}) {
      out.push_back(run_kernel(k, {rows}, DType::kFloat32, rows.shape, {1}));
      out.push_back(run_kernel(k, {columns}, DType::kFloat32, columns.shape, {1}));
    }
    out.push_back(run_reduce(Kernel::kLogSumExp, rows, {1}, false, DType::kFloat32));
    out.push_back(run_reduce(Kernel::kLogSumExp, columns, {1}, false, DType::kFloat32));
    return out;
  };
  const std::vector<HostTensor> want = all();
  std::vector<std::unique_ptr<char[]>> held;
  for (int shift = 1; shift <= 12; ++shift) {
    for (std::size_t bytes :
         {std::size_t{16} * shift, std::size_t{37 * 4}, std::size_t{29 * 4}, std::size_t{29 * 8}}) {
      held.push_back(std::make_unique<char[]>(bytes));
    }
    const std::vector<HostTensor> got = all();
    for (std::size_t i = 0; i < want.size(); ++i) {
      // Finite values, each exactly an f32: equal doubles are equal bits.
      ASSERT_EQ(got[i].values, want[i].values) << "result " << i << " after shift " << shift;
    }
  }
}

TEST(CpuReduce, SoftmaxRowsSumToOneEvenForLargeInputs) {
  std::mt19937 rng(26);
  for (int dim : {0, 1}) {
    HostTensor x = random_tensor(DType::kFloat32, Shape{600, 700}, rng, -5, 5);
    for (double& v : x.values) v += 1000;  // exp(1000) overflows without the max shift
    const HostTensor got = run_kernel(Kernel::kSoftmax, {x}, DType::kFloat32, x.shape, {dim});
    for (const auto& g : reduced_groups(got, {dim})) {
      ASSERT_NEAR(sum_of(g), 1.0, 1e-4) << "dim " << dim;
    }
  }
}

TEST(CpuReduce, SoftmaxOfAllNegativeInfinityRowIsNaNAsTorch) {
  const HostTensor x{DType::kFloat32, Shape{2, 2}, {-kInf, -kInf, 0, 0}};
  const HostTensor got = run_kernel(Kernel::kSoftmax, {x}, DType::kFloat32, x.shape, {1});
  EXPECT_TRUE(std::isnan(got.values[0]) && std::isnan(got.values[1]));
  EXPECT_EQ(got.values[2], 0.5);
  EXPECT_EQ(got.values[3], 0.5);
}

TEST(CpuReduce, SoftmaxOnIntegersThrows) {
  const HostTensor x{DType::kInt64, Shape{2}, {1, 2}};
  EXPECT_THROW(run_kernel(Kernel::kSoftmax, {x}, DType::kInt64, x.shape, {0}), std::runtime_error);
}

}  // namespace
}  // namespace axle::testing
