// actors/compiler/fusion.h on small hand-built programs: which instructions join which fused kernel
// (with trailing reductions), and the kFused call that runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "axle/actors/compiler/fusion.h"

namespace axle {
namespace {

// Builds a program instruction by instruction.
class Builder {
 public:
  int32_t input(const Shape& shape, DType dtype = DType::kFloat32) {
    return program_.append(Op::kDeviceData, dtype, shape, {}, {}, {}, program_.num_inputs++);
  }
  int32_t op(Op op, const Shape& shape, std::vector<int32_t> operands,
             DType dtype = DType::kFloat32) {
    return program_.append(op, dtype, shape, operands);
  }
  // sum, mean, max or min of x over dims, as the tracer records it (ints = [keepdim, dims...]).
  int32_t reduce(Op op, int32_t x, std::vector<int64_t> dims, bool keepdim = false) {
    const Shape& in = program_[static_cast<std::size_t>(x)].shape;
    Shape out;
    for (int d = 0; d < in.rank(); ++d) {
      const bool reduced = std::ranges::find(dims, d) != dims.end();
      if (!reduced || keepdim) out.push_back(reduced ? 1 : in[d]);
    }
    std::vector<int64_t> ints = {keepdim ? 1 : 0};
    ints.insert(ints.end(), dims.begin(), dims.end());
    const int32_t operands[] = {x};
    return program_.append(op, program_[static_cast<std::size_t>(x)].dtype, out, operands, ints);
  }
  Program& program(std::vector<int32_t> outputs) {
    program_.outputs = std::move(outputs);
    return program_;
  }

 private:
  Program program_;
};

// The fused kernels as "members... root" lists, e.g. "%2 %3 %4" (a kernel rooted at %4).
std::string clusters(const Program& program) {
  const std::vector<int32_t> root_of = plan_fusion(program);
  std::string out;
  for (std::size_t r = 0; r < root_of.size(); ++r) {
    if (root_of[r] != static_cast<int32_t>(r)) continue;
    if (!out.empty()) out += "; ";
    std::string members;
    for (std::size_t m = 0; m < root_of.size(); ++m) {
      if (root_of[m] == static_cast<int32_t>(r))
        members += (members.empty() ? "%" : " %") + std::to_string(m);
    }
    out += members;
  }
  return out;
}

TEST(FusionPlan, AReductionOfAChainEndsItsKernel) {
  Builder b;
  const int32_t x = b.input({4, 8});                         // %0
  const int32_t row = b.input({8});                          // %1
  const int32_t product = b.op(Op::kMul, {4, 8}, {x, row});  // %2
  const int32_t e = b.op(Op::kExp, {4, 8}, {product});       // %3
  const int32_t s = b.reduce(Op::kSum, e, {1});              // %4
  const Program& program = b.program({s});
  EXPECT_EQ(clusters(program), "%2 %3 %4");
  // mul into buffer 0, exp over it, then the sum of buffer 0 over dim 1 of [4, 8].
  const auto k = [](Kernel kernel) { return static_cast<int64_t>(kernel); };
  EXPECT_EQ(fused_call(program, plan_fusion(program), s),
            (KernelCall{Kernel::kFused,
                        {x, row},
                        s,
                        {1, k(Kernel::kMul), 0, 0, 1, 0, k(Kernel::kExp), 0, -1, 0, 0,
                         k(Kernel::kSum), -1, -1, 2, 4, 8, 0, 1},
                        {}}));
}

TEST(FusionPlan, ACastToBf16EndsTheF32ChainItReads) {
  Builder b;
  const int32_t x = b.input({4, 8});                                            // %0
  const int32_t row = b.input({8});                                             // %1
  const int32_t product = b.op(Op::kMul, {4, 8}, {x, row});                     // %2
  const int32_t e = b.op(Op::kExp, {4, 8}, {product});                          // %3
  const int32_t narrow = b.op(Op::kCast, {4, 8}, {e}, DType::kBFloat16);        // %4
  const int32_t shared = b.op(Op::kNeg, {4, 8}, {x});                           // %5
  const int32_t kept = b.op(Op::kCast, {4, 8}, {shared}, DType::kBFloat16);     // %6
  const int32_t wide = b.op(Op::kCast, {4, 8}, {b.op(Op::kAbs, {4, 8}, {x})});  // %8 of %7
  const Program& program = b.program({narrow, kept, shared, wide});
  // %6's operand is returned too (stored), and a cast to f32 ends no chain.
  EXPECT_EQ(clusters(program), "%2 %3 %4");
  // mul into buffer 0, then exp into the output, which the kernel rounds to bf16 (the cast is
  // the output's dtype, not a step).
  const auto k = [](Kernel kernel) { return static_cast<int64_t>(kernel); };
  EXPECT_EQ(fused_call(program, plan_fusion(program), narrow),
            (KernelCall{Kernel::kFused,
                        {x, row},
                        narrow,
                        {1, k(Kernel::kMul), 0, 0, 1, 0, k(Kernel::kExp), -1, -1, 0, 0},
                        {}}));
}

TEST(FusionPlan, SumMeanMaxAndMinOverTrailingOrAllDimsFuse) {
  for (Op op : {Op::kSum, Op::kMean, Op::kReduceMax, Op::kReduceMin}) {
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{2}, {1, 2}, {0, 1, 2}, {0}}) {
      for (bool keepdim : {false, true}) {
        Builder b;
        const int32_t x = b.input({2, 3, 5});
        const int32_t r = b.reduce(op, b.op(Op::kNeg, {2, 3, 5}, {b.op(Op::kAbs, {2, 3, 5}, {x})}),
                                   dims, keepdim);
        EXPECT_EQ(clusters(b.program({r})), "%1 %2 %3") << op_name(op);
      }
    }
  }
}

