// graph/passes: each pass on small traced graphs, checked as program text before and after.
#include "axle/graph/passes/passes.h"

#include <gtest/gtest.h>

#include "axle/engine/config.h"
#include "axle/graph/collectives.h"
#include "axle/graph/ops.h"
#include "axle/graph/passes/pass_settings.h"
#include "axle/graph/spmd.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

Tensor input(const Shape& shape, DType dtype = DType::kFloat32) {
  return Tensor(
      make_intrusive<TensorImpl>(dtype, make_intrusive<DeviceData>(Device{}, dtype, shape)));
}

Program program_of(const std::vector<Tensor>& outputs) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : outputs) roots.push_back(t.impl()->ir());
  return Program::from(build_step_graph(roots));
}

int count_op(const Program& p, Op op) {
  int n = 0;
  for (std::size_t id = 0; id < p.size(); ++id) n += p[id].op == op;
  return n;
}

TEST(ProgramText, ListsInstructionsOperandsAttributesAndOutputs) {
  const Tensor a = input({2, 3});
  EXPECT_EQ(program_of({sum(exp(a) * 2.0, {1})}).to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = exp f32[2,3] %0\n"
            "%2 = parameter f32[] input=1\n"
            "%3 = mul f32[2,3] %1, %2\n"
            "%4 = sum f32[2] %3 ints=[0, 1]\n"
            "outputs %4\n");
}

TEST(Canonicalize, SortsTheOperandsOfCommutativeOps) {
  const Tensor a = input({2, 3});
  const Program before = program_of({exp(a) + a, exp(a) * a, maximum(exp(a), a)});
  EXPECT_EQ(before.to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = exp f32[2,3] %0\n"
            "%2 = add f32[2,3] %1, %0\n"
            "%3 = exp f32[2,3] %0\n"
            "%4 = mul f32[2,3] %3, %0\n"
            "%5 = exp f32[2,3] %0\n"
            "%6 = maximum f32[2,3] %5, %0\n"
            "outputs %2, %4, %6\n");
  // maximum keeps its order: it picks between +0 and -0 by position.
  EXPECT_EQ(canonicalize(before).to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = exp f32[2,3] %0\n"
            "%2 = add f32[2,3] %0, %1\n"
            "%3 = exp f32[2,3] %0\n"
            "%4 = mul f32[2,3] %0, %3\n"
            "%5 = exp f32[2,3] %0\n"
            "%6 = maximum f32[2,3] %5, %0\n"
            "outputs %2, %4, %6\n");
}

TEST(Canonicalize, FoldsReshapeAndPermuteChains) {
  const Tensor a = input({2, 3});
  const Program before = program_of({reshape(reshape(a, {6}), {3, 2}), reshape(a, {2, 3}),
                                     permute(permute(input({2, 3, 4}), {1, 2, 0}), {0, 2, 1}),
                                     transpose(transpose(a, 0, 1), 0, 1)});
  EXPECT_EQ(eliminate_dead_code(canonicalize(before)).to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = reshape f32[3,2] %0\n"
            "%2 = device_data f32[2,3,4] input=1\n"
            "%3 = permute f32[3,2,4] %2 ints=[1, 0, 2]\n"
            "outputs %1, %0, %3, %0\n");
}

TEST(Canonicalize, FoldsTransposesOfTheLastTwoDimsIntoMatmul) {
  const Tensor a = input({2, 3});
  const Tensor b = input({4, 2});
  const Tensor c = input({3, 4});
  const Tensor batched = input({5, 3, 2});
  const Tensor a_t = transpose(a, 0, 1);
  const Tensor b_t = transpose(transpose(transpose(b, 0, 1), 0, 1), 0, 1);
  const Tensor both = matmul(a_t, b_t);
  const Tensor batch = matmul(transpose(batched, 1, 2), c);
  const Tensor moved = matmul(transpose(batched, 0, 1), transpose(b, 0, 1));
  EXPECT_EQ(eliminate_dead_code(canonicalize(program_of({both, batch, moved}))).to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = device_data f32[4,2] input=1\n"
            "%2 = matmul f32[3,4] %0, %1 ints=[1, 1]\n"
            "%3 = device_data f32[5,3,2] input=2\n"
            "%4 = device_data f32[3,4] input=3\n"
            "%5 = matmul f32[5,2,4] %3, %4 ints=[1, 0]\n"
            // A transpose that moves a batch dim stays a permute.
            "%6 = permute f32[3,5,2] %3 ints=[1, 0, 2]\n"
            "%7 = matmul f32[3,5,4] %6, %1 ints=[0, 1]\n"
            "outputs %2, %5, %7\n");
}

