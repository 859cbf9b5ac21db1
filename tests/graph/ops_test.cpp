// Tests graph/ops.h: the dtype and shape every op traces (against hand-computed torch results),
// and the ShapeError its misuse throws. Nothing executes: the operands are traced zeros.
#include "axle/graph/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <string_view>

#include "axle/graph/op_util.h"
#include "axle/graph/trace_context.h"

namespace axle {
namespace {

Tensor t(const Shape& shape, DType dtype = DType::kFloat32) { return zeros(shape, dtype); }

// "f32[2,3]": the result's logical dtype and shape.
std::string type_of(const Tensor& x) { return ops::describe(x); }

const Node& ir(const Tensor& x) { return *x.impl()->ir(); }
std::vector<int64_t> ints_of(const Tensor& x) { return {ir(x).ints().begin(), ir(x).ints().end()}; }

void expect_shape_error(const std::function<void()>& call, int line,
                        std::initializer_list<std::string_view> parts) {
  try {
    call();
    ADD_FAILURE() << "expected a ShapeError from the call on line " << line;
  } catch (const ShapeError& error) {
    const std::string message = error.what();
    for (std::string_view part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "line " << line << ": '" << part << "' missing from: " << message;
    }
    const std::string at = "ops_test.cpp:" + std::to_string(line);
    EXPECT_NE(message.find(at), std::string::npos)
        << "line " << line << ": '" << at << "' missing from: " << message;
  }
}

// Expects `call` to throw ShapeError naming each string and this file at the line of the call
// (a macro, so __LINE__ and the call's source_location are the same line).
#define EXPECT_SHAPE_ERROR(call, ...) \
  expect_shape_error([&] { (void)(call); }, __LINE__, {__VA_ARGS__})

// --- creation ---------------------------------------------------------------------------------

TEST(CreationOps, GiveTheRequestedShapeAndDtype) {
  EXPECT_EQ(type_of(full({2, 3}, 7.5)), "f32[2,3]");
  EXPECT_EQ(type_of(zeros({4}, DType::kInt64)), "s64[4]");
  EXPECT_EQ(type_of(ones({}, DType::kBool)), "pred[]");
  EXPECT_EQ(type_of(zeros({0, 3})), "f32[0,3]");
  EXPECT_EQ(type_of(zeros_like(t({2, 5}, DType::kBFloat16))), "bf16[2,5]");
  EXPECT_EQ(type_of(ones_like(t({3}, DType::kInt32))), "s32[3]");
  EXPECT_EQ(type_of(scalar_tensor(2.5, DType::kFloat64)), "f64[]");
}

TEST(CreationOps, FullTakesItsDtypeFromItsValueAsTorch) {
  // torch.full(size, 3) is int64, torch.full(size, True) bool, torch.full(size, 2.5) float32.
  EXPECT_EQ(type_of(full({2, 3}, 3)), "s64[2,3]");
  EXPECT_EQ(type_of(full({2}, int64_t{-4})), "s64[2]");
  EXPECT_EQ(type_of(full({2}, true)), "pred[2]");
  EXPECT_EQ(type_of(full({2}, 2.5f)), "f32[2]");
  EXPECT_EQ(type_of(full({2}, 2.5)), "f32[2]");
  // A dtype given wins.
  EXPECT_EQ(type_of(full({2}, 3, DType::kFloat32)), "f32[2]");
  EXPECT_EQ(type_of(full({2}, 3, DType::kBFloat16, Device{})), "bf16[2]");
}

TEST(CreationOps, ArangeCountsLikeTorch) {
  EXPECT_EQ(type_of(arange(0, 1, 0.3)), "f32[4]");
  EXPECT_EQ(type_of(arange(5, 0, -1, DType::kInt64)), "s64[5]");
  EXPECT_EQ(type_of(arange(0.0, 5.0, 1.0, DType::kBFloat16)), "bf16[5]");
}

TEST(CreationOps, ArangeTakesItsDtypeFromItsArgumentsAsTorch) {
  // Integers give s64, any floating-point argument f32, as torch.arange.
  EXPECT_EQ(type_of(arange(5)), "s64[5]");
  EXPECT_EQ(type_of(arange(int64_t{3})), "s64[3]");
  EXPECT_EQ(type_of(arange(2.5)), "f32[3]");
  EXPECT_EQ(type_of(arange(0, 5)), "s64[5]");
  EXPECT_EQ(type_of(arange(2, 2)), "s64[0]");
  EXPECT_EQ(type_of(arange(1, 4.0)), "f32[3]");
  EXPECT_EQ(type_of(arange(0.0, 5.0)), "f32[5]");
  EXPECT_EQ(type_of(arange(1, 10, 3)), "s64[3]");
  EXPECT_EQ(type_of(arange(1, 10, 2.5)), "f32[4]");
}

TEST(CreationOps, RejectBadArguments) {
  EXPECT_SHAPE_ERROR(full({2, -1}, 0), "full", "[2,-1]");
  EXPECT_SHAPE_ERROR(arange(0, 5, 0), "arange", "step");
  EXPECT_SHAPE_ERROR(arange(0, 5, -1), "arange", "[0, 5)");
}

// --- random -----------------------------------------------------------------------------------

TEST(RandomOps, GiveTheRequestedShapeAndDtype) {
  EXPECT_EQ(type_of(rand({2, 3})), "f32[2,3]");
  EXPECT_EQ(type_of(randn({4}, DType::kBFloat16)), "bf16[4]");
  EXPECT_EQ(type_of(randint(0, 10, {3, 1})), "s64[3,1]");
  EXPECT_EQ(type_of(randint(0, 2, {2}, DType::kBool)), "pred[2]");
  EXPECT_EQ(type_of(bernoulli(full({2, 2}, 0.5, DType::kFloat64))), "f64[2,2]");
  EXPECT_EQ(type_of(bernoulli({5}, 0.3, DType::kInt32)), "s32[5]");
  EXPECT_EQ(type_of(rand({0, 4})), "f32[0,4]");
  EXPECT_EQ(rand({2}, DType::kFloat32, Device{3}).device().ordinal, 3);
}

TEST(RandomOps, ReadSeedAndOffsetAsS64ParametersAndAdvanceInBlocksOfFour) {
  const Device device{11};
  TraceContext::current().set_rng_state(device, 1234);
  const Tensor first = rand({3}, DType::kFloat32, device);
  const Tensor second = randn({5}, DType::kFloat32, device);
  const Tensor third = bernoulli({2}, 0.5, DType::kFloat32, device);
  for (const Tensor* x : {&first, &second, &third}) {
    ASSERT_GE(ir(*x).operands().size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(ir(*x).operands()[i]->op(), Op::kParameter);
      EXPECT_EQ(ir(*x).operands()[i]->dtype(), DType::kInt64);
    }
    EXPECT_EQ(ir(*x).operands()[0]->value(), 1234);
  }
  EXPECT_EQ(ir(first).operands()[1]->value(), 0);
  EXPECT_EQ(ir(second).operands()[1]->value(), 4);  // after 3 numbers, rounded up to 4
  EXPECT_EQ(ir(third).operands()[1]->value(), 12);  // after 5 more, rounded up to 8
  EXPECT_EQ(TraceContext::current().rng_state(device).offset, 16u);
}

TEST(RandomOps, CarryTheirRangesAsAttributes) {
  EXPECT_EQ(ir(rand({2})).reals().size(), 2u);
  EXPECT_EQ(ints_of(randint(-3, 7, {2})), (std::vector<int64_t>{-3, 7}));
  EXPECT_EQ(ir(bernoulli(t({2}))).operands().size(), 3u);
}

TEST(RandomOps, RejectBadArguments) {
  EXPECT_SHAPE_ERROR(randint(5, 5, {2, 3}), "randint", "[2,3]");
  EXPECT_SHAPE_ERROR(randint(0, 3, {2}, DType::kBool), "randint", "pred[2]");
  EXPECT_SHAPE_ERROR(rand({2}, DType::kInt64), "rand", "s64");
  EXPECT_SHAPE_ERROR(randn({-1}), "randn", "[-1]");
  EXPECT_SHAPE_ERROR(bernoulli({3}, 1.5), "bernoulli", "[3]");
  EXPECT_SHAPE_ERROR(bernoulli(t({2, 2}, DType::kInt64)), "bernoulli", "s64[2,2]");
}

// --- elementwise ------------------------------------------------------------------------------

TEST(ElementwiseOps, BroadcastAsNumPy) {
  EXPECT_EQ(type_of(add(t({2, 1}), t({3}))), "f32[2,3]");
  EXPECT_EQ(type_of(sub(t({4, 1, 3}), t({2, 1}))), "f32[4,2,3]");
  EXPECT_EQ(type_of(mul(t({}), t({2}))), "f32[2]");
  EXPECT_EQ(type_of(div(t({0, 3}), t({1, 3}))), "f32[0,3]");
  EXPECT_EQ(type_of(pow(t({1}), t({}))), "f32[1]");
  EXPECT_EQ(type_of(maximum(t({5, 1}), t({1, 6}))), "f32[5,6]");
  EXPECT_EQ(type_of(minimum(t({2, 3}), t({2, 3}))), "f32[2,3]");
}

TEST(ElementwiseOps, PromoteDtypesAsTorch) {
  EXPECT_EQ(type_of(add(t({2}, DType::kInt32), t({2}))), "f32[2]");
  EXPECT_EQ(type_of(add(t({2}, DType::kInt32), t({2}, DType::kInt64))), "s64[2]");
  EXPECT_EQ(type_of(mul(t({2}, DType::kBFloat16), t({2}))), "f32[2]");
  EXPECT_EQ(type_of(div(t({2}, DType::kInt64), t({2}, DType::kInt64))), "f32[2]");
  // Scalars as Python numbers: an integer keeps an integer tensor's dtype, a float makes it f32.
  EXPECT_EQ(type_of(pow(t({2}, DType::kInt32), 2)), "s32[2]");
  EXPECT_EQ(type_of(pow(t({2}, DType::kInt32), 2.0)), "f32[2]");
  EXPECT_EQ(type_of(pow(t({2}, DType::kInt32), 0.5)), "f32[2]");
  EXPECT_EQ(type_of(add(t({2}, DType::kInt64), 1.5)), "f32[2]");
  EXPECT_EQ(type_of(add(t({2}, DType::kInt64), 1)), "s64[2]");
  EXPECT_EQ(type_of(add(t({2}, DType::kBool), 1)), "s64[2]");
  EXPECT_EQ(type_of(add(t({2}, DType::kBool), 1.0)), "f32[2]");
  EXPECT_EQ(type_of(mul(t({2}, DType::kInt32), 2.0)), "f32[2]");
  EXPECT_EQ(type_of(mul(t({2}, DType::kInt32), int64_t{2})), "s32[2]");
  EXPECT_EQ(type_of(div(t({2}, DType::kInt32), 2)), "f32[2]");
  EXPECT_EQ(type_of(sub(t({2}, DType::kFloat64), 3.0)), "f64[2]");
  EXPECT_EQ(type_of(mul(t({2}, DType::kBFloat16), 0.5)), "bf16[2]");
  EXPECT_EQ(type_of(div(t({2}, DType::kInt32), 2.0)), "f32[2]");
}

TEST(ElementwiseOps, ComparisonsAndLogicalOpsGivePred) {
  EXPECT_EQ(type_of(eq(t({2, 1}), t({3}))), "pred[2,3]");
  EXPECT_EQ(type_of(ne(t({2}, DType::kInt32), t({2}))), "pred[2]");
  EXPECT_EQ(type_of(lt(t({2}), t({}))), "pred[2]");
  EXPECT_EQ(type_of(le(t({2}), t({2}))), "pred[2]");
  EXPECT_EQ(type_of(gt(t({2}), t({2}))), "pred[2]");
  EXPECT_EQ(type_of(ge(t({2}), t({2}))), "pred[2]");
  EXPECT_EQ(type_of(eq(t({3}, DType::kInt64), 2.0)), "pred[3]");
  EXPECT_EQ(type_of(lt(t({3}), 0.5)), "pred[3]");
  EXPECT_EQ(type_of(gt(t({3}), 0.5)), "pred[3]");
  EXPECT_EQ(type_of(logical_and(t({2, 1}), t({4}, DType::kInt32))), "pred[2,4]");
  EXPECT_EQ(type_of(logical_or(t({2}), t({2}))), "pred[2]");
  EXPECT_EQ(type_of(logical_not(t({2}, DType::kInt64))), "pred[2]");
}

TEST(ElementwiseOps, WhereBroadcastsAllThreeAndPromotesTheValues) {
  EXPECT_EQ(type_of(where(t({2, 1}, DType::kBool), t({3}, DType::kInt32), t({1}))), "f32[2,3]");
  EXPECT_EQ(type_of(where(t({4, 1, 1}, DType::kBool), t({2, 1}), t({3}))), "f32[4,2,3]");
}

TEST(ElementwiseOps, UnaryOpsKeepTheShape) {
  EXPECT_EQ(type_of(neg(t({2, 3}, DType::kInt32))), "s32[2,3]");
  EXPECT_EQ(type_of(exp(t({2}, DType::kInt64))), "f32[2]");
  EXPECT_EQ(type_of(log(t({2}, DType::kFloat64))), "f64[2]");
  EXPECT_EQ(type_of(sqrt(t({}))), "f32[]");
  EXPECT_EQ(type_of(rsqrt(t({0}))), "f32[0]");
  EXPECT_EQ(type_of(tanh(t({2}, DType::kBFloat16))), "bf16[2]");
  EXPECT_EQ(type_of(sigmoid(t({2}, DType::kInt32))), "f32[2]");
  EXPECT_EQ(type_of(relu(t({2}, DType::kInt64))), "s64[2]");
  EXPECT_EQ(type_of(abs(t({2}, DType::kInt32))), "s32[2]");
  EXPECT_EQ(type_of(gelu(t({2, 2}))), "f32[2,2]");
  EXPECT_EQ(ints_of(gelu(t({2}), "tanh")), (std::vector<int64_t>{1}));
  EXPECT_EQ(type_of(gelu_backward(t({2, 2}), t({2, 2}, DType::kBFloat16))), "f32[2,2]");
  EXPECT_EQ(ints_of(gelu_backward(t({2}), t({2}), "tanh")), (std::vector<int64_t>{1}));
  EXPECT_EQ(type_of(cast(t({2, 3}), DType::kInt32)), "s32[2,3]");
}

TEST(ElementwiseOps, OperatorsTraceLikeTheirFunctions) {
  const Tensor a = t({2, 1});
  const Tensor b = t({3}, DType::kInt32);
  EXPECT_EQ(type_of(a + b), "f32[2,3]");
  EXPECT_EQ(type_of(a - b), "f32[2,3]");
  EXPECT_EQ(type_of(b * b), "s32[3]");
  EXPECT_EQ(type_of(b / b), "f32[3]");
  EXPECT_EQ(type_of(b + 1), "s32[3]");
  EXPECT_EQ(type_of(2 - b), "s32[3]");
  EXPECT_EQ(type_of(b + 1.0), "f32[3]");
  EXPECT_EQ(type_of(2.0 - b), "f32[3]");
  EXPECT_EQ(type_of(2 * a), "f32[2,1]");
  EXPECT_EQ(type_of(2.0 / b), "f32[3]");
  EXPECT_EQ(type_of(3.0 * a), "f32[2,1]");
  EXPECT_EQ(type_of(-a), "f32[2,1]");
}

TEST(ElementwiseOps, RejectBadOperands) {
  const Tensor a = t({2, 3});
  const Tensor b = t({4});
  EXPECT_SHAPE_ERROR(add(a, b), "add", "f32[2,3]", "f32[4]");
  EXPECT_SHAPE_ERROR(a * b, "mul", "f32[2,3]", "f32[4]");
  EXPECT_SHAPE_ERROR(eq(a, t({3, 3}, DType::kInt32)), "eq", "f32[2,3]", "s32[3,3]");
  EXPECT_SHAPE_ERROR(where(t({5}, DType::kBool), a, a), "where", "pred[5]");
  EXPECT_SHAPE_ERROR(gelu(a, "bogus"), "gelu", "bogus");
  EXPECT_SHAPE_ERROR(gelu_backward(a, t({3})), "gelu_backward", "f32[2,3]", "f32[3]", "one shape");
  EXPECT_SHAPE_ERROR(gelu_backward(a, a, "bogus"), "gelu_backward", "bogus");
  EXPECT_SHAPE_ERROR(add(Tensor{}, a), "add", "undefined");
  EXPECT_SHAPE_ERROR(add(a, zeros({2, 3}, DType::kFloat32, Device{1})), "add", "xla:0", "xla:1");
}

TEST(ElementwiseOps, RefuseWhatTorchRefuses) {
  const Tensor mask = t({3}, DType::kBool);
  const Tensor ints = t({3}, DType::kInt64);
  EXPECT_SHAPE_ERROR(sub(mask, t({3})), "sub", "pred[3]", "logical_not");
  EXPECT_SHAPE_ERROR(t({3}) - mask, "sub", "pred[3]");
  EXPECT_SHAPE_ERROR(mask - 1.0, "sub", "pred[3]");
  EXPECT_SHAPE_ERROR(1.0 - mask, "sub", "pred[3]");
  EXPECT_SHAPE_ERROR(neg(mask), "neg", "pred[3]", "logical_not");
  EXPECT_SHAPE_ERROR(abs(mask), "abs", "pred[3]");
  EXPECT_SHAPE_ERROR(relu(mask), "relu", "pred[3]");
  EXPECT_SHAPE_ERROR(pow(mask, mask), "pow", "pred[3]");
  EXPECT_SHAPE_ERROR(gelu(ints), "gelu", "floating-point", "s64[3]");
  EXPECT_SHAPE_ERROR(gelu_backward(t({3}), ints), "gelu_backward", "floating-point", "s64[3]");
  EXPECT_SHAPE_ERROR(silu(ints), "silu", "floating-point", "s64[3]");
  EXPECT_SHAPE_ERROR(argmax(mask), "argmax", "pred[3]");
  EXPECT_SHAPE_ERROR(where(t({3}), ints, ints), "where", "condition", "f32[3]");
  // What torch takes stays: a pred exponent of numbers, a mask added or multiplied.
  EXPECT_EQ(type_of(pow(ints, mask)), "s64[3]");
  EXPECT_EQ(type_of(add(mask, mask)), "pred[3]");
  EXPECT_EQ(type_of(mul(mask, ints)), "s64[3]");
}

// --- reductions -------------------------------------------------------------------------------

TEST(Reductions, ReduceTheGivenDimsOrAll) {
  const Tensor x = t({2, 3, 4});
  EXPECT_EQ(type_of(sum(x)), "f32[]");
  EXPECT_EQ(type_of(sum(x, {1})), "f32[2,4]");
  EXPECT_EQ(type_of(sum(x, {1}, true)), "f32[2,1,4]");
  EXPECT_EQ(type_of(sum(x, {-1, 0})), "f32[3]");
  EXPECT_EQ(type_of(sum(x, {}, true)), "f32[1,1,1]");
  EXPECT_EQ(type_of(mean(x, {2})), "f32[2,3]");
  EXPECT_EQ(type_of(amax(x, {0, 2}, true)), "f32[1,3,1]");
  EXPECT_EQ(type_of(amin(x, {1})), "f32[2,4]");
  EXPECT_EQ(type_of(logsumexp(x, {2})), "f32[2,3]");
  EXPECT_EQ(type_of(logsumexp(x, {}, true)), "f32[1,1,1]");
}

TEST(Reductions, PromoteAsTorch) {
  EXPECT_EQ(type_of(sum(t({2, 3}, DType::kInt32))), "s64[]");
  EXPECT_EQ(type_of(sum(t({2, 3}, DType::kBool), {0})), "s64[3]");
  EXPECT_EQ(type_of(sum(t({2}, DType::kBFloat16))), "bf16[]");
  EXPECT_SHAPE_ERROR(mean(t({2}, DType::kInt64)), "mean", "floating-point", "s64[2]");
  EXPECT_EQ(type_of(mean(t({2}, DType::kFloat64))), "f64[]");
  EXPECT_EQ(type_of(amax(t({2}, DType::kInt32))), "s32[]");
  EXPECT_EQ(type_of(amin(t({2}, DType::kBool))), "pred[]");
  EXPECT_EQ(type_of(logsumexp(t({2}, DType::kInt64), {0})), "f32[]");
}

TEST(Reductions, HandleZeroDimAndEmptyTensors) {
  EXPECT_EQ(type_of(sum(t({}))), "f32[]");
  EXPECT_EQ(type_of(sum(t({}), {0}, true)), "f32[]");
  EXPECT_EQ(type_of(mean(t({}), {-1})), "f32[]");
  EXPECT_EQ(type_of(sum(t({0, 3}), {0})), "f32[3]");
  EXPECT_EQ(type_of(sum(t({0, 3}), {1})), "f32[0]");
  EXPECT_EQ(type_of(amax(t({0, 3}), {1})), "f32[0]");
  EXPECT_EQ(ints_of(sum(t({}))), (std::vector<int64_t>{0}));
}

TEST(Reductions, SortAndNormalizeTheirDims) {
  EXPECT_EQ(ints_of(sum(t({2, 3, 4}), {2, -3}, true)), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(ints_of(amax(t({2, 3}))), (std::vector<int64_t>{0, 0, 1}));
}

TEST(Reductions, ArgmaxGivesS64) {
  const Tensor x = t({2, 3, 4});
  EXPECT_EQ(type_of(argmax(x)), "s64[]");
  EXPECT_EQ(type_of(argmax(x, std::nullopt, true)), "s64[1,1,1]");
  EXPECT_EQ(type_of(argmax(x, 1)), "s64[2,4]");
  EXPECT_EQ(type_of(argmax(x, -1, true)), "s64[2,3,1]");
  EXPECT_EQ(type_of(argmax(t({}))), "s64[]");
  EXPECT_EQ(type_of(argmax(t({}), 0, true)), "s64[]");
  EXPECT_EQ(ints_of(argmax(x, -2, true)), (std::vector<int64_t>{1, 1}));
  // Over everything: argmax of x viewed as 1-d.
  const Tensor index = argmax(x);
  const Node& flat = ir(index);
  EXPECT_EQ(flat.operands()[0]->op(), Op::kReshape);
  EXPECT_EQ(flat.operands()[0]->shape(), Shape{24});
}

TEST(Reductions, SoftmaxKeepsTheShape) {
  EXPECT_EQ(type_of(softmax(t({2, 3}), 1)), "f32[2,3]");
  EXPECT_EQ(type_of(log_softmax(t({2, 3}, DType::kFloat64), -2)), "f64[2,3]");
  EXPECT_SHAPE_ERROR(softmax(t({4}, DType::kInt64), 0), "softmax", "floating-point", "s64[4]");
  EXPECT_SHAPE_ERROR(log_softmax(t({4}, DType::kInt32), 0), "log_softmax", "s32[4]");
  EXPECT_EQ(type_of(log_softmax(t({}), 0)), "f32[]");
  EXPECT_EQ(ints_of(softmax(t({2, 3}), -1)), (std::vector<int64_t>{1}));
}

TEST(Reductions, RejectBadDims) {
  const Tensor x = t({2, 3, 4});
  EXPECT_SHAPE_ERROR(sum(x, {1, -2}), "sum", "f32[2,3,4]", "more than once");
  EXPECT_SHAPE_ERROR(mean(x, {3}), "mean", "f32[2,3,4]", "dim 3");
  EXPECT_SHAPE_ERROR(amax(x, {-4}), "amax", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(amin(t({0, 2}), {0}), "amin", "f32[0,2]", "empty");
  EXPECT_SHAPE_ERROR(logsumexp(x, {0, 0}), "logsumexp", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(argmax(x, 5), "argmax", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(argmax(t({0, 3})), "argmax", "f32[0,3]");
  EXPECT_SHAPE_ERROR(argmax(t({3, 0}), 1), "argmax", "f32[3,0]");
  EXPECT_SHAPE_ERROR(softmax(x, 3), "softmax", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(log_softmax(t({}), 1), "log_softmax", "f32[]");
}

// --- matmul and linear ------------------------------------------------------------------------

TEST(Matmul, FollowsTorchForEveryRank) {
  EXPECT_EQ(type_of(matmul(t({2, 3}), t({3, 4}))), "f32[2,4]");
  EXPECT_EQ(type_of(matmul(t({3}), t({3}))), "f32[]");
  EXPECT_EQ(type_of(matmul(t({3}), t({3, 4}))), "f32[4]");
  EXPECT_EQ(type_of(matmul(t({2, 3}), t({3}))), "f32[2]");
  EXPECT_EQ(type_of(matmul(t({3}), t({5, 3, 4}))), "f32[5,4]");
  EXPECT_EQ(type_of(matmul(t({5, 2, 3}), t({3}))), "f32[5,2]");
  EXPECT_EQ(type_of(matmul(t({5, 2, 3}), t({3, 4}))), "f32[5,2,4]");
  EXPECT_EQ(type_of(matmul(t({5, 1, 2, 3}), t({7, 3, 4}))), "f32[5,7,2,4]");
  EXPECT_EQ(type_of(matmul(t({0, 3}), t({3, 4}))), "f32[0,4]");
  EXPECT_EQ(type_of(matmul(t({2, 0}), t({0, 4}))), "f32[2,4]");
}

TEST(Matmul, NeverPromotesAsTorch) {
  EXPECT_EQ(type_of(matmul(t({2, 3}, DType::kInt64), t({3, 4}, DType::kInt64))), "s64[2,4]");
  EXPECT_EQ(type_of(matmul(t({2, 3}, DType::kBFloat16), t({3}, DType::kBFloat16))), "bf16[2]");
  EXPECT_SHAPE_ERROR(matmul(t({2, 3}, DType::kInt32), t({3, 4}, DType::kInt64)), "matmul",
                     "s32[2,3]", "s64[3,4]", "same dtype");
  EXPECT_SHAPE_ERROR(matmul(t({2, 3}), t({3, 4}, DType::kFloat64)), "matmul", "f32[2,3]",
                     "f64[3,4]");
  EXPECT_SHAPE_ERROR(linear(t({2, 3}), t({4, 3}, DType::kBFloat16)), "linear", "bf16[4,3]");
}

TEST(Matmul, DotOfVectorsIsAReshapedRankTwoMatmul) {
  const Tensor dot = matmul(t({3}), t({3}));
  EXPECT_EQ(ir(dot).op(), Op::kReshape);
  const Node& product = *ir(dot).operands()[0];
  EXPECT_EQ(product.op(), Op::kMatmul);
  EXPECT_EQ(product.shape(), (Shape{1, 1}));
  EXPECT_EQ(product.operands()[0]->shape(), (Shape{1, 3}));
  EXPECT_EQ(product.operands()[1]->shape(), (Shape{3, 1}));
  EXPECT_EQ(product.operands()[0]->op(), Op::kReshape);
  EXPECT_EQ(std::vector<int64_t>(product.ints().begin(), product.ints().end()),
            (std::vector<int64_t>{0, 0}));
}

TEST(Matmul, RejectsMismatchedOperands) {
  EXPECT_SHAPE_ERROR(matmul(t({2, 3}), t({4, 5})), "matmul", "f32[2,3]", "f32[4,5]");
  EXPECT_SHAPE_ERROR(matmul(t({3}), t({4})), "matmul", "f32[3]", "f32[4]");
  EXPECT_SHAPE_ERROR(matmul(t({2, 2, 3}), t({5, 3, 4})), "matmul", "f32[2,2,3]", "f32[5,3,4]");
  EXPECT_SHAPE_ERROR(matmul(t({}), t({3})), "matmul", "f32[]", "f32[3]");
  EXPECT_SHAPE_ERROR(matmul(t({2}, DType::kBool), t({2}, DType::kBool)), "matmul", "pred[2]");
}

TEST(Linear, MultipliesByTheTransposedWeightAndAddsTheBias) {
  EXPECT_EQ(type_of(linear(t({8, 4}), t({5, 4}), t({5}))), "f32[8,5]");
  EXPECT_EQ(type_of(linear(t({2, 3, 4}), t({5, 4}))), "f32[2,3,5]");
  EXPECT_EQ(type_of(linear(t({4}), t({5, 4}))), "f32[5]");
  EXPECT_EQ(type_of(linear(t({3, 4}), t({4}))), "f32[3]");
  const Tensor y = linear(t({8, 4}), t({5, 4}), t({5}));
  EXPECT_EQ(ir(y).op(), Op::kAdd);
  const Node& product = *ir(y).operands()[0];
  EXPECT_EQ(product.op(), Op::kMatmul);
  EXPECT_EQ(std::vector<int64_t>(product.ints().begin(), product.ints().end()),
            (std::vector<int64_t>{0, 1}));
}

TEST(Linear, RejectsMismatchedOperands) {
  EXPECT_SHAPE_ERROR(linear(t({8, 4}), t({5, 3})), "linear", "f32[8,4]", "f32[5,3]");
  EXPECT_SHAPE_ERROR(linear(t({8, 4}), t({5, 4}), t({4})), "linear", "f32[4]", "[8,5]");
  EXPECT_SHAPE_ERROR(linear(t({8, 4}), t({2, 5, 4})), "linear", "f32[2,5,4]");
}

// --- conv2d and pooling -----------------------------------------------------------------------

TEST(Conv2d, ComputesTheOutputSizeAsTorch) {
  const Tensor x = t({1, 3, 32, 32});
  const Tensor w = t({8, 3, 3, 3});
  EXPECT_EQ(type_of(conv2d(x, w)), "f32[1,8,30,30]");
  EXPECT_EQ(type_of(conv2d(x, w, {}, {.stride = {2}, .padding = {1}})), "f32[1,8,16,16]");
  EXPECT_EQ(type_of(conv2d(x, w, {}, {.dilation = {2, 2}})), "f32[1,8,28,28]");
  EXPECT_EQ(type_of(conv2d(x, w, {}, {.stride = {2, 1}, .padding = {0, 2}})), "f32[1,8,15,34]");
  EXPECT_EQ(type_of(conv2d(t({2, 4, 10, 10}), t({6, 2, 3, 3}), {}, {.groups = 2})), "f32[2,6,8,8]");
  EXPECT_EQ(type_of(conv2d(t({1, 3, 5, 5}, DType::kBFloat16), t({2, 3, 5, 5}, DType::kBFloat16))),
            "bf16[1,2,1,1]");
  // As torch, never promoted: the input, weight and bias must agree.
  EXPECT_SHAPE_ERROR(conv2d(t({1, 3, 5, 5}, DType::kBFloat16), t({2, 3, 5, 5})), "conv2d",
                     "bf16[1,3,5,5]", "f32[2,3,5,5]", "same dtype");
  EXPECT_SHAPE_ERROR(conv2d(t({1, 3, 5, 5}), t({2, 3, 5, 5}), t({2}, DType::kFloat64)), "conv2d",
                     "bias f64[2]");
  EXPECT_EQ(type_of(conv2d(t({0, 3, 5, 5}), t({2, 3, 3, 3}))), "f32[0,2,3,3]");
}

TEST(Conv2d, CarriesItsAttributesAndAddsTheBiasPerChannel) {
  const Tensor y = conv2d(t({1, 3, 9, 9}), t({8, 3, 3, 3}), t({8}),
                          {.stride = {2, 3}, .padding = {1, 0}, .dilation = {1, 2}});
  EXPECT_EQ(type_of(y), "f32[1,8,5,2]");
  EXPECT_EQ(ir(y).op(), Op::kAdd);
  EXPECT_EQ(ir(y).operands()[1]->shape(), (Shape{1, 8, 1, 1}));
  const Node& conv = *ir(y).operands()[0];
  EXPECT_EQ(std::vector<int64_t>(conv.ints().begin(), conv.ints().end()),
            (std::vector<int64_t>{2, 3, 1, 0, 1, 2, 1}));
}

TEST(Conv2d, RejectsBadShapes) {
  const Tensor x = t({1, 3, 8, 8});
  EXPECT_SHAPE_ERROR(conv2d(t({3, 8, 8}), t({4, 3, 3, 3})), "conv2d", "f32[3,8,8]");
  EXPECT_SHAPE_ERROR(conv2d(x, t({4, 3, 3})), "conv2d", "f32[4,3,3]");
  EXPECT_SHAPE_ERROR(conv2d(x, t({4, 2, 3, 3})), "conv2d", "f32[1,3,8,8]", "f32[4,2,3,3]");
  EXPECT_SHAPE_ERROR(conv2d(t({1, 4, 8, 8}), t({3, 2, 3, 3}), {}, {.groups = 2}), "conv2d",
                     "f32[1,4,8,8]", "f32[3,2,3,3]");
  EXPECT_SHAPE_ERROR(conv2d(x, t({4, 3, 3, 3}), {}, {.groups = 2}), "conv2d", "f32[1,3,8,8]");
  EXPECT_SHAPE_ERROR(conv2d(t({1, 3, 2, 2}), t({4, 3, 3, 3})), "conv2d", "f32[1,3,2,2]");
  EXPECT_SHAPE_ERROR(conv2d(x, t({4, 3, 3, 3}), t({5})), "conv2d", "f32[5]");
  EXPECT_SHAPE_ERROR(conv2d(x, t({4, 3, 3, 3}), {}, {.stride = {0}}), "conv2d", "stride");
  EXPECT_SHAPE_ERROR(conv2d(t({1, 3, 8, 8}, DType::kInt64), t({4, 3, 3, 3}, DType::kInt64)),
                     "conv2d", "s64[1,3,8,8]");
}

TEST(ConvTranspose2d, ComputesTheOutputSizeAsTorch) {
  const Tensor x = t({1, 4, 5, 5});
  const Tensor w = t({4, 2, 3, 3});
  EXPECT_EQ(type_of(conv_transpose2d(x, w)), "f32[1,2,7,7]");
  EXPECT_EQ(type_of(conv_transpose2d(x, w, {}, {.stride = {2}, .padding = {1}})), "f32[1,2,9,9]");
  EXPECT_EQ(type_of(conv_transpose2d(x, w, {}, {.stride = {2}, .output_padding = {1, 0}})),
            "f32[1,2,12,11]");
  EXPECT_EQ(type_of(conv_transpose2d(x, w, {}, {.dilation = {2, 1}})), "f32[1,2,9,7]");
  EXPECT_EQ(type_of(conv_transpose2d(x, t({4, 3, 3, 3}), {}, {.groups = 2})), "f32[1,6,7,7]");
  const Tensor y = conv_transpose2d(x, w, t({2}), {.stride = {2, 3}, .padding = {1, 0}});
  EXPECT_EQ(ir(y).op(), Op::kAdd);
  const Node& conv = *ir(y).operands()[0];
  EXPECT_EQ(conv.op(), Op::kConvTranspose2d);
  EXPECT_EQ(std::vector<int64_t>(conv.ints().begin(), conv.ints().end()),
            (std::vector<int64_t>{2, 3, 1, 0, 1, 1, 1}));
}

TEST(ConvTranspose2d, RejectsBadShapes) {
  const Tensor x = t({1, 4, 5, 5});
  EXPECT_SHAPE_ERROR(conv_transpose2d(x, t({3, 2, 3, 3})), "conv_transpose2d", "f32[1,4,5,5]",
                     "f32[3,2,3,3]", "dim 0 must be the input channels");
  EXPECT_SHAPE_ERROR(
      conv_transpose2d(x, t({4, 2, 3, 3}), {}, {.stride = {2}, .output_padding = {2}}),
      "conv_transpose2d", "output_padding [2,2] must be smaller");
  EXPECT_SHAPE_ERROR(conv_transpose2d(x, t({4, 2, 3, 3}), {}, {.groups = 3}), "conv_transpose2d",
                     "divisible by groups");
  EXPECT_SHAPE_ERROR(conv_transpose2d(x, t({4, 2, 3, 3}), {}, {.padding = {4}}), "conv_transpose2d",
                     "padding [4,4] is too large");
  EXPECT_SHAPE_ERROR(conv_transpose2d(x, t({4, 2, 3, 3}), t({3})), "conv_transpose2d", "f32[3]");
  EXPECT_SHAPE_ERROR(conv_transpose2d(x, t({4, 2, 3})), "conv_transpose2d", "[C, O / groups");
  EXPECT_SHAPE_ERROR(
      conv_transpose2d(t({1, 4, 5, 5}, DType::kInt64), t({4, 2, 3, 3}, DType::kInt64)),
      "conv_transpose2d", "s64[1,4,5,5]");
}

TEST(Pooling, ComputesTheOutputSizeAsTorch) {
  const Tensor x = t({1, 3, 32, 32});
  EXPECT_EQ(type_of(max_pool2d(x, {.kernel_size = {2}})), "f32[1,3,16,16]");
  EXPECT_EQ(type_of(max_pool2d(x, {.kernel_size = {3}, .stride = {2}})), "f32[1,3,15,15]");
  EXPECT_EQ(type_of(max_pool2d(x, {.kernel_size = {2, 3}, .stride = {1}})), "f32[1,3,31,30]");
  EXPECT_EQ(
      type_of(max_pool2d(t({1, 1, 10, 10}), {.kernel_size = {3}, .stride = {1}, .dilation = {2}})),
      "f32[1,1,6,6]");
  EXPECT_EQ(type_of(avg_pool2d(x, {.kernel_size = {2}})), "f32[1,3,16,16]");
  EXPECT_EQ(
      type_of(avg_pool2d(t({2, 1, 7, 7}), {.kernel_size = {3}, .stride = {2}, .padding = {1}})),
      "f32[2,1,4,4]");
}

TEST(Pooling, CeilModeKeepsALastPartialWindowOnlyIfItStartsInside) {
  const Pool2dOptions ceil{.kernel_size = {3}, .stride = {2}, .ceil_mode = true};
  EXPECT_EQ(type_of(max_pool2d(t({1, 1, 6, 6}), {.kernel_size = {3}, .stride = {2}})),
            "f32[1,1,2,2]");
  EXPECT_EQ(type_of(max_pool2d(t({1, 1, 6, 6}), ceil)), "f32[1,1,3,3]");
  EXPECT_EQ(type_of(avg_pool2d(t({1, 1, 6, 6}), ceil)), "f32[1,1,3,3]");
  // 5 wide, kernel 2, stride 2, padding 1: a fourth window would start at 6, past the input
  // and its left padding (5 + 1), so torch drops it.
  const Pool2dOptions edge{.kernel_size = {2}, .stride = {2}, .padding = {1}, .ceil_mode = true};
  EXPECT_EQ(type_of(max_pool2d(t({1, 1, 5, 5}), edge)), "f32[1,1,3,3]");
}

TEST(Pooling, CarriesTheAttributesTheKernelsRead) {
  const Tensor x = t({1, 1, 9, 9});
  EXPECT_EQ(ints_of(max_pool2d(x, {.kernel_size = {3, 2},
                                   .stride = {2, 1},
                                   .padding = {1, 0},
                                   .dilation = {2, 1},
                                   .ceil_mode = true})),
            (std::vector<int64_t>{3, 2, 2, 1, 1, 0, 2, 1, 1}));
  EXPECT_EQ(ints_of(avg_pool2d(x, {.kernel_size = {3}, .count_include_pad = false})),
            (std::vector<int64_t>{3, 3, 3, 3, 0, 0, 0, 0}));
}

TEST(Pooling, RejectsBadOptions) {
  const Tensor x = t({1, 3, 8, 8});
  EXPECT_SHAPE_ERROR(max_pool2d(x, {.kernel_size = {2}, .padding = {2}}), "max_pool2d",
                     "f32[1,3,8,8]", "half");
  EXPECT_SHAPE_ERROR(avg_pool2d(t({3, 8, 8}), {.kernel_size = {2}}), "avg_pool2d", "f32[3,8,8]");
  EXPECT_SHAPE_ERROR(max_pool2d(t({1, 1, 2, 2}), {.kernel_size = {3}}), "max_pool2d",
                     "f32[1,1,2,2]");
  EXPECT_SHAPE_ERROR(avg_pool2d(x, {.kernel_size = {2, 2, 2}}), "avg_pool2d", "kernel_size");
  EXPECT_SHAPE_ERROR(max_pool2d(x, {.kernel_size = {0}}), "max_pool2d", "kernel_size");
  EXPECT_SHAPE_ERROR(max_pool2d(t({1, 3, 8, 8}, DType::kInt32), {.kernel_size = {2}}), "max_pool2d",
                     "s32[1,3,8,8]");
}

// As torch: avg_pool2d averages int64 but refuses int32; max_pool2d refuses both.
TEST(Pooling, AvgPool2dTakesS64AloneOfTheIntegers) {
  EXPECT_EQ(type_of(avg_pool2d(t({1, 2, 4, 4}, DType::kInt64), {.kernel_size = {2}})),
            "s64[1,2,2,2]");
  EXPECT_SHAPE_ERROR(avg_pool2d(t({1, 2, 4, 4}, DType::kInt32), {.kernel_size = {2}}), "avg_pool2d",
                     "s32[1,2,4,4]", "floating-point or s64");
  EXPECT_SHAPE_ERROR(max_pool2d(t({1, 2, 4, 4}, DType::kInt64), {.kernel_size = {2}}), "max_pool2d",
                     "s64[1,2,4,4]");
}

// --- shape ------------------------------------------------------------------------------------

TEST(Reshape, InfersOneDimAndKeepsTheElementCount) {
  const Tensor x = t({2, 3, 4});
  EXPECT_EQ(type_of(reshape(x, {6, -1})), "f32[6,4]");
  EXPECT_EQ(type_of(reshape(x, {-1})), "f32[24]");
  EXPECT_EQ(type_of(reshape(x, {2, 3, 4})), "f32[2,3,4]");
  EXPECT_EQ(type_of(view(t({}, DType::kInt32), {1, 1})), "s32[1,1]");
  EXPECT_EQ(type_of(reshape(t({1}), {})), "f32[]");
  EXPECT_EQ(type_of(reshape(t({0, 3}), {3, -1, 2})), "f32[3,0,2]");
  EXPECT_EQ(ir(reshape(x, {2, 3, 4})).op(), Op::kReshape);  // a node even for the same shape
}

TEST(Reshape, RejectsBadShapes) {
  const Tensor x = t({2, 3, 4});
  EXPECT_SHAPE_ERROR(reshape(x, {5, 5}), "reshape", "f32[2,3,4]", "[5,5]");
  EXPECT_SHAPE_ERROR(view(x, {-1, -1}), "view", "[-1,-1]");
  EXPECT_SHAPE_ERROR(reshape(x, {5, -1}), "reshape", "f32[2,3,4]", "[5,-1]");
  EXPECT_SHAPE_ERROR(reshape(t({0, 3}), {-1, 0}), "reshape", "f32[0,3]");
  EXPECT_SHAPE_ERROR(reshape(x, {-2, -12}), "reshape", "[-2,-12]");
  EXPECT_SHAPE_ERROR(reshape(t({1}), {1, 1, 1, 1, 1, 1, 1, 1, 1}), "reshape", "at most 8");
}

TEST(Flatten, MergesARangeOfDims) {
  const Tensor x = t({2, 3, 4});
  EXPECT_EQ(type_of(flatten(x)), "f32[24]");
  EXPECT_EQ(type_of(flatten(x, 1)), "f32[2,12]");
  EXPECT_EQ(type_of(flatten(x, 0, 1)), "f32[6,4]");
  EXPECT_EQ(type_of(flatten(x, -2, -2)), "f32[2,3,4]");
  EXPECT_EQ(type_of(flatten(t({}))), "f32[1]");
  EXPECT_SHAPE_ERROR(flatten(x, 2, 1), "flatten", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(flatten(x, 3), "flatten", "f32[2,3,4]");
}

TEST(SqueezeUnsqueeze, RemoveAndInsertSizeOneDims) {
  const Tensor x = t({2, 1, 3});
  EXPECT_EQ(type_of(squeeze(x, 1)), "f32[2,3]");
  EXPECT_EQ(type_of(squeeze(x, -2)), "f32[2,3]");
  EXPECT_EQ(type_of(squeeze(x, 0)), "f32[2,1,3]");
  EXPECT_EQ(type_of(squeeze(t({}), 0)), "f32[]");
  EXPECT_EQ(type_of(unsqueeze(t({2, 3}), 0)), "f32[1,2,3]");
  EXPECT_EQ(type_of(unsqueeze(t({2, 3}), 2)), "f32[2,3,1]");
  EXPECT_EQ(type_of(unsqueeze(t({2, 3}), -1)), "f32[2,3,1]");
  EXPECT_EQ(type_of(unsqueeze(t({}), 0)), "f32[1]");
  EXPECT_SHAPE_ERROR(squeeze(x, 3), "squeeze", "f32[2,1,3]");
  EXPECT_SHAPE_ERROR(unsqueeze(t({2, 3}), 3), "unsqueeze", "f32[2,3]");
  EXPECT_SHAPE_ERROR(unsqueeze(t({1, 1, 1, 1, 1, 1, 1, 1}), 0), "unsqueeze", "at most 8");
}

TEST(Permute, ReordersDims) {
  const Tensor x = t({2, 3, 4});
  EXPECT_EQ(type_of(permute(x, {2, 0, 1})), "f32[4,2,3]");
  EXPECT_EQ(ints_of(permute(x, {-1, 0, 1})), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(type_of(permute(t({}), {})), "f32[]");
  EXPECT_EQ(type_of(transpose(x, 0, 2)), "f32[4,3,2]");
  EXPECT_EQ(type_of(transpose(x, -1, -2)), "f32[2,4,3]");
  EXPECT_EQ(ints_of(transpose(x, -1, -2)), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_SHAPE_ERROR(permute(x, {0, 0, 1}), "permute", "f32[2,3,4]", "[0,0,1]");
  EXPECT_SHAPE_ERROR(permute(x, {0, 1}), "permute", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(permute(x, {0, 1, 3}), "permute", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(transpose(x, 0, 3), "transpose", "f32[2,3,4]");
}

TEST(Expand, GrowsOnlySizeOneDims) {
  EXPECT_EQ(type_of(expand(t({3, 1}), {2, 3, 4})), "f32[2,3,4]");
  EXPECT_EQ(type_of(expand(t({3, 1}), {-1, 5})), "f32[3,5]");
  EXPECT_EQ(type_of(expand(t({1}), {0})), "f32[0]");
  EXPECT_EQ(type_of(expand(t({}), {2, 2})), "f32[2,2]");
  EXPECT_SHAPE_ERROR(expand(t({3, 1}), {4, 4}), "expand", "f32[3,1]", "[4,4]");
  EXPECT_SHAPE_ERROR(expand(t({3, 1}), {3}), "expand", "f32[3,1]", "[3]");
  EXPECT_SHAPE_ERROR(expand(t({3, 1}), {-1, 3, 1}), "expand", "f32[3,1]", "[-1,3,1]");
  EXPECT_SHAPE_ERROR(expand(t({3, 1}), {3, -2}), "expand", "f32[3,1]");
}

TEST(Slice, ClampsLikePython) {
  const Tensor x = t({10, 4});
  EXPECT_EQ(type_of(slice(x, 0, 2, 8)), "f32[6,4]");
  EXPECT_EQ(type_of(slice(x, 0, 0, 10, 3)), "f32[4,4]");
  EXPECT_EQ(type_of(slice(x, 0, 1, 10, 2)), "f32[5,4]");
  EXPECT_EQ(type_of(slice(x, 0, -3, 100)), "f32[3,4]");
  EXPECT_EQ(type_of(slice(x, 0, 8, 2)), "f32[0,4]");
  EXPECT_EQ(type_of(slice(x, 0, -100, 2)), "f32[2,4]");
  EXPECT_EQ(type_of(slice(x, -1, 1, -1)), "f32[10,2]");
  EXPECT_EQ(ints_of(slice(x, 0, -3, 100)), (std::vector<int64_t>{0, 7, 1}));
  EXPECT_EQ(ints_of(slice(x, -1, 1, 4, 2)), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_SHAPE_ERROR(slice(x, 0, 0, 5, 0), "slice", "f32[10,4]", "step");
  EXPECT_SHAPE_ERROR(slice(x, 2, 0, 5), "slice", "f32[10,4]");
  EXPECT_SHAPE_ERROR(slice(t({}), 0, 0, 1), "slice", "f32[]");
}

TEST(Cat, JoinsAlongOneDimAndPromotes) {
  EXPECT_EQ(type_of(cat({t({2, 3}), t({4, 3})})), "f32[6,3]");
  EXPECT_EQ(type_of(cat({t({2, 3}), t({2, 5}), t({2, 1})}, -1)), "f32[2,9]");
  EXPECT_EQ(type_of(cat({t({2}, DType::kInt32), t({3})})), "f32[5]");
  EXPECT_EQ(type_of(cat({t({2}, DType::kInt32), t({3}, DType::kInt64)})), "s64[5]");
  EXPECT_EQ(type_of(cat({t({0, 3}), t({2, 3})})), "f32[2,3]");
  EXPECT_EQ(type_of(cat({t({7})})), "f32[7]");
  EXPECT_EQ(ints_of(cat({t({2, 3}), t({2, 3})}, -1)), (std::vector<int64_t>{1}));
}

TEST(Cat, RejectsMismatchedTensors) {
  EXPECT_SHAPE_ERROR(cat({}), "cat", "at least one");
  EXPECT_SHAPE_ERROR(cat({t({2, 3}), t({3})}), "cat", "f32[2,3]", "f32[3]");
  EXPECT_SHAPE_ERROR(cat({t({2, 3}), t({2, 4})}), "cat", "f32[2,3]", "f32[2,4]");
  EXPECT_SHAPE_ERROR(cat({t({}), t({})}), "cat", "f32[]");
  EXPECT_SHAPE_ERROR(cat({t({2, 3})}, 2), "cat", "f32[2,3]");
}

TEST(Stack, InsertsANewDim) {
  const Tensor x = t({2, 3});
  EXPECT_EQ(type_of(stack({x, x, x})), "f32[3,2,3]");
  EXPECT_EQ(type_of(stack({x, x, x}, 1)), "f32[2,3,3]");
  EXPECT_EQ(type_of(stack({x, x, x}, -1)), "f32[2,3,3]");
  EXPECT_EQ(type_of(stack({t({}), t({}, DType::kFloat64)})), "f64[2]");
  EXPECT_SHAPE_ERROR(stack({x, t({3, 2})}), "stack", "f32[2,3]", "f32[3,2]");
  EXPECT_SHAPE_ERROR(stack({x, x}, 3), "stack", "f32[2,3]");
  EXPECT_SHAPE_ERROR(stack({}), "stack", "at least one");
}

TEST(Indexing, IndexSelectTakesWholeSlices) {
  const Tensor x = t({5, 3});
  EXPECT_EQ(type_of(index_select(x, 0, t({4}, DType::kInt64))), "f32[4,3]");
  EXPECT_EQ(type_of(index_select(x, -1, t({2}, DType::kInt32))), "f32[5,2]");
  EXPECT_EQ(type_of(index_select(x, 1, t({0}, DType::kInt64))), "f32[5,0]");
  EXPECT_EQ(type_of(index_select(x, 0, t({}, DType::kInt64))), "f32[1,3]");
  EXPECT_SHAPE_ERROR(index_select(x, 0, t({4})), "index_select", "f32[4]");
  EXPECT_SHAPE_ERROR(index_select(x, 0, t({2, 2}, DType::kInt64)), "index_select", "s64[2,2]",
                     "f32[5,3]");
  EXPECT_SHAPE_ERROR(index_select(x, 2, t({2}, DType::kInt64)), "index_select", "f32[5,3]");
}

TEST(Indexing, GatherTakesTheIndexShape) {
  const Tensor x = t({3, 4}, DType::kInt32);
  EXPECT_EQ(type_of(gather(x, 1, t({3, 2}, DType::kInt64))), "s32[3,2]");
  EXPECT_EQ(type_of(gather(x, 0, t({5, 4}, DType::kInt32))), "s32[5,4]");
  EXPECT_EQ(type_of(gather(x, -1, t({2, 7}, DType::kInt64))), "s32[2,7]");
  EXPECT_EQ(ints_of(gather(x, -1, t({2, 7}, DType::kInt64))), (std::vector<int64_t>{1}));
  EXPECT_SHAPE_ERROR(gather(x, 1, t({3}, DType::kInt64)), "gather", "s32[3,4]", "s64[3]");
  EXPECT_SHAPE_ERROR(gather(x, 1, t({4, 2}, DType::kInt64)), "gather", "s32[3,4]", "s64[4,2]");
  EXPECT_SHAPE_ERROR(gather(x, 1, t({3, 2})), "gather", "f32[3,2]");
}

TEST(Indexing, OneHotAddsAClassDim) {
  EXPECT_EQ(type_of(one_hot(t({4}, DType::kInt64), 10)), "s64[4,10]");
  EXPECT_EQ(type_of(one_hot(t({2, 3}, DType::kInt32), 5)), "s64[2,3,5]");
  EXPECT_EQ(type_of(one_hot(t({}, DType::kInt64), 5)), "s64[5]");
  EXPECT_EQ(ints_of(one_hot(t({4}, DType::kInt64), 10)), (std::vector<int64_t>{10}));
  EXPECT_SHAPE_ERROR(one_hot(t({4}), 10), "one_hot", "f32[4]");
  EXPECT_SHAPE_ERROR(one_hot(t({4}, DType::kInt64), 0), "one_hot", "s64[4]");
}

// --- ops of transformer models -----------------------------------------------------------------

TEST(MaskingOps, GiveTorchsShapesAndDtypes) {
  EXPECT_EQ(type_of(clamp(t({2, 3}), -1.0, 1.0)), "f32[2,3]");
  EXPECT_EQ(type_of(clamp(t({2}, DType::kInt64), 0.0)), "s64[2]");
  EXPECT_EQ(type_of(clamp(t({2}, DType::kInt32), std::nullopt, 2.5)), "f32[2]");
  EXPECT_EQ(type_of(clamp(t({2, 3}), t({3}), t({2, 1}, DType::kFloat64))), "f64[2,3]");
  EXPECT_EQ(type_of(masked_fill(t({3}, DType::kBFloat16), t({2, 1}, DType::kBool), 1.5)),
            "bf16[2,3]");
  EXPECT_EQ(type_of(tril(t({2, 3, 4}, DType::kInt32))), "s32[2,3,4]");
  EXPECT_EQ(type_of(triu(t({0, 5}), 2)), "f32[0,5]");
  EXPECT_EQ(type_of(sin(t({2}, DType::kInt64))), "f32[2]");
  EXPECT_EQ(type_of(erf(t({2}, DType::kInt32))), "f32[2]");
  EXPECT_EQ(type_of(erf(t({2, 3}, DType::kBFloat16))), "bf16[2,3]");
  EXPECT_EQ(type_of(silu(t({2}, DType::kFloat64))), "f64[2]");
}

TEST(MaskingOps, RejectBadArguments) {
  EXPECT_SHAPE_ERROR(clamp(t({2}), std::nullopt, std::nullopt), "clamp", "f32[2]");
  EXPECT_SHAPE_ERROR(clamp(t({2}, DType::kBool), 0.0, 1.0), "clamp", "pred[2]");
  EXPECT_SHAPE_ERROR(clamp(t({2, 3}), t({4}), Tensor()), "clamp", "f32[2,3]", "f32[4]");
  EXPECT_SHAPE_ERROR(clamp(t({2}), Tensor(), Tensor()), "clamp", "min or a max");
  EXPECT_SHAPE_ERROR(masked_fill(t({2, 3}), t({2, 3}), 0), "masked_fill", "f32[2,3]", "pred");
  EXPECT_SHAPE_ERROR(masked_fill(t({2, 3}), t({2}, DType::kBool), 0), "masked_fill", "pred[2]");
  EXPECT_SHAPE_ERROR(tril(t({4})), "tril", "f32[4]");
  EXPECT_SHAPE_ERROR(triu(t({})), "triu", "f32[]");
  EXPECT_SHAPE_ERROR(sin(Tensor()), "sin", "undefined");
  EXPECT_SHAPE_ERROR(cos(Tensor()), "cos", "undefined");
  EXPECT_SHAPE_ERROR(erf(Tensor()), "erf", "undefined");
  EXPECT_SHAPE_ERROR(silu(Tensor()), "silu", "undefined");
}

TEST(SplitOps, GiveTheirPieces) {
  const std::vector<Tensor> pieces = split(t({7, 2}), 3);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(type_of(pieces[2]), "f32[1,2]");
  EXPECT_EQ(split(t({2, 6}), std::vector<int64_t>{1, 5}, -1).size(), 2u);
  EXPECT_EQ(type_of(split(t({2, 6}), std::vector<int64_t>{1, 5}, -1)[1]), "f32[2,5]");
  EXPECT_EQ(chunk(t({5}), 3).size(), 3u);  // 2, 2, 1
  EXPECT_EQ(chunk(t({6}), 4).size(), 3u);  // 2, 2, 2
  EXPECT_EQ(type_of(chunk(t({6}), 4)[2]), "f32[2]");
}

TEST(SplitOps, RejectBadArguments) {
  EXPECT_SHAPE_ERROR(split(t({4}), 0), "split", "split_size 0", "f32[4]");
  EXPECT_SHAPE_ERROR(split(t({4}), -2), "split", "split_size -2");
  EXPECT_SHAPE_ERROR(split(t({4, 2}), std::vector<int64_t>{1, 2}), "split", "[1,2]", "f32[4,2]");
  EXPECT_SHAPE_ERROR(split(t({4}), std::vector<int64_t>{5, -1}), "split", "[5,-1]");
  EXPECT_SHAPE_ERROR(split(t({}), 1), "split", "f32[]");
  EXPECT_SHAPE_ERROR(split(t({4}), 1, 1), "split", "dim 1");
  EXPECT_SHAPE_ERROR(chunk(t({4}), 0), "chunk", "chunks must be positive, not 0");
  EXPECT_SHAPE_ERROR(chunk(t({4}), 2, -3), "chunk", "dim -3");
}

TEST(StatisticsOps, GiveTorchsShapesAndDtypes) {
  EXPECT_EQ(type_of(var(t({2, 3, 4}), {1})), "f32[2,4]");
  EXPECT_EQ(type_of(var(t({2, 3, 4}), {0, 2}, false, true)), "f32[1,3,1]");
  EXPECT_EQ(type_of(std(t({2, 3}, DType::kFloat64))), "f64[]");
  EXPECT_EQ(type_of(cumsum(t({2, 3}), -1)), "f32[2,3]");
  EXPECT_EQ(type_of(cumsum(t({2, 3}, DType::kInt32), 0)), "s64[2,3]");
  EXPECT_EQ(type_of(cumsum(t({4}, DType::kBool), 0)), "s64[4]");
  EXPECT_EQ(ints_of(cumsum(t({2, 3}), -1)), (std::vector<int64_t>{1, 0}));
  const TopK top = topk(t({4, 9}, DType::kBFloat16), 3);
  EXPECT_EQ(type_of(top.values), "bf16[4,3]");
  EXPECT_EQ(type_of(top.indices), "s64[4,3]");
  EXPECT_EQ(ints_of(top.indices), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(type_of(topk(t({4, 9}), 2, 0, false).indices), "s64[2,9]");
  EXPECT_EQ(type_of(topk(t({}), 1).values), "f32[]");
}

TEST(StatisticsOps, RejectBadArguments) {
  EXPECT_SHAPE_ERROR(var(t({2, 3}, DType::kInt64)), "var", "s64[2,3]");
  EXPECT_SHAPE_ERROR(std(t({2, 3}), {2}), "std", "dim 2");
  EXPECT_SHAPE_ERROR(var(t({2, 3}), {1, -1}), "var", "more than once");
  EXPECT_SHAPE_ERROR(std(t({2, 3}), {1}, {.correction = NAN}), "std", "correction nan");
  EXPECT_EQ(type_of(var(t({2, 3}), {1}, {.correction = 0, .keepdim = true})), "f32[2,1]");
  EXPECT_SHAPE_ERROR(cumsum(t({2, 3}), 2), "cumsum", "dim 2", "f32[2,3]");
  EXPECT_SHAPE_ERROR(topk(t({2, 3}), 4), "topk", "k = 4", "f32[2,3]");
  EXPECT_SHAPE_ERROR(topk(t({2, 3}), -1), "topk", "k = -1");
  EXPECT_SHAPE_ERROR(topk(t({2, 3}), 1, 3), "topk", "dim 3");
  EXPECT_SHAPE_ERROR(topk(t({2, 3}, DType::kBool), 1), "topk", "pred[2,3]");
}

TEST(Multinomial, GivesS64SamplesPerRow) {
  EXPECT_EQ(type_of(multinomial(t({5}), 3)), "s64[3]");
  EXPECT_EQ(type_of(multinomial(t({2, 5}, DType::kFloat64), 7, true)), "s64[2,7]");
  EXPECT_EQ(type_of(multinomial(t({2, 5}), 5)), "s64[2,5]");
}

TEST(Multinomial, RejectsBadArguments) {
  EXPECT_SHAPE_ERROR(multinomial(t({2, 3, 4}), 1), "multinomial", "f32[2,3,4]");
  EXPECT_SHAPE_ERROR(multinomial(t({4}, DType::kInt64), 1), "multinomial", "s64[4]");
  EXPECT_SHAPE_ERROR(multinomial(t({4}), 5), "multinomial", "5 samples without", "f32[4]");
  EXPECT_SHAPE_ERROR(multinomial(t({4}), 0, true), "multinomial", "0 samples");
  EXPECT_SHAPE_ERROR(multinomial(t({2, 0}), 1, true), "multinomial", "f32[2,0]");
}

}  // namespace
}  // namespace axle
