// tests/backends: CPU data-movement kernels (backends/cpu/data_movement.cpp) against plain loops
// over multi-indices, on random shapes (fixed seed) in every element size.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

// Every dtype, so each element size (1, 2, 4, 8 bytes) is covered at least once.
constexpr DType kDTypes[] = {DType::kBool,  DType::kBFloat16, DType::kFloat32,
                             DType::kInt32, DType::kFloat64,  DType::kInt64};

using Index = std::vector<int64_t>;

Index unravel(int64_t flat, const Shape& shape) {
  Index idx(shape.rank());
  for (int d = shape.rank() - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const Index& idx, const Shape& shape) {
  int64_t flat = 0;
  for (int d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// Dims of 1..max, with an occasional 0 so empty tensors come up.
Shape random_shape(std::mt19937& rng, int rank, int64_t max_dim = 5, bool allow_zero = true) {
  Shape shape;
  for (int d = 0; d < rank; ++d) {
    const bool zero = allow_zero && std::uniform_int_distribution<int>(0, 9)(rng) == 0;
    shape.push_back(zero ? 0 : std::uniform_int_distribution<int64_t>(1, max_dim)(rng));
  }
  return shape;
}

int random_int(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

HostTensor index_tensor(DType dtype, Shape shape, std::vector<double> values) {
  return {dtype, shape, std::move(values)};
}

// Calls the kernel function itself, bypassing the backend (which wraps every failure in
// std::runtime_error), so tests can see the exception type a kernel throws.
void call_kernel(Kernel kernel, const std::vector<HostTensor>& inputs, DType out_dtype,
                 const Shape& out_shape, std::vector<int64_t> ints) {
  KernelCall call{kernel, {}, 0, std::move(ints), {}};
  std::vector<BufferDesc> descs;
  std::vector<std::vector<std::byte>> data;
  descs.reserve(inputs.size());
  for (const HostTensor& in : inputs) {
    descs.push_back({in.dtype, in.shape});
    data.push_back(encode(in));
  }
  std::vector<cpu::ConstView> views;
  for (std::size_t i = 0; i < inputs.size(); ++i) views.push_back({data[i].data(), &descs[i]});
  BufferDesc out_desc{out_dtype, out_shape};
  std::vector<std::byte> out(std::max<std::size_t>(out_desc.bytes(), 1));
  cpu::ComputePool pool(1);  // the calling thread alone
  cpu::kernel_table()[static_cast<std::size_t>(kernel)](
      cpu::KernelArgs{call, views, {out.data(), &out_desc}, pool});
}

std::string out_of_range_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::out_of_range& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::out_of_range";
  return {};
}

TEST(Copy, ReshapesEveryElementSize) {
  std::mt19937 rng(1);
  for (DType dtype : kDTypes) {
    HostTensor x = random_tensor(dtype, {2, 3, 4}, rng);
    EXPECT_EQ(run_kernel(Kernel::kCopy, {x}, dtype, {6, 4}).values, x.values);
    EXPECT_EQ(run_kernel(Kernel::kCopy, {x}, dtype, {24}).values, x.values);
  }
  HostTensor scalar = random_tensor(DType::kFloat32, {}, rng);
  EXPECT_EQ(run_kernel(Kernel::kCopy, {scalar}, DType::kFloat32, {1, 1}).values, scalar.values);
  EXPECT_TRUE(run_kernel(Kernel::kCopy, {random_tensor(DType::kFloat32, {0, 3}, rng)},
                         DType::kFloat32, {3, 0})
                  .values.empty());
}

TEST(Copy, RejectsDifferentElementCount) {
  std::mt19937 rng(2);
  EXPECT_THROW(run_kernel(Kernel::kCopy, {random_tensor(DType::kFloat32, {2, 3}, rng)},
                          DType::kFloat32, {7}),
               std::runtime_error);
}

TEST(OptimizationBarrier, GivesTheNamedOperandBitForBit) {
  std::mt19937 rng(3);
  for (DType dtype : kDTypes) {
    const HostTensor a = random_tensor(dtype, {2, 3, 4}, rng);
    const HostTensor b = random_tensor(DType::kFloat32, {5}, rng);
    EXPECT_EQ(run_kernel(Kernel::kOptimizationBarrier, {a, b}, dtype, {2, 3, 4}, {0}).values,
              a.values);
    EXPECT_EQ(run_kernel(Kernel::kOptimizationBarrier, {a, b}, DType::kFloat32, {5}, {1}).values,
              b.values);
  }
  const HostTensor empty = random_tensor(DType::kFloat32, {0, 3}, rng);
  EXPECT_TRUE(run_kernel(Kernel::kOptimizationBarrier, {empty}, DType::kFloat32, {0, 3}, {0})
                  .values.empty());
}

TEST(OptimizationBarrier, RejectsAnOperandItDoesNotHaveOrAnotherShape) {
  std::mt19937 rng(4);
  const HostTensor a = random_tensor(DType::kFloat32, {2, 3}, rng);
  EXPECT_THROW(run_kernel(Kernel::kOptimizationBarrier, {a}, DType::kFloat32, {2, 3}, {1}),
               std::runtime_error);
  EXPECT_THROW(run_kernel(Kernel::kOptimizationBarrier, {a}, DType::kFloat32, {2, 3}, {}),
               std::runtime_error);
  EXPECT_THROW(run_kernel(Kernel::kOptimizationBarrier, {a}, DType::kFloat32, {3, 2}, {0}),
               std::runtime_error);
}

void check_permute(const HostTensor& x, const Index& perm) {
  Shape out_shape;
  for (int64_t p : perm) out_shape.push_back(x.shape[static_cast<int>(p)]);
  HostTensor out = run_kernel(Kernel::kPermute, {x}, x.dtype, out_shape, perm);
  ASSERT_EQ(out.values.size(), static_cast<std::size_t>(out_shape.numel()));
  for (int64_t i = 0; i < out_shape.numel(); ++i) {
    Index o = unravel(i, out_shape);
    Index in(perm.size());
    for (std::size_t d = 0; d < perm.size(); ++d) in[perm[d]] = o[d];
    ASSERT_EQ(out.values[i], x.values[ravel(in, x.shape)])
        << dtype_name(x.dtype) << x.shape.to_string() << " element " << i;
  }
}

TEST(Permute, MatchesLoopsOnRandomShapes) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    HostTensor x = random_tensor(dtype, random_shape(rng, random_int(rng, 0, 5)), rng);
    Index perm(x.shape.rank());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    check_permute(x, perm);
  }
}

// Short runs kept whole (a conv kernel's taps when its channels swap), every length and dtype.
TEST(Permute, MovesShortRunsWhole) {
  std::mt19937 rng(5);
  for (DType dtype : kDTypes) {
    for (int64_t run = 2; run <= 17; ++run)
      check_permute(random_tensor(dtype, {5, 7, run}, rng), {1, 0, 2});
    check_permute(random_tensor(dtype, {6, 4, 3, 3}, rng), {1, 0, 2, 3});
  }
}

TEST(Permute, TransposesMatricesLargerThanOneTile) {
  std::mt19937 rng(4);
  for (DType dtype : kDTypes) {
    check_permute(random_tensor(dtype, {67, 131}, rng), {1, 0});
    check_permute(random_tensor(dtype, {3, 40, 70}, rng), {0, 2, 1});
    check_permute(random_tensor(dtype, {33, 5, 37}, rng), {2, 1, 0});
  }
}

TEST(Permute, RejectsNonPermutation) {
  std::mt19937 rng(5);
  HostTensor x = random_tensor(DType::kFloat32, {2, 2}, rng);
  EXPECT_THROW(run_kernel(Kernel::kPermute, {x}, DType::kFloat32, {2, 2}, {0, 0}),
               std::runtime_error);
  EXPECT_THROW(run_kernel(Kernel::kPermute, {x}, DType::kFloat32, {2, 2}, {0}), std::runtime_error);
}

// Attention's output rows [O (32), logsumexp] turned into [B, T, H, 32]: a permute with a folded
// slice of the rows' first columns and, for a bf16 output, a folded cast rounding each value as
// kCast does; on one thread and split over two (the output passes 256 KiB).
TEST(Permute, ReadsTheFirstColumnsOfRowsAndRoundsF32ToBf16) {
  std::mt19937 rng(12);
  const HostTensor rows = random_tensor(DType::kFloat32, {9, 4, 128, 33}, rng);
  const Shape merged{9, 128, 4, 32};
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const int threads : {1, 2}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + std::to_string(threads) + " threads");
      const HostTensor out =
          call_kernel_directly(Kernel::kPermute, {rows}, dtype, merged, {0, 2, 1, 3, 33}, threads);
      ASSERT_EQ(out.values.size(), static_cast<std::size_t>(merged.numel()));
      for (int64_t i = 0; i < merged.numel(); ++i) {
        const Index o = unravel(i, merged);
        const auto x = static_cast<float>(rows.values[ravel({o[0], o[2], o[1], o[3]}, rows.shape)]);
        const double want = dtype == DType::kBFloat16 ? double{cpu::widen(cpu::narrow(x))} : x;
        ASSERT_EQ(out.values[i], want) << "element " << i;
      }
    }
  }
  // Rows of another length than x's last dim, or more columns than a row has, are refused.
  EXPECT_NE(invalid_argument_message(Kernel::kPermute, {rows}, DType::kBFloat16, merged,
                                     {0, 2, 1, 3, 32}),
            "");
  EXPECT_NE(invalid_argument_message(Kernel::kPermute, {rows}, DType::kBFloat16, {9, 128, 4, 34},
                                     {0, 2, 1, 3, 33}),
            "");
  // Without a row the dims must match whole.
  EXPECT_NE(
      invalid_argument_message(Kernel::kPermute, {rows}, DType::kFloat32, merged, {0, 2, 1, 3}),
      "");
}

