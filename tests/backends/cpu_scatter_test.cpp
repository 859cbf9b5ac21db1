// Tests backends/cpu/scatter.cpp (kScatterAdd, torch.scatter_add) against a plain loop: the
// output is the base with src[i] added where i, its `dim` coordinate replaced by index[i],
// lands.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"

namespace axle::testing {
namespace {

std::vector<double> reference_scatter_add(const HostTensor& base, const HostTensor& index,
                                          const HostTensor& src, int dim) {
  std::vector<double> out = base.values;
  const int rank = index.shape.rank();
  std::vector<int64_t> at(static_cast<std::size_t>(rank), 0);
  for (int64_t i = 0; i < index.shape.numel(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) {
      offset = offset * base.shape[d] + (d == dim ? static_cast<int64_t>(index.values[i]) : at[d]);
    }
    out[offset] = round_to(base.dtype, out[offset] + src.values[i]);
    for (int d = rank - 1; d >= 0; --d) {
      if (++at[d] < index.shape[d]) break;
      at[d] = 0;
    }
  }
  return out;
}

void expect_scatter_add_matches_loop(DType dtype, DType index_dtype, const Shape& base_shape,
                                     const Shape& index_shape, int dim, std::mt19937& rng) {
  const HostTensor base = random_tensor(dtype, base_shape, rng);
  const HostTensor src = random_tensor(dtype, index_shape, rng);
  const HostTensor index =
      random_tensor(index_dtype, index_shape, rng, 0, static_cast<double>(base_shape[dim] - 1));
  const HostTensor got =
      run_kernel(Kernel::kScatterAdd, {base, index, src}, dtype, base_shape, {dim});
  expect_values(got.values, reference_scatter_add(base, index, src, dim), tolerance(dtype),
                "scatter_add base " + base_shape.to_string() + ", index " +
                    index_shape.to_string() + ", dim " + std::to_string(dim));
}

TEST(ScatterAdd, MatchesLoopAlongEachDim) {
  std::mt19937 rng(1);
  for (int dim = 0; dim < 3; ++dim) {
    expect_scatter_add_matches_loop(DType::kFloat64, DType::kInt64, {4, 5, 6}, {3, 5, 4}, dim, rng);
  }
}

// An embedding's gradient: along dim 0, index rows of one value each (the kernel adds such a row
// whole), repeated, with some rows of mixed values among them (added element by element). Each
// output element gets its terms in index order, as the loop adds them: the same bits.
TEST(ScatterAdd, RowsOfOneIndexGiveTheLoopsBits) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> row(0, 9);
  for (const DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const int64_t width : {1, 37, 128}) {
      const Shape base_shape{10, width}, index_shape{50, width};
      const HostTensor base = random_tensor(dtype, base_shape, rng);
      const HostTensor src = random_tensor(dtype, index_shape, rng);
      HostTensor index{DType::kInt64, index_shape, {}};
      for (int64_t r = 0; r < 50; ++r) {
        const int v = row(rng);
        for (int64_t j = 0; j < width; ++j) {
          index.values.push_back(r % 7 == 3 ? row(rng) : v);  // every seventh row mixed
        }
      }
      const HostTensor got =
          run_kernel(Kernel::kScatterAdd, {base, index, src}, dtype, base_shape, {0});
      EXPECT_EQ(got.values, reference_scatter_add(base, index, src, 0))
          << dtype_name(dtype) << ", width " << width;
    }
  }
  // An index out of range in a row of one value, and in a mixed row.
  for (const std::vector<double>& bad : {std::vector<double>{0, 0, 4, 4}, {0, 0, 1, 9}}) {
    const HostTensor base{DType::kFloat32, {3, 2}, std::vector<double>(6, 0.0)};
    const HostTensor index{DType::kInt64, {2, 2}, bad};
    const HostTensor src{DType::kFloat32, {2, 2}, std::vector<double>(4, 1.0)};
    EXPECT_THROW(
        call_kernel_directly(Kernel::kScatterAdd, {base, index, src}, DType::kFloat32, {3, 2}, {0}),
        std::out_of_range);
  }
}

TEST(ScatterAdd, RepeatedIndicesAddUp) {
  const HostTensor base{DType::kFloat32, {4}, {1, 2, 3, 4}};
  const HostTensor index{DType::kInt32, {5}, {1, 1, 3, 1, 0}};
  const HostTensor src{DType::kFloat32, {5}, {10, 20, 30, 40, 50}};
  const HostTensor got =
      run_kernel(Kernel::kScatterAdd, {base, index, src}, DType::kFloat32, {4}, {0});
  EXPECT_EQ(got.values, (std::vector<double>{51, 72, 3, 34}));
}

TEST(ScatterAdd, WorksForEveryNumberType) {
  std::mt19937 rng(2);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    expect_scatter_add_matches_loop(dtype, DType::kInt32, {3, 4}, {3, 2}, 1, rng);
  }
}

TEST(ScatterAdd, TakesZeroDimOperands) {
  const HostTensor base{DType::kFloat64, {}, {1.5}};
  const HostTensor index{DType::kInt64, {}, {0}};
  const HostTensor src{DType::kFloat64, {}, {2}};
  EXPECT_EQ(run_kernel(Kernel::kScatterAdd, {base, index, src}, DType::kFloat64, {}, {0}).values,
            std::vector<double>{3.5});
}

TEST(ScatterAdd, RejectsIndicesOutOfRange) {
  const HostTensor base{DType::kFloat32, {2}, {0, 0}};
  const HostTensor index{DType::kInt64, {1}, {2}};
  const HostTensor src{DType::kFloat32, {1}, {1}};
  EXPECT_THROW(
      call_kernel_directly(Kernel::kScatterAdd, {base, index, src}, DType::kFloat32, {2}, {0}),
      std::out_of_range);
}

TEST(ScatterAdd, RejectsASourceOfAnotherShapeThanTheIndex) {
  const HostTensor base{DType::kFloat32, {3}, {0, 0, 0}};
  const HostTensor index{DType::kInt64, {2}, {0, 1}};
  const HostTensor src{DType::kFloat32, {3}, {1, 2, 3}};
  EXPECT_FALSE(
      invalid_argument_message(Kernel::kScatterAdd, {base, index, src}, DType::kFloat32, {3}, {0})
          .empty());
}

}  // namespace
}  // namespace axle::testing