// The gradient of a split: each piece's gradient padded back into place with zeros, summed. The
// sum becomes one concatenation of the pieces; sums whose pieces overlap stay sums.
TEST(Canonicalize, MakesSumsOfZeroPaddedPiecesOneConcat) {
  const Tensor a = input({2, 2});
  const Tensor b = input({2, 1});
  const Tensor c = input({2, 2});
  const Tensor padded = cat({a, zeros({2, 4})}, 1) + cat({zeros({2, 2}), b, zeros({2, 3})}, 1) +
                        cat({zeros({2, 4}), c}, 1);
  const Tensor overlapping = cat({a, zeros({2, 2})}, 1) + cat({zeros({2, 1}), b, zeros({2, 2})}, 1);
  const Program after = eliminate_dead_code(canonicalize(program_of({padded})));
  EXPECT_EQ(count_op(after, Op::kAdd), 0);
  ASSERT_EQ(count_op(after, Op::kConcat), 1);
  const int32_t out = after.outputs[0];
  ASSERT_EQ(after[out].op, Op::kConcat);
  // a, b, one zero column, c.
  ASSERT_EQ(after.operands(out).size(), 4u);
  EXPECT_EQ(after[after.operands(out)[0]].op, Op::kDeviceData);
  EXPECT_EQ(after[after.operands(out)[1]].op, Op::kDeviceData);
  EXPECT_EQ(after[after.operands(out)[2]].op, Op::kExpand);
  EXPECT_EQ(after[after.operands(out)[2]].shape, (Shape{2, 1}));
  EXPECT_EQ(after[after.operands(out)[3]].op, Op::kDeviceData);
  EXPECT_EQ(count_op(eliminate_dead_code(canonicalize(program_of({overlapping}))), Op::kAdd), 1);
}

TEST(Cse, MergesEqualComputations) {
  const Tensor a = input({4});
  const Tensor b = input({4});
  const Program before = program_of({exp(a) + b, b + exp(a), exp(b)});
  EXPECT_EQ(eliminate_dead_code(eliminate_common_subexpressions(canonicalize(before))).to_text(),
            "%0 = device_data f32[4] input=0\n"
            "%1 = exp f32[4] %0\n"
            "%2 = device_data f32[4] input=1\n"
            "%3 = add f32[4] %1, %2\n"
            "%4 = exp f32[4] %2\n"
            "outputs %3, %3, %4\n");
}

TEST(Cse, KeepsLeavesAndDifferentAttributesApart) {
  const Tensor a = input({2, 2});
  const Tensor b = input({2, 2});
  const Program after = eliminate_common_subexpressions(
      program_of({sum(a, {0}), sum(a, {1}), sum(b, {0}), a * 3.0, a * 3.0}));
  EXPECT_EQ(after.to_text(),
            "%0 = device_data f32[2,2] input=0\n"
            "%1 = sum f32[2] %0 ints=[0, 0]\n"
            "%2 = sum f32[2] %0 ints=[0, 1]\n"
            "%3 = device_data f32[2,2] input=1\n"
            "%4 = sum f32[2] %3 ints=[0, 0]\n"
            // Two parameters (each scalar is its own input) keep the products apart.
            "%5 = parameter f32[] input=2\n"
            "%6 = mul f32[2,2] %0, %5\n"
            "%7 = parameter f32[] input=3\n"
            "%8 = mul f32[2,2] %0, %7\n"
            "outputs %1, %2, %4, %6, %8\n");
}