TEST(Expand, MatchesNumpyBroadcastOnRandomShapes) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 300; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    const Shape out_shape = random_shape(rng, random_int(rng, 0, 5));
    const int in_rank = random_int(rng, 0, out_shape.rank());
    const int lead = out_shape.rank() - in_rank;
    Shape in_shape;
    for (int d = 0; d < in_rank; ++d) {
      in_shape.push_back(random_int(rng, 0, 1) ? out_shape[lead + d] : 1);
    }
    HostTensor x = random_tensor(dtype, in_shape, rng);
    HostTensor out = run_kernel(Kernel::kExpand, {x}, dtype, out_shape);
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      Index o = unravel(i, out_shape);
      Index in(in_rank);
      for (int d = 0; d < in_rank; ++d) in[d] = in_shape[d] == 1 ? 0 : o[lead + d];
      ASSERT_EQ(out.values[i], x.values[ravel(in, in_shape)])
          << in_shape.to_string() << " -> " << out_shape.to_string();
    }
  }
}

TEST(Expand, RejectsIncompatibleShape) {
  std::mt19937 rng(7);
  EXPECT_THROW(run_kernel(Kernel::kExpand, {random_tensor(DType::kFloat32, {3}, rng)},
                          DType::kFloat32, {2, 4}),
               std::runtime_error);
}

