// backends/executable.h: kernel names, and program_error — what makes a program unsafe to hand to
// a backend.
#include "axle/backends/executable.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace axle {
namespace {

// out = exp(a + b), with a and b bound by the caller.
IntrusivePtr<Executable> add_then_exp() {
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}}};
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kAdd, {0, 1}, 2, {}, {}}, {Kernel::kExp, {2}, 3, {}, {}}};
  program->output_slots = {3};
  return program;
}

void expect_error(const Executable& program, const std::string& part) {
  const std::string error = program_error(program);
  EXPECT_NE(error.find(part), std::string::npos) << "error: \"" << error << "\"";
}

TEST(ProgramError, AcceptsAWellFormedProgram) { EXPECT_EQ(program_error(*add_then_exp()), ""); }

TEST(ProgramError, AcceptsScalarsAndEmptyShapes) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->slots = {{DType::kInt64, Shape{}},
                    {DType::kInt64, Shape{}},
                    {DType::kBFloat16, Shape{0, 3}},
                    {DType::kBFloat16, Shape{0, 3}}};
  EXPECT_EQ(program_error(*program), "");
}

TEST(ProgramError, RejectsUnknownDtypes) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->slots[1].dtype = static_cast<DType>(kNumDTypes);
  expect_error(*program, "slot 1: dtype " + std::to_string(kNumDTypes) + " is unknown");
}

TEST(ProgramError, RejectsNegativeDims) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->slots[2].shape = Shape{4, -1};
  expect_error(*program, "slot 2: shape [4,-1] has a negative dim");
}

TEST(ProgramError, RejectsSizesThatOverflow) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->slots[0].shape = Shape{1LL << 31, 1LL << 31, 4};  // 2^64 bytes of f32
  expect_error(*program, "is too large");
}

TEST(ProgramError, RejectsInputSlotsOutOfRangeOrBoundTwice) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->input_slots = {0, 4};
  expect_error(*program, "input slot 4 is out of range");
  program->input_slots = {0, 0};
  expect_error(*program, "input slot 0 is bound twice");
}

// The names are a table by position: a kernel added to the enum but not to the table would take
// its neighbour's name (or none), and the persistent cache finds kernels by name.
TEST(KernelName, EveryKernelHasItsOwnName) {
  std::set<std::string_view> names;
  for (int k = 0; k < static_cast<int>(Kernel::kCount); ++k) {
    const std::string_view name = kernel_name(static_cast<Kernel>(k));
    EXPECT_FALSE(name.empty()) << "kernel " << k;
    EXPECT_TRUE(names.insert(name).second) << "kernel " << k << " repeats " << name;
  }
  EXPECT_EQ(kernel_name(Kernel::kSin), "sin");
  EXPECT_EQ(kernel_name(Kernel::kTopK), "topk");
  EXPECT_EQ(kernel_name(Kernel::kErf), "erf");
  EXPECT_EQ(kernel_name(Kernel::kScaledDotProductAttention), "scaled_dot_product_attention");
  EXPECT_EQ(kernel_name(Kernel::kScaledDotProductAttentionBackward),
            "scaled_dot_product_attention_backward");
  EXPECT_EQ(kernel_name(Kernel::kCollectivePermute), "collective_permute");
}

TEST(ProgramError, RejectsUnknownKernels) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->calls[1].kernel = Kernel::kCount;
  expect_error(*program, "call 1: kernel");
}

TEST(ProgramError, RejectsCallSlotsOutOfRange) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->calls[0].inputs[1] = -1;
  expect_error(*program, "call 0 (add): input slot -1 is out of range");
  program = add_then_exp();
  program->calls[1].output = 7;
  expect_error(*program, "call 1 (exp): output slot 7 is out of range");
}

TEST(ProgramError, RejectsReadingASlotNothingWrote) {
  IntrusivePtr<Executable> program = add_then_exp();
  std::swap(program->calls[0], program->calls[1]);
  expect_error(*program, "call 0 (exp): reads slot 2 before anything writes it");
}

TEST(ProgramError, RejectsACallWritingItsOwnInput) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->calls[1].output = 2;
  expect_error(*program, "call 1 (exp): writes its own input slot 2");
}

TEST(ProgramError, RejectsOutputsNeverWritten) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->output_slots = {3, 5};
  expect_error(*program, "output slot 5 is out of range");
  program->calls.pop_back();
  program->output_slots = {3};
  expect_error(*program, "output slot 3 is never written");
}

TEST(ProgramError, AcceptsAPlanThatWritesInPlaceAndReleases) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->plan.release_begin = {0, 0, 0};
  program->plan.in_place = {-1, 2};  // exp writes over the sum, which dies with it
  EXPECT_EQ(program_error(*program), "");
}