TEST(ConstantFolding, FoldsExactArithmeticComparisonsAndDataMovement) {
  const Tensor one = ones({2});
  const Program before =
      program_of({(one + one) / (one + one + one), gt(one, zeros({2})), exp(one), one + 1.0,
                  expand(reshape(one, {2, 1}), {2, 3}), ones({2}, DType::kInt32) * 7});
  EXPECT_EQ(eliminate_dead_code(fold_constants(before)).to_text(),
            "%0 = constant f32[2] 1\n"
            // 2/3 rounded to f32, as the kernel would.
            "%1 = constant f32[2] 0.6666666865348816\n"
            "%2 = constant pred[2] 1\n"
            "%3 = exp f32[2] %0\n"
            "%4 = constant f32[2] 2\n"
            "%5 = constant f32[2,3] 1\n"
            "%6 = constant s32[2] 1\n"
            // 7 is a parameter, fed at each execution: not a constant.
            "%7 = parameter s32[] input=0\n"
            "%8 = mul s32[2] %6, %7\n"
            "outputs %1, %2, %3, %4, %5, %8\n");
}

TEST(ConstantFolding, LeavesIntegerOverflowAndTranscendentalsToTheKernels) {
  const Tensor big = ones({1}, DType::kInt32);
  Tensor x = big + big;
  for (int i = 0; i < 31; ++i) x = x + x;  // 2^32 wraps in s32
  const Program after = eliminate_dead_code(fold_constants(program_of({x, sqrt(ones({1}) + 1.0)})));
  const std::string text = after.to_text();
  EXPECT_NE(text.find("add s32[1]"), std::string::npos) << text;
  EXPECT_NE(text.find("constant f32[1] 1.4142135381698608"), std::string::npos) << text;
}

TEST(DeadCode, RemovesWhatNoOutputReadsButKeepsEveryInput) {
  const Tensor a = input({3});
  const Tensor b = input({3});
  const Tensor unused = exp(b) * 4.0;
  Program before = program_of({a + 1.0, unused});
  before.outputs = {before.outputs[0]};  // as if only the first were wanted
  // (`unused` was traced first, so its input comes first.)
  EXPECT_EQ(eliminate_dead_code(before).to_text(),
            "%0 = device_data f32[3] input=0\n"
            "%1 = parameter f32[] input=1\n"
            "%2 = device_data f32[3] input=2\n"
            "%3 = constant f32[] 1\n"
            "%4 = add f32[3] %2, %3\n"
            "outputs %4\n");
}

// ---- optimization barriers: no pass looks through one ----------------------------------------

// The same computation on a value and on the value through a barrier: CSE merges neither the
// two computations nor two barriers of the same values.
TEST(OptimizationBarrier, KeepsCseFromMergingAcrossIt) {
  const Tensor a = input({4});
  const Tensor x = exp(a);
  const Tensor g = cos(a);
  const Tensor plain = sin(x);
  Tensor b = x.detach();  // x's value in a handle of its own
  optimization_barrier_({b, g.detach()});
  const Tensor again = sin(b);
  Tensor c = x.detach();
  optimization_barrier_({c, g.detach()});
  const Program after =
      eliminate_common_subexpressions(canonicalize(program_of({plain, again, sin(c)})));
  EXPECT_EQ(after.to_text(),
            "%0 = device_data f32[4] input=0\n"
            "%1 = exp f32[4] %0\n"
            "%2 = cos f32[4] %0\n"
            "%3 = sin f32[4] %1\n"
            "%4 = optimization_barrier f32[4] %1, %2 ints=[0]\n"
            "%5 = sin f32[4] %4\n"
            "%6 = optimization_barrier f32[4] %1, %2 ints=[0]\n"
            "%7 = sin f32[4] %6\n"
            "outputs %3, %5, %7\n");
}

// reshape(reshape(a)) and transpose(transpose(a)) fold; with a barrier between, the inner op
// stays, and only the outer transpose folds into the matmul that reads the barrier.
TEST(OptimizationBarrier, KeepsCanonicalisationFromFoldingThroughIt) {
  const Tensor a = input({2, 3});
  const Tensor m = input({2, 2});
  Tensor r = reshape(a, {3, 2});
  optimization_barrier_({r});
  Tensor t = transpose(a, 0, 1);  // [3, 2]
  optimization_barrier_({t});
  const Program after = eliminate_dead_code(
      canonicalize(program_of({reshape(r, {6}), matmul(m, transpose(t, 0, 1))})));
  EXPECT_EQ(after.to_text(),
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = reshape f32[3,2] %0\n"
            "%2 = optimization_barrier f32[3,2] %1 ints=[0]\n"
            "%3 = permute f32[3,2] %0 ints=[1, 0]\n"
            "%4 = optimization_barrier f32[3,2] %3 ints=[0]\n"
            "%5 = reshape f32[6] %2\n"
            "%6 = device_data f32[2,2] input=1\n"
            "%7 = matmul f32[2,3] %6, %4 ints=[0, 1]\n"
            "outputs %5, %7\n");
}