TEST(Slice, MatchesLoopsOnRandomShapes) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 300; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    HostTensor x = random_tensor(dtype, random_shape(rng, random_int(rng, 1, 4), 7), rng);
    const int dim = random_int(rng, 0, x.shape.rank() - 1);
    const int64_t size = x.shape[dim];
    const int64_t step = random_int(rng, 1, 3);
    const int64_t start = random_int(rng, 0, static_cast<int>(size));
    const int64_t max_len = (size - start + step - 1) / step;
    Shape out_shape = x.shape;
    out_shape[dim] = random_int(rng, 0, static_cast<int>(max_len));
    HostTensor out = run_kernel(Kernel::kSlice, {x}, dtype, out_shape, {dim, start, step});
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      Index idx = unravel(i, out_shape);
      idx[dim] = start + idx[dim] * step;
      ASSERT_EQ(out.values[i], x.values[ravel(idx, x.shape)]);
    }
  }
}

TEST(Slice, RejectsRunPastTheEnd) {
  std::mt19937 rng(9);
  HostTensor x = random_tensor(DType::kFloat32, {4, 6}, rng);
  EXPECT_THROW(run_kernel(Kernel::kSlice, {x}, DType::kFloat32, {4, 3}, {1, 2, 2}),
               std::runtime_error);
  EXPECT_THROW(run_kernel(Kernel::kSlice, {x}, DType::kFloat32, {4, 2}, {1, 0, 0}),
               std::runtime_error);
}