TEST(ProgramError, RejectsPlansThatFreeWhatTheyDoNotOwnOrReadFreedSlots) {
  IntrusivePtr<Executable> program = add_then_exp();
  program->plan.release_begin = {0, 1, 1};
  program->plan.release_slots = {0};  // an input: the caller's
  program->plan.in_place = {-1, -1};
  expect_error(*program, "does not own");
  program->plan.release_slots = {2};  // released after the add, read by the exp
  expect_error(*program, "reads slot 2 after the plan released it");
  program->plan.release_begin = {0, 0, 0};
  program->plan.release_slots = {};
  program->plan.in_place = {0, -1};  // over an input
  expect_error(*program, "cannot write in place over slot 0");
  program->plan.in_place = {-1};
  expect_error(*program, "memory plan for 1 calls");
  program->plan.in_place = {-1, -1};
  program->plan.release_begin = {0, 0, 5};
  expect_error(*program, "do not cover");
  // A bound in the middle past the end of the list (found by fuzzing the persistent cache):
  // the list is empty and the last bound is 0, but the first call's list would end at 8.
  program->plan.release_begin = {0, 8, 0};
  expect_error(*program, "do not cover");
  program->plan.release_begin = {0, 3, 1};
  program->plan.release_slots = {2};
  expect_error(*program, "do not cover");
  program->plan.release_slots = {};
  program->calls[1].kernel = Kernel::kMatmul;  // reads across elements: never in place
  program->plan.release_begin = {0, 0, 0};
  program->plan.in_place = {-1, 2};
  expect_error(*program, "cannot write in place");
}

TEST(WritesInPlaceSafely, ElementwiseAndFusedKernelsWithoutAReduction) {
  EXPECT_TRUE(writes_in_place_safely({Kernel::kAdd, {0, 1}, 2, {}, {}}, 0));
  EXPECT_TRUE(writes_in_place_safely({Kernel::kAdd, {0, 1}, 2, {}, {}}, 1));
  EXPECT_FALSE(writes_in_place_safely({Kernel::kAdd, {0, 1}, 2, {}, {}}, 2));  // no such operand
  EXPECT_FALSE(writes_in_place_safely({Kernel::kSum, {0}, 1, {0, 0}, {}}, 0));
  const auto exp_k = static_cast<int64_t>(Kernel::kExp);
  const KernelCall chain{Kernel::kFused, {0}, 1, {0, exp_k, -1, 0, 0, 0}, {}};
  EXPECT_TRUE(writes_in_place_safely(chain, 0));
  // exp into buffer 0, then its sum: each output reads many operand elements.
  const KernelCall reducing{
      Kernel::kFused,
      {0},
      1,
      {1, exp_k, 0, 0, 0, 0, static_cast<int64_t>(Kernel::kSum), -1, -1, 1, 2, 0, 0},
      {}};
  EXPECT_FALSE(writes_in_place_safely(reducing, 0));
}

// scatter_add adds into its base element by element, so its result may take the base's buffer;
// the index and src are read anywhere, and so is a base that is also the src.
TEST(WritesInPlaceSafely, ScatterAddOverItsBaseOnly) {
  const KernelCall scatter{Kernel::kScatterAdd, {0, 1, 2}, 3, {0}, {}};
  EXPECT_TRUE(writes_in_place_safely(scatter, 0));
  EXPECT_FALSE(writes_in_place_safely(scatter, 1));
  EXPECT_FALSE(writes_in_place_safely(scatter, 2));
  const KernelCall into_its_source{Kernel::kScatterAdd, {0, 1, 0}, 3, {0}, {}};
  EXPECT_FALSE(writes_in_place_safely(into_its_source, 0));
}

TEST(ProgramError, RejectsAPlanWritingAFusedReductionInPlace) {
  // y = sum(exp(a) * m, keepdim) over the last dim of [2, 3], with m [2, 1] computed by the
  // program (so the plan owns it): m has the output's shape and dies with the call.
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2, 3}},
                    {DType::kFloat32, Shape{2, 1}},
                    {DType::kFloat32, Shape{2, 1}},
                    {DType::kFloat32, Shape{2, 1}}};
  program->input_slots = {0, 1};
  const auto exp_k = static_cast<int64_t>(Kernel::kExp);
  const auto mul_k = static_cast<int64_t>(Kernel::kMul);
  program->calls = {{Kernel::kNeg, {1}, 2, {}, {}},
                    {Kernel::kFused,
                     {0, 2},
                     3,
                     {1, exp_k, 0, 0, 0, 0, mul_k, 0, -1, 1, 0, static_cast<int64_t>(Kernel::kSum),
                      -1, -1, 2, 2, 3, 1, 1},
                     {}}};
  program->output_slots = {3};
  program->plan.release_begin = {0, 0, 1};
  program->plan.release_slots = {2};
  program->plan.in_place = {-1, -1};
  EXPECT_EQ(program_error(*program), "");
  program->plan.release_slots = {};
  program->plan.release_begin = {0, 0, 0};
  program->plan.in_place = {-1, 2};
  expect_error(*program, "cannot write in place over slot 2");
}

}  // namespace
}  // namespace axle