TEST(OptimizationBarrier, KeepsConstantsFromFoldingThroughIt) {
  Tensor one = ones({2});
  optimization_barrier_({one});
  const Program after = eliminate_dead_code(fold_constants(program_of({one + one})));
  EXPECT_EQ(after.to_text(),
            "%0 = constant f32[2] 1\n"
            "%1 = optimization_barrier f32[2] %0 ints=[0]\n"
            "%2 = add f32[2] %1, %1\n"
            "outputs %2\n");
}

TEST(OptimizationBarrier, SurvivesEveryPassWhileRead) {
  const Tensor a = input({4});
  const Tensor g = input({4});
  Tensor b = exp(a);
  Tensor h = g * 1.0;
  optimization_barrier_({b, h});
  const Program after = run_passes(program_of({exp(a) + exp(b)}), PassSet());
  // Only the barrier of b is read; it still waits for h. exp(a) is one (before the barrier),
  // exp(b) another.
  ASSERT_EQ(count_op(after, Op::kOptimizationBarrier), 1) << after.to_text();
  EXPECT_EQ(count_op(after, Op::kExp), 2) << after.to_text();
  for (std::size_t id = 0; id < after.size(); ++id) {
    if (after[id].op == Op::kOptimizationBarrier) {
      EXPECT_EQ(after.operands(static_cast<int32_t>(id)).size(), 2u);
    }
  }
}

TEST(ShardingAnnotation, SurvivesEveryPassAndEqualOnesMerge) {
  const Mesh mesh({0, 1}, {2}, {"x"});
  const Tensor a = input({4, 2});
  Tensor b = exp(a);
  Tensor c = exp(a);
  spmd::mark_sharding(b, mesh, {"x", std::nullopt});
  spmd::mark_sharding(c, mesh, {"x", std::nullopt});
  // Annotated constants are not folded into their value either.
  Tensor one = ones({4, 2});
  spmd::mark_sharding(one, mesh, {std::nullopt, "x"});
  const Program after = run_passes(program_of({b + c, one + one}), PassSet());
  EXPECT_EQ(after.to_text(),
            "%0 = device_data f32[4,2] input=0\n"
            "%1 = exp f32[4,2] %0\n"
            "%2 = custom_sharding f32[4,2] %1 sharding={devices=[2,1]0,1}\n"
            "%3 = constant f32[4,2] 1\n"
            "%4 = custom_sharding f32[4,2] %3 sharding={devices=[1,2]0,1}\n"
            "%5 = add f32[4,2] %2, %2\n"
            "%6 = add f32[4,2] %4, %4\n"
            "outputs %5, %6\n");
}

TEST(AllReduceCombiner, CombinesIndependentAllReducesOfOneKindWhereTheLastStood) {
  const Tensor a = input({2, 3});
  const Tensor b = input({4});
  const Tensor c = input({});
  const Tensor first = all_reduce(ReduceType::kSum, a, 0.5);
  const Tensor read_early = exp(first);  // reads the first member before the last is traced
  const Tensor second = all_reduce(ReduceType::kSum, b, 0.5);
  const Tensor third = all_reduce(ReduceType::kSum, c, 0.5);
  const Program after = combine_all_reduces(program_of({read_early, second, third}));
  const std::string text = after.to_text();
  // One all_reduce of the three operands flattened (the 1-d one as it is), its parts sliced out
  // and reshaped back; exp reads the first part after the reduction, wherever it was traced.
  const int64_t key = program_of({first}).ints(1)[1];
  EXPECT_EQ(text,
            "%0 = device_data f32[2,3] input=0\n"
            "%1 = device_data f32[4] input=1\n"
            "%2 = device_data f32[] input=2\n"
            "%3 = reshape f32[6] %0\n"
            "%4 = reshape f32[1] %2\n"
            "%5 = cat f32[11] %3, %1, %4 ints=[0]\n"
            "%6 = all_reduce f32[11] %5 ints=[0, " +
                std::to_string(key) +
                "] reals=[0.5]\n"
                "%7 = slice f32[6] %6 ints=[0, 0, 1]\n"
                "%8 = reshape f32[2,3] %7\n"
                "%9 = slice f32[4] %6 ints=[0, 6, 1]\n"
                "%10 = slice f32[1] %6 ints=[0, 10, 1]\n"
                "%11 = reshape f32[] %10\n"
                "%12 = exp f32[2,3] %8\n"
                "outputs %12, %9, %11\n");
}