TEST(Concat, MatchesLoopsIncludingEmptyInputs) {
  std::mt19937 rng(10);
  for (int trial = 0; trial < 200; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    const Shape base = random_shape(rng, random_int(rng, 1, 4));
    const int dim = random_int(rng, 0, base.rank() - 1);
    std::vector<HostTensor> inputs(random_int(rng, 1, 4));
    Shape out_shape = base;
    out_shape[dim] = 0;
    for (HostTensor& in : inputs) {
      Shape s = base;
      s[dim] = random_int(rng, 0, 3);
      out_shape[dim] += s[dim];
      in = random_tensor(dtype, s, rng);
    }
    HostTensor out = run_kernel(Kernel::kConcat, inputs, dtype, out_shape, {dim});
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      Index idx = unravel(i, out_shape);
      std::size_t k = 0;
      while (idx[dim] >= inputs[k].shape[dim]) idx[dim] -= inputs[k++].shape[dim];
      ASSERT_EQ(out.values[i], inputs[k].values[ravel(idx, inputs[k].shape)]);
    }
  }
}

TEST(Concat, RejectsMismatchedOtherDims) {
  std::mt19937 rng(11);
  EXPECT_THROW(run_kernel(Kernel::kConcat,
                          {random_tensor(DType::kFloat32, {2, 3}, rng),
                           random_tensor(DType::kFloat32, {2, 4}, rng)},
                          DType::kFloat32, {4, 3}, {0}),
               std::runtime_error);
}