TEST(FusionPlan, DimsSeparatedOnlyBySizeOneDimsCountAsAdjacent) {
  Builder b;
  const int32_t x = b.input({2, 1, 6});
  const int32_t y = b.input({2, 3, 6});
  const int32_t z = b.input({2, 3, 6, 4});
  const int32_t adjacent = b.reduce(Op::kSum, b.op(Op::kExp, {2, 1, 6}, {x}), {0, 2});  // %4
  // [2, 3, 6] over dims {0, 2}: a per-channel statistic, each output's terms in strided runs.
  const int32_t per_channel = b.reduce(Op::kSum, b.op(Op::kExp, {2, 3, 6}, {y}), {0, 2});  // %6
  // [2, 3, 6, 4] over dims {0, 2}: each output's terms would have to be gathered.
  const int32_t separated = b.reduce(Op::kSum, b.op(Op::kExp, {2, 3, 6, 4}, {z}), {0, 2});  // %8
  EXPECT_EQ(clusters(b.program({adjacent, per_channel, separated})), "%3 %4; %5 %6");
}

TEST(FusionPlan, ReductionsOfSharedOrStoredValuesRunAlone) {
  Builder b;
  const int32_t x = b.input({16});
  const int32_t shared = b.op(Op::kExp, {16}, {b.op(Op::kNeg, {16}, {x})});  // %2
  const int32_t sum = b.reduce(Op::kSum, shared, {0});                       // %3
  const int32_t other = b.op(Op::kAbs, {16}, {shared});                      // %4
  const int32_t stored = b.op(Op::kExp, {16}, {b.op(Op::kNeg, {16}, {x})});  // %6
  const int32_t mean = b.reduce(Op::kMean, stored, {0});                     // %7
  EXPECT_EQ(clusters(b.program({sum, other, stored, mean})), "%1 %2; %5 %6");
}

TEST(FusionPlan, ApproximatedMembersMustHaveTheReducedOperandsShape) {
  Builder b;
  const int32_t x = b.input({4, 8});
  const int32_t row = b.input({8});
  const int32_t row_exp = b.op(Op::kExp, {8}, {row});        // %2: [8], not the chain's [4, 8]
  const int32_t sum = b.op(Op::kAdd, {4, 8}, {x, row_exp});  // %3
  const int32_t chain = b.op(Op::kTanh, {4, 8}, {sum});      // %4: [4, 8], though [4] is stored
  const int32_t r = b.reduce(Op::kReduceMax, chain, {1});    // %5
  EXPECT_EQ(clusters(b.program({r})), "%3 %4 %5");
}

TEST(FusionPlan, OtherReductionsDtypesAndLeavesAreLeftAlone) {
  Builder b;
  const int32_t x = b.input({4, 8});
  const int32_t i = b.input({4, 8}, DType::kInt32);
  const int32_t lse = b.reduce(Op::kLogSumExp, b.op(Op::kExp, {4, 8}, {x}), {1});          // %3
  const int32_t ints = b.reduce(Op::kSum, b.op(Op::kAbs, {4, 8}, {i}, DType::kInt32), {1});  // %5
  const int32_t leaf = b.reduce(Op::kSum, x, {0, 1});                                      // %6
  const int32_t wide = b.input({4, 8}, DType::kFloat64);                                   // %7
  const int32_t f64 = b.reduce(Op::kMean, b.op(Op::kNeg, {4, 8}, {wide}, DType::kFloat64), {1});
  EXPECT_EQ(clusters(b.program({lse, ints, leaf, f64})), "%8 %9");
}

}  // namespace
}  // namespace axle