TEST(AllReduceCombiner, KeepsApartWhatReadsAnotherOrDiffersInKind) {
  const Tensor a = input({4});
  const Tensor d = input({4}, DType::kFloat64);
  const Tensor sum_a = all_reduce(ReduceType::kSum, a);
  const Tensor of_sum = all_reduce(ReduceType::kSum, sum_a + 1.0);  // reads the first
  const Tensor max_a = all_reduce(ReduceType::kMax, a);             // another reduce type
  const Tensor scaled = all_reduce(ReduceType::kSum, a, 0.25);      // another scale
  const Tensor sum_d = all_reduce(ReduceType::kSum, d);             // another dtype
  // (Groups must agree too: actors/collectives tests check that with replicas.)
  const Tensor big = all_reduce(ReduceType::kSum, input({kCombinedAllReduceBytes / 4}));
  const Tensor big_too = all_reduce(ReduceType::kSum, input({kCombinedAllReduceBytes / 4}));
  const Program before = program_of({of_sum, max_a, scaled, sum_d, big, big_too});
  EXPECT_EQ(combine_all_reduces(before).to_text(), before.to_text());
  // The same all_reduce kinds side by side do combine: a pair of each gives a cat each.
  const Program pairs = combine_all_reduces(program_of(
      {sum_a, all_reduce(ReduceType::kSum, input({2})), max_a, all_reduce(ReduceType::kMax, a)}));
  int cats = 0;
  int reductions = 0;
  for (std::size_t id = 0; id < pairs.size(); ++id) {
    cats += pairs[id].op == Op::kConcat;
    reductions += pairs[id].op == Op::kAllReduce;
  }
  EXPECT_EQ(cats, 2) << pairs.to_text();
  EXPECT_EQ(reductions, 2) << pairs.to_text();
}

TEST(AllReduceCombiner, CombinesEachLevelOfAChainOnItsOwn) {
  // Two chains of three all_reduces: each level's pair becomes one, three in all, in order.
  Tensor x = input({3});
  Tensor y = input({5});
  for (int level = 0; level < 3; ++level) {
    x = all_reduce(ReduceType::kSum, x) * 2.0;
    y = all_reduce(ReduceType::kSum, y) * 3.0;
  }
  const Program after = run_passes(program_of({x, y}), PassSet{});
  std::vector<int64_t> reduced;
  for (std::size_t id = 0; id < after.size(); ++id) {
    if (after[id].op == Op::kAllReduce) reduced.push_back(after[id].shape.numel());
  }
  EXPECT_EQ(reduced, (std::vector<int64_t>{8, 8, 8})) << after.to_text();
  PassSet without;
  without.disable(Pass::kAllReduceCombiner);
  int alone = 0;
  const Program kept = run_passes(program_of({x, y}), without);
  for (std::size_t id = 0; id < kept.size(); ++id) alone += kept[id].op == Op::kAllReduce;
  EXPECT_EQ(alone, 6);
}

TEST(WidenStorageOnly, ComputesF16InF32RoundingEachResultAndMovesItAsItIs) {
  const Tensor a = input({2, 3}, kHalf);
  const Tensor b = input({3, 2}, kHalf);
  // The transpose moves f16 as it is; each product and sum computes in f32 and rounds to f16,
  // and a value two ops read is widened once.
  const Tensor t = transpose(b, 0, 1);
  EXPECT_EQ(widen_storage_only_dtypes(program_of({a * t + t})).to_text(),
            "%0 = device_data f16[3,2] input=0\n"
            "%1 = permute f16[2,3] %0 ints=[1, 0]\n"
            "%2 = device_data f16[2,3] input=1\n"
            "%3 = cast f32[2,3] %2\n"
            "%4 = cast f32[2,3] %1\n"
            "%5 = mul f32[2,3] %3, %4\n"
            "%6 = cast f16[2,3] %5\n"
            "%7 = cast f32[2,3] %6\n"
            "%8 = add f32[2,3] %7, %4\n"
            "%9 = cast f16[2,3] %8\n"
            "outputs %9\n");
}