// Copies of 256 KiB and more (permute, slice, expand, concat, index_select) are split over the
// compute pool's threads along their outermost dim: each element must still come from where the
// loops say, whatever the split.
TEST(DataMovement, LargeCopiesSplitOverThreadsMatchLoops) {
  std::mt19937 rng(21);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (int threads : {2, 3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + std::to_string(threads) + " threads");
      // A GPT's head split and merge, a transpose, a slice of q from qkv.
      HostTensor heads = random_tensor(dtype, {9, 64, 4, 32}, rng);
      HostTensor permuted = call_kernel_directly(Kernel::kPermute, {heads}, dtype, {9, 4, 64, 32},
                                                 {0, 2, 1, 3}, threads);
      EXPECT_EQ(permuted.values,
                run_kernel(Kernel::kPermute, {heads}, dtype, {9, 4, 64, 32}, {0, 2, 1, 3}).values);
      for (int64_t i = 0; i < permuted.shape.numel(); i += 97) {
        Index o = unravel(i, permuted.shape);
        ASSERT_EQ(permuted.values[i], heads.values[ravel({o[0], o[2], o[1], o[3]}, heads.shape)]);
      }
      HostTensor matrix = random_tensor(dtype, {301, 257}, rng);
      HostTensor transposed =
          call_kernel_directly(Kernel::kPermute, {matrix}, dtype, {257, 301}, {1, 0}, threads);
      for (int64_t i = 0; i < transposed.shape.numel(); ++i) {
        Index o = unravel(i, transposed.shape);
        ASSERT_EQ(transposed.values[i], matrix.values[ravel({o[1], o[0]}, matrix.shape)]);
      }
      HostTensor qkv = random_tensor(dtype, {7, 128, 384}, rng);
      HostTensor k =
          call_kernel_directly(Kernel::kSlice, {qkv}, dtype, {7, 128, 128}, {2, 128, 1}, threads);
      for (int64_t i = 0; i < k.shape.numel(); ++i) {
        Index o = unravel(i, k.shape);
        ASSERT_EQ(k.values[i], qkv.values[ravel({o[0], o[1], o[2] + 128}, qkv.shape)]);
      }
      HostTensor row = random_tensor(dtype, {1, 1000}, rng);
      HostTensor rows =
          call_kernel_directly(Kernel::kExpand, {row}, dtype, {300, 1000}, {}, threads);
      for (int64_t i = 0; i < rows.shape.numel(); ++i) {
        ASSERT_EQ(rows.values[i], row.values[i % 1000]);
      }
      // A convolution weight flipped along its last dim (inner runs of one element), and rows
      // picked along a middle dim.
      HostTensor weight = random_tensor(dtype, {64, 128, 3, 3}, rng);
      HostTensor flipped = call_kernel_directly(
          Kernel::kIndexSelect, {weight, index_tensor(DType::kInt64, {3}, {2, 1, 0})}, dtype,
          {64, 128, 3, 3}, {3}, threads);
      for (int64_t i = 0; i < flipped.shape.numel(); ++i) {
        Index o = unravel(i, flipped.shape);
        ASSERT_EQ(flipped.values[i],
                  weight.values[ravel({o[0], o[1], o[2], 2 - o[3]}, weight.shape)]);
      }
      HostTensor picked = call_kernel_directly(
          Kernel::kIndexSelect, {weight, index_tensor(DType::kInt32, {5}, {7, 0, 127, 7, 64})},
          dtype, {64, 5, 3, 3}, {1}, threads);
      const std::vector<int64_t> picks = {7, 0, 127, 7, 64};
      for (int64_t i = 0; i < picked.shape.numel(); ++i) {
        Index o = unravel(i, picked.shape);
        ASSERT_EQ(picked.values[i],
                  weight.values[ravel({o[0], picks[static_cast<std::size_t>(o[1])], o[2], o[3]},
                                      weight.shape)]);
      }
      // A stride-2 gradient's interleaving: blocks of one element from each input in turn.
      HostTensor even = random_tensor(dtype, {300, 50, 1}, rng);
      HostTensor odd = random_tensor(dtype, {300, 50, 1}, rng);
      HostTensor interleaved =
          call_kernel_directly(Kernel::kConcat, {even, odd}, dtype, {300, 50, 2}, {2}, threads);
      for (int64_t i = 0; i < interleaved.shape.numel(); ++i) {
        ASSERT_EQ(interleaved.values[i], (i % 2 == 0 ? even : odd).values[i / 2]);
      }
      HostTensor a = random_tensor(dtype, {33, 128, 128}, rng);
      HostTensor b = random_tensor(dtype, {33, 128, 256}, rng);
      HostTensor joined =
          call_kernel_directly(Kernel::kConcat, {a, b}, dtype, {33, 128, 384}, {2}, threads);
      for (int64_t i = 0; i < joined.shape.numel(); ++i) {
        Index o = unravel(i, joined.shape);
        ASSERT_EQ(joined.values[i], o[2] < 128
                                        ? a.values[ravel({o[0], o[1], o[2]}, a.shape)]
                                        : b.values[ravel({o[0], o[1], o[2] - 128}, b.shape)]);
      }
    }
  }
}

TEST(IndexSelect, MatchesLoopsOnRandomShapes) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    HostTensor x = random_tensor(dtype, random_shape(rng, random_int(rng, 1, 4)), rng);
    const int dim = random_int(rng, 0, x.shape.rank() - 1);
    const int64_t n = x.shape[dim] == 0 ? 0 : random_int(rng, 0, 6);
    HostTensor index = random_tensor(trial % 2 ? DType::kInt32 : DType::kInt64, {n}, rng, 0,
                                     static_cast<double>(std::max<int64_t>(x.shape[dim] - 1, 0)));
    Shape out_shape = x.shape;
    out_shape[dim] = n;
    HostTensor out = run_kernel(Kernel::kIndexSelect, {x, index}, dtype, out_shape, {dim});
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      Index idx = unravel(i, out_shape);
      idx[dim] = static_cast<int64_t>(index.values[idx[dim]]);
      ASSERT_EQ(out.values[i], x.values[ravel(idx, x.shape)]);
    }
  }
}

// One element per index along the last dim (a conv kernel's taps reversed), over many rows.
TEST(IndexSelect, PicksSingleElementsAlongTheLastDim) {
  std::mt19937 rng(13);
  for (DType dtype : kDTypes) {
    const HostTensor x = random_tensor(dtype, {37, 9}, rng);
    const HostTensor index = index_tensor(DType::kInt64, {10}, {8, 7, 6, 5, 4, 3, 2, 1, 0, 4});
    const HostTensor out = run_kernel(Kernel::kIndexSelect, {x, index}, dtype, {37, 10}, {1});
    for (int64_t r = 0; r < 37; ++r) {
      for (int64_t j = 0; j < 10; ++j) {
        ASSERT_EQ(out.values[r * 10 + j], x.values[r * 9 + static_cast<int64_t>(index.values[j])])
            << dtype_name(dtype) << " row " << r << " pick " << j;
      }
    }
  }
}

TEST(IndexSelect, SelectsFromZeroDimTensor) {
  HostTensor x{DType::kFloat64, {}, {4.5}};
  HostTensor out = run_kernel(Kernel::kIndexSelect, {x, index_tensor(DType::kInt64, {2}, {0, 0})},
                              DType::kFloat64, {2}, {0});
  EXPECT_EQ(out.values, (std::vector<double>{4.5, 4.5}));
}

TEST(IndexSelect, NegativeIndexThrowsOutOfRangeNamingIndexAndSize) {
  std::mt19937 rng(13);
  HostTensor x = random_tensor(DType::kFloat32, {3, 2}, rng);
  HostTensor index = index_tensor(DType::kInt64, {2}, {1, -1});
  const std::string message = out_of_range_message([&] {
    call_kernel(Kernel::kIndexSelect, {x, index}, DType::kFloat32, {2, 2}, {0});
  });
  EXPECT_NE(message.find("index_select"), std::string::npos) << message;
  EXPECT_NE(message.find("-1"), std::string::npos) << message;
  EXPECT_NE(message.find("size 3"), std::string::npos) << message;
}

TEST(IndexSelect, IndexPastTheEndThrowsOutOfRange) {
  std::mt19937 rng(14);
  HostTensor x = random_tensor(DType::kInt32, {3, 2}, rng);
  HostTensor index = index_tensor(DType::kInt32, {1}, {2});
  const std::string message = out_of_range_message([&] {
    call_kernel(Kernel::kIndexSelect, {x, index}, DType::kInt32, {3, 1}, {1});
  });
  EXPECT_NE(message.find("index 2"), std::string::npos) << message;
  EXPECT_NE(message.find("size 2"), std::string::npos) << message;
}