TEST(WidenStorageOnly, ComputesSmallIntegersInS32AndLeavesOtherProgramsAlone) {
  const Tensor u = input({4}, kUInt8);
  EXPECT_EQ(widen_storage_only_dtypes(program_of({amax(u), gt(u, 3)})).to_text(),
            "%0 = device_data u8[4] input=0\n"
            "%1 = cast s32[4] %0\n"
            "%2 = max s32[] %1 ints=[0, 0]\n"
            "%3 = cast u8[] %2\n"
            "%4 = parameter u8[] input=1\n"
            "%5 = cast s32[] %4\n"
            "%6 = gt pred[4] %1, %5\n"
            "outputs %3, %6\n");
  const Tensor f = input({4});
  const Program plain = program_of({exp(f) + f});
  EXPECT_EQ(widen_storage_only_dtypes(plain).to_text(), plain.to_text());
}

TEST(Passes, RunInOrderAndEachCanBeDisabled) {
  const Tensor a = input({4});
  const Program before = program_of({exp(a) + exp(a) * 1.0, sum(a, {0})});
  EXPECT_EQ(run_passes(before, PassSet{}).to_text(),
            "%0 = device_data f32[4] input=0\n"
            "%1 = exp f32[4] %0\n"
            "%2 = constant f32[] 1\n"
            "%3 = mul f32[4] %1, %2\n"
            "%4 = add f32[4] %1, %3\n"
            "%5 = sum f32[] %0 ints=[0, 0]\n"
            "outputs %4, %5\n");
  PassSet only_cse;
  for (Pass pass : {Pass::kCanonicalize, Pass::kConstantFolding, Pass::kDce,
                    Pass::kAllReduceCombiner, Pass::kFusion}) {
    only_cse.disable(pass);
  }
  EXPECT_EQ(run_passes(before, only_cse).to_text(),
            eliminate_common_subexpressions(before).to_text());
  only_cse.disable(Pass::kCse);
  EXPECT_EQ(run_passes(before, only_cse).to_text(), before.to_text());
}

TEST(Passes, ReadTheDisabledOnesFromTheEnvironmentVariable) {
  config::unset("AXLE_DISABLE_PASSES");
  EXPECT_TRUE(config::read_pass_settings().disabled.empty());
  config::set("AXLE_DISABLE_PASSES", "fusion, cse");
  EXPECT_EQ(config::read_pass_settings().disabled, (std::vector<std::string>{"fusion", "cse"}));
  const PassSet passes = PassSet::from_config();
  EXPECT_FALSE(passes.enabled(Pass::kFusion));
  EXPECT_FALSE(passes.enabled(Pass::kCse));
  EXPECT_TRUE(passes.enabled(Pass::kDce));
  config::set("AXLE_DISABLE_PASSES", "cse,fusoin");
  try {
    (void)PassSet::from_config();
    ADD_FAILURE() << "an unknown pass name was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("AXLE_DISABLE_PASSES=cse,fusoin"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'fusoin'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("constant_folding"), std::string::npos) << e.what();
  }
  config::unset("AXLE_DISABLE_PASSES");
}

TEST(Passes, HandleLongChainsWithoutRecursion) {
  // (actors' e2e tests compile and run a million-node chain.)
  constexpr std::size_t kOps = 100'000;
  Tensor x = input({2});
  for (std::size_t i = 0; i < kOps; ++i) x = (x + 1.0) * 1.0;  // 1.0 is the constant 1
  const Program after = run_passes(program_of({x}), PassSet{});
  EXPECT_EQ(after.size(), 2 + 2 * kOps);  // the leaf, one constant 1 (CSE), the adds and muls
}

}  // namespace
}  // namespace axle