TEST(Gather, MatchesTorchGatherOnRandomShapes) {
  std::mt19937 rng(15);
  for (int trial = 0; trial < 300; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    HostTensor x = random_tensor(dtype, random_shape(rng, random_int(rng, 1, 4)), rng);
    const int dim = random_int(rng, 0, x.shape.rank() - 1);
    Shape index_shape;
    for (int d = 0; d < x.shape.rank(); ++d) {
      index_shape.push_back(d == dim ? random_int(rng, 0, 6)
                                     : random_int(rng, 0, static_cast<int>(x.shape[d])));
    }
    if (x.shape[dim] == 0) index_shape[dim] = 0;  // nothing to point at
    HostTensor index = random_tensor(trial % 2 ? DType::kInt32 : DType::kInt64, index_shape, rng, 0,
                                     static_cast<double>(std::max<int64_t>(x.shape[dim] - 1, 0)));
    HostTensor out = run_kernel(Kernel::kGather, {x, index}, dtype, index_shape, {dim});
    for (int64_t i = 0; i < index_shape.numel(); ++i) {
      Index idx = unravel(i, index_shape);
      idx[dim] = static_cast<int64_t>(index.values[i]);
      ASSERT_EQ(out.values[i], x.values[ravel(idx, x.shape)]);
    }
  }
}

TEST(Gather, GathersFromZeroDimTensor) {
  HostTensor x{DType::kBFloat16, {}, {1.5}};
  HostTensor out = run_kernel(Kernel::kGather, {x, index_tensor(DType::kInt32, {}, {0})},
                              DType::kBFloat16, {}, {0});
  EXPECT_EQ(out.values, (std::vector<double>{1.5}));
}

TEST(Gather, OutOfRangeIndexThrowsOutOfRange) {
  std::mt19937 rng(16);
  HostTensor x = random_tensor(DType::kFloat64, {2, 3}, rng);
  HostTensor index = index_tensor(DType::kInt64, {2, 2}, {0, 1, 2, 0});
  const std::string message = out_of_range_message([&] {
    call_kernel(Kernel::kGather, {x, index}, DType::kFloat64, {2, 2}, {0});
  });
  EXPECT_NE(message.find("gather"), std::string::npos) << message;
  EXPECT_NE(message.find("index 2"), std::string::npos) << message;
  EXPECT_THROW(call_kernel(Kernel::kGather, {x, index_tensor(DType::kInt64, {1, 1}, {-1})},
                           DType::kFloat64, {1, 1}, {1}),
               std::out_of_range);
}

TEST(OneHot, MatchesLoopsForEveryOutputDtype) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 120; ++trial) {
    const DType dtype = kDTypes[trial % 6];
    const int64_t classes = random_int(rng, 1, 6);
    HostTensor index = random_tensor(trial % 2 ? DType::kInt32 : DType::kInt64,
                                     random_shape(rng, random_int(rng, 0, 3)), rng, 0,
                                     static_cast<double>(classes - 1));
    Shape out_shape = index.shape;
    out_shape.push_back(classes);
    HostTensor out = run_kernel(Kernel::kOneHot, {index}, dtype, out_shape, {classes});
    for (int64_t i = 0; i < out_shape.numel(); ++i) {
      const double expected = index.values[i / classes] == static_cast<double>(i % classes);
      ASSERT_EQ(out.values[i], expected) << dtype_name(dtype) << " element " << i;
    }
  }
}

TEST(OneHot, OutOfRangeClassThrowsOutOfRange) {
  EXPECT_THROW(call_kernel(Kernel::kOneHot, {index_tensor(DType::kInt64, {2}, {0, 3})},
                           DType::kFloat32, {2, 3}, {3}),
               std::out_of_range);
  EXPECT_THROW(
      call_kernel(Kernel::kOneHot, {index_tensor(DType::kInt32, {}, {-1})}, DType::kBool, {3}, {3}),
      std::out_of_range);
}

}  // namespace
}  // namespace axle::testing
