// actors/compiler/call_folding.h through lower(): which producers fold into their reader's call (a
// relu under a max pool, the transposes around a convolution's weight gradient, a convolution or
// product under its bias's add, a layer norm backward's weight product and residual add, a bf16
// product under a cast to f32, a residual's add, gelu's backward or relu's (where(x > 0, product,
// 0)), casts to bf16 under bf16
// products, the slices and permutes around attention's heads, a slice and a cast under a
// permute), which stay calls of their own, and that without fusion nothing folds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "axle/actors/compiler/lowering.h"

namespace axle {
namespace {

const std::vector<int64_t> kPool2x2 = {2, 2, 2, 2, 0, 0, 1, 1, 0};
const std::vector<int64_t> kConvSame = {1, 1, 1, 1, 1, 1, 1};
const std::vector<int64_t> kSwap = {1, 0, 2, 3};

int32_t input(Program& p, const Shape& shape) {
  return p.append(Op::kDeviceData, DType::kFloat32, shape, {}, {}, {}, p.num_inputs++);
}

int32_t op(Program& p, Op o, const Shape& shape, std::vector<int32_t> operands,
           const std::vector<int64_t>& ints = {}) {
  return p.append(o, DType::kFloat32, shape, operands, ints);
}

// The calls as "kernel(inputs) -> output [ints]" lines.
std::vector<std::string> calls_of(const Executable& e) {
  std::vector<std::string> lines;
  for (const KernelCall& call : e.calls) {
    std::string line = std::string(kernel_name(call.kernel)) + "(";
    for (std::size_t i = 0; i < call.inputs.size(); ++i) {
      line += (i ? ",%" : "%") + std::to_string(call.inputs[i]);
    }
    line += ") -> %" + std::to_string(call.output) + " [";
    for (std::size_t i = 0; i < call.ints.size(); ++i) {
      line += (i ? "," : "") + std::to_string(call.ints[i]);
    }
    lines.push_back(line + "]");
  }
  return lines;
}

// relu(x) read only by a max pool.
Program relu_then_pool(bool relu_is_output) {
  Program p;
  const int32_t x = input(p, {2, 3, 8, 8});
  const int32_t relu = op(p, Op::kRelu, {2, 3, 8, 8}, {x});
  const int32_t pool = op(p, Op::kMaxPool2d, {2, 3, 4, 4}, {relu}, kPool2x2);
  p.outputs = {pool};
  if (relu_is_output) p.outputs.push_back(relu);
  return p;
}

TEST(CallFolding, ReluUnderMaxPoolFoldsIntoThePool) {
  const auto e = lower(relu_then_pool(false), 1, true);
  EXPECT_EQ(calls_of(*e), (std::vector<std::string>{"max_pool2d(%0) -> %2 [2,2,2,2,0,0,1,1,0,1]"}));
}

TEST(CallFolding, ReluReadElsewhereStaysACall) {
  const auto e = lower(relu_then_pool(true), 1, true);
  EXPECT_EQ(calls_of(*e), (std::vector<std::string>{"relu(%0) -> %1 []",
                                                    "max_pool2d(%1) -> %2 [2,2,2,2,0,0,1,1,0]"}));
}

TEST(CallFolding, NothingFoldsWithoutFusion) {
  const auto e = lower(relu_then_pool(false), 1, false);
  EXPECT_EQ(e->calls.size(), 2u);
}

// conv_grad.cpp's weight gradient: conv2d(x^T, g^T)^T, the transposes swapping dims 0 and 1.
struct WeightGradient {
  Program p;
  int32_t xt = 0, conv = 0, w_grad = 0;
};
WeightGradient weight_gradient() {
  WeightGradient w;
  Program& p = w.p;
  const int32_t x = input(p, {4, 3, 6, 6});
  const int32_t g = input(p, {4, 5, 6, 6});
  w.xt = op(p, Op::kPermute, {3, 4, 6, 6}, {x}, kSwap);
  const int32_t gt = op(p, Op::kPermute, {5, 4, 6, 6}, {g}, kSwap);
  w.conv = op(p, Op::kConv2d, {3, 5, 3, 3}, {w.xt, gt}, kConvSame);
  w.w_grad = op(p, Op::kPermute, {5, 3, 3, 3}, {w.conv}, kSwap);
  return w;
}

TEST(CallFolding, WeightGradientTransposesFoldIntoTheConvolution) {
  auto [p, xt, conv, w_grad] = weight_gradient();
  p.outputs = {w_grad};
  const auto e = lower(p, 1, true);
  EXPECT_EQ(calls_of(*e), (std::vector<std::string>{"conv2d(%0,%1) -> %5 [1,1,1,1,1,1,1,7]"}));
}

TEST(CallFolding, TransposesReadElsewhereStayCalls) {
  auto [p, xt, conv, w_grad] = weight_gradient();
  p.outputs = {w_grad, xt, conv};
  const auto e = lower(p, 1, true);
  EXPECT_EQ(calls_of(*e), (std::vector<std::string>{
                              "permute(%0) -> %2 [1,0,2,3]",
                              "conv2d(%2,%1) -> %4 [1,1,1,1,1,1,1,2]",
                              "permute(%4) -> %5 [1,0,2,3]",
                          }));
}

TEST(CallFolding, GroupedConvolutionsAndOtherPermutesStayCalls) {
  Program p;
  const int32_t x = input(p, {4, 4, 6, 6});
  const int32_t w = input(p, {4, 2, 3, 3});
  const int32_t xt = op(p, Op::kPermute, {4, 4, 6, 6}, {x}, kSwap);
  const int32_t grouped = op(p, Op::kConv2d, {4, 4, 6, 6}, {xt, w}, {1, 1, 1, 1, 1, 1, 2});
  const int32_t other = op(p, Op::kPermute, {4, 4, 6, 6}, {grouped}, {0, 1, 3, 2});
  p.outputs = {other};
  const auto e = lower(p, 1, true);
  EXPECT_EQ(e->calls.size(), 3u);
}

// conv2d(x, w) + b, b reshaped to [1, O, 1, 1] (nn::Conv2d's bias), either operand order.
TEST(CallFolding, PerChannelAddFoldsIntoTheConvolution) {
  for (const bool bias_first : {false, true}) {
    Program p;
    const int32_t x = input(p, {2, 3, 6, 6});
    const int32_t w = input(p, {5, 3, 3, 3});
    const int32_t b = input(p, {1, 5, 1, 1});
    const int32_t conv = op(p, Op::kConv2d, {2, 5, 6, 6}, {x, w}, kConvSame);
    const int32_t sum =
        op(p, Op::kAdd, {2, 5, 6, 6}, bias_first ? std::vector{b, conv} : std::vector{conv, b});
    p.outputs = {sum};
    const auto e = lower(p, 1, true);
    EXPECT_EQ(calls_of(*e), (std::vector<std::string>{"conv2d(%0,%1,%2) -> %4 [1,1,1,1,1,1,1]"}));
  }
}

TEST(CallFolding, OtherAddsStayCalls) {
  Program p;
  const int32_t x = input(p, {2, 3, 6, 6});
  const int32_t w = input(p, {5, 3, 3, 3});
  const int32_t whole = input(p, {2, 5, 6, 6});  // not one value per channel
  const int32_t rows = input(p, {1, 1, 6, 1});
  const int32_t conv = op(p, Op::kConv2d, {2, 5, 6, 6}, {x, w}, kConvSame);
  const int32_t a = op(p, Op::kAdd, {2, 5, 6, 6}, {conv, whole});
  const int32_t conv2 = op(p, Op::kConv2d, {2, 5, 6, 6}, {x, w}, kConvSame);
  const int32_t c = op(p, Op::kAdd, {2, 5, 6, 6}, {conv2, rows});
  p.outputs = {a, c};
  const auto e = lower(p, 1, true);
  EXPECT_EQ(e->calls.size(), 4u);
}

// matmul(x, w^T) + b, b of nn::Linear's shape [N] (or [1, 1, N]), either operand order, in each
// floating dtype.
TEST(CallFolding, PerColumnAddFoldsIntoTheProduct) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
    for (const bool bias_first : {false, true}) {
      for (const Shape& bias_shape : {Shape{5}, Shape{1, 1, 5}}) {
        Program p;
        const int32_t x = p.append(Op::kDeviceData, dtype, {2, 4, 3}, {}, {}, {}, p.num_inputs++);
        const int32_t w = p.append(Op::kDeviceData, dtype, {5, 3}, {}, {}, {}, p.num_inputs++);
        const int32_t b = p.append(Op::kDeviceData, dtype, bias_shape, {}, {}, {}, p.num_inputs++);
        const int32_t product =
            p.append(Op::kMatmul, dtype, {2, 4, 5}, std::vector{x, w}, std::vector<int64_t>{0, 1});
        const int32_t sum =
            p.append(Op::kAdd, dtype, {2, 4, 5},
                     bias_first ? std::vector{b, product} : std::vector{product, b});
        p.outputs = {sum};
        const auto e = lower(p, 1, true);
        EXPECT_EQ(calls_of(*e), (std::vector<std::string>{"matmul(%0,%1,%2) -> %4 [0,1]"}))
            << dtype_name(dtype) << " bias " << bias_shape.to_string();
      }
    }
  }
}

TEST(CallFolding, AddsThatAreNotAProductsBiasStayCalls) {
  Program p;
  const int32_t x = input(p, {4, 3});
  const int32_t w = input(p, {3, 5});
  const int32_t rows = input(p, {4, 1});      // one value per row, not per column
  const int32_t whole = input(p, {4, 5});     // a residual, not a bias
  const int32_t wider = input(p, {2, 4, 5});  // broadcasts the product to more dims
  const int32_t a = op(p, Op::kAdd, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 0}), rows});
  const int32_t b = op(p, Op::kAdd, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 0}), whole});
  const int32_t c = op(p, Op::kAdd, {2, 4, 5}, {op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 0}), wider});
  // A product read elsewhere too is stored, and its bias added by a call of its own.
  const int32_t shared = op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 0});
  const int32_t bias = input(p, {5});
  const int32_t d = op(p, Op::kAdd, {4, 5}, {shared, bias});
  // A filled constant is stored as one element (lowering keeps it scalar for broadcasting ops).
  const int32_t zeros = p.append_constant(DType::kFloat32, {5}, 0.0);
  const int32_t f = op(p, Op::kAdd, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 0}), zeros});
  p.outputs = {a, b, c, d, shared, f};
  const auto e = lower(p, 1, true);
  EXPECT_EQ(e->calls.size(), 11u);  // five products, five adds, the constant's fill
  for (const KernelCall& call : e->calls) {
    if (call.kernel == Kernel::kMatmul) {
      EXPECT_EQ(call.inputs.size(), 2u);
    }
  }
}

// A layer norm's backward as graph/autograd gives it: the incoming gradient times the affine
// weight, and the result added to the residual stream's gradient.
struct LayerNormBackward {
  Program p;
  int32_t g = 0, x = 0, w = 0, r = 0, product = 0, backward = 0, sum = 0;
};
LayerNormBackward layer_norm_backward(const Shape& weight_shape, DType dtype = DType::kFloat32) {
  LayerNormBackward b;
  Program& p = b.p;
  const Shape shape{4, 6};
  auto leaf = [&](const Shape& s) {
    return p.append(Op::kDeviceData, dtype, s, {}, {}, {}, p.num_inputs++);
  };
  b.g = leaf(shape);
  b.x = leaf(shape);
  b.w = leaf(weight_shape);
  b.r = leaf(shape);
  const std::vector<int32_t> gw = {b.w, b.g};
  b.product = p.append(Op::kMul, dtype, shape, gw);
  const std::vector<int32_t> operands = {b.product, b.x};
  const std::vector<int64_t> k = {1};
  const std::vector<double> eps = {1e-5};
  b.backward = p.append(Op::kLayerNormBackward, dtype, shape, operands, k, eps);
  const std::vector<int32_t> terms = {b.r, b.backward};
  b.sum = p.append(Op::kAdd, dtype, shape, terms);
  p.outputs = {b.sum};
  return b;
}

TEST(CallFolding, WeightsProductAndResidualsAddFoldIntoTheLayerNormBackward) {
  const LayerNormBackward b = layer_norm_backward({6});
  const auto e = lower(b.p, 1, true);
  EXPECT_EQ(calls_of(*e),
            (std::vector<std::string>{"layer_norm_backward(%0,%1,%2,%3) -> %6 [1,3]"}));
}

TEST(CallFolding, LayerNormBackwardOperandsReadElsewhereOrOfOtherShapesStayCalls) {
  LayerNormBackward read = layer_norm_backward({6});
  read.p.outputs.push_back(read.product);  // the product stored: only the add folds
  EXPECT_EQ(calls_of(*lower(read.p, 1, true)),
            (std::vector<std::string>{"mul(%2,%0) -> %4 []",
                                      "layer_norm_backward(%4,%1,%3) -> %6 [1,2]"}));
  LayerNormBackward kept = layer_norm_backward({6});
  kept.p.outputs.push_back(kept.backward);  // the gradient stored: only the product folds
  EXPECT_EQ(calls_of(*lower(kept.p, 1, true)),
            (std::vector<std::string>{"layer_norm_backward(%0,%1,%2) -> %5 [1,1]",
                                      "add(%3,%5) -> %6 []"}));
  // A product by a whole tensor is not the weight's; f64 and bf16 operands stay calls.
  EXPECT_EQ(calls_of(*lower(layer_norm_backward({4, 6}).p, 1, true)),
            (std::vector<std::string>{"mul(%2,%0) -> %4 []",
                                      "layer_norm_backward(%4,%1,%3) -> %6 [1,2]"}));
  EXPECT_EQ(lower(layer_norm_backward({6}, DType::kFloat64).p, 1, true)->calls.size(), 3u);
  EXPECT_EQ(lower(layer_norm_backward({6}, DType::kBFloat16).p, 1, true)->calls.size(), 3u);
}

// A bf16 product (with its bias folded in, or alone) widened to f32 stores its values as f32.
TEST(CallFolding, ProductUnderAWideningCastStoresItsBf16ValuesAsF32) {
  Program p;
  auto leaf = [&](DType dtype, const Shape& s) {
    return p.append(Op::kDeviceData, dtype, s, {}, {}, {}, p.num_inputs++);
  };
  const int32_t x = leaf(DType::kBFloat16, {4, 3});
  const int32_t w = leaf(DType::kBFloat16, {3, 5});
  const int32_t bias = leaf(DType::kBFloat16, {5});
  auto bf16 = [&](Op o, const Shape& s, std::vector<int32_t> operands,
                  const std::vector<int64_t>& ints = {}) {
    return p.append(o, DType::kBFloat16, s, operands, ints);
  };
  auto widen = [&](int32_t v) {
    const std::vector<int32_t> operand = {v};
    return p.append(Op::kCast, DType::kFloat32, p[v].shape, operand);
  };
  const int32_t plain = widen(bf16(Op::kMatmul, {4, 5}, {x, w}, {0, 0}));
  const int32_t biased =
      widen(bf16(Op::kAdd, {4, 5}, {bf16(Op::kMatmul, {4, 5}, {x, w}, {0, 0}), bias}));
  // A product read elsewhere too is stored in bf16 and cast by a call of its own.
  const int32_t shared = bf16(Op::kMatmul, {4, 5}, {x, w}, {0, 0});
  const int32_t cast = widen(shared);
  p.outputs = {plain, biased, cast, shared};
  EXPECT_EQ(
      calls_of(*lower(p, 1, true)),
      (std::vector<std::string>{"matmul(%0,%1) -> %4 [0,0,1]", "matmul(%0,%1,%2) -> %7 [0,0,1]",
                                "matmul(%0,%1) -> %8 [0,0]", "cast(%8) -> %9 []"}));
}

// residual + a bf16 product's values as f32 (a residual connection under autocast, either
// operand order): the product adds the residual as it stores them. An f32 product's add, or one
// of a product read elsewhere too, stays a call.
TEST(CallFolding, AResidualAddOfABf16ProductsValuesFoldsIntoTheProduct) {
  Program p;
  auto leaf = [&](DType dtype, const Shape& s) {
    return p.append(Op::kDeviceData, dtype, s, {}, {}, {}, p.num_inputs++);
  };
  const int32_t x = leaf(DType::kBFloat16, {4, 3});
  const int32_t w = leaf(DType::kBFloat16, {3, 5});
  const int32_t r = leaf(DType::kFloat32, {4, 5});
  const int32_t x32 = leaf(DType::kFloat32, {4, 3});
  const int32_t w32 = leaf(DType::kFloat32, {3, 5});
  auto f32 = [&](Op o, std::vector<int32_t> operands, const std::vector<int64_t>& ints = {}) {
    return p.append(o, DType::kFloat32, {4, 5}, operands, ints);
  };
  const int32_t first = f32(Op::kAdd, {r, f32(Op::kMatmul, {x, w}, {0, 0, 1})});
  const int32_t second = f32(Op::kAdd, {f32(Op::kMatmul, {x, w}, {0, 0, 1}), r});
  const int32_t plain = f32(Op::kAdd, {r, f32(Op::kMatmul, {x32, w32}, {0, 0})});
  const int32_t shared = f32(Op::kMatmul, {x, w}, {0, 0, 1});
  const int32_t kept = f32(Op::kAdd, {r, shared});
  p.outputs = {first, second, plain, kept, shared};
  EXPECT_EQ(calls_of(*lower(p, 1, true)),
            (std::vector<std::string>{"matmul(%0,%1,%2) -> %6 [0,0,1,0,1]",
                                      "matmul(%0,%1,%2) -> %8 [0,0,1,0,1]",
                                      "matmul(%3,%4) -> %9 [0,0]", "add(%2,%9) -> %10 []",
                                      "matmul(%0,%1) -> %11 [0,0,1]", "add(%2,%11) -> %12 []"}));
}

// f32 values cast to bf16 for bf16 products only (as autocast casts a linear layer's input and
// weight, read by the forward's product and a gradient's): the products read the f32 values and
// round them as they pack them, and the casts are gone. A cast read elsewhere too stays a call,
// and its products read its bf16 result.
TEST(CallFolding, CastsToBf16ReadOnlyByBf16ProductsFoldIntoTheProducts) {
  Program p;
  auto leaf = [&](DType dtype, const Shape& s) {
    return p.append(Op::kDeviceData, dtype, s, {}, {}, {}, p.num_inputs++);
  };
  const int32_t x = leaf(DType::kFloat32, {4, 3});
  const int32_t w = leaf(DType::kFloat32, {5, 3});
  const int32_t g = leaf(DType::kBFloat16, {4, 5});
  auto narrow = [&](int32_t v) {
    const std::vector<int32_t> operand = {v};
    return p.append(Op::kCast, DType::kBFloat16, p[v].shape, operand);
  };
  auto product = [&](const Shape& s, std::vector<int32_t> operands, std::vector<int64_t> ints) {
    return p.append(Op::kMatmul, DType::kBFloat16, s, operands, ints);
  };
  const int32_t x16 = narrow(x), w16 = narrow(w);
  const int32_t y = product({4, 5}, {x16, w16}, {0, 1});  // x w^T
  const int32_t dx = product({4, 3}, {g, w16}, {0, 0});   // g w
  const int32_t dw = product({5, 3}, {g, x16}, {1, 0});   // g^T x
  const int32_t kept = narrow(x);                         // also read by an add
  const int32_t shared = product({4, 5}, {kept, w16}, {0, 1});
  const std::vector<int32_t> twice = {kept, kept};
  const int32_t sum = p.append(Op::kAdd, DType::kBFloat16, {4, 3}, twice);
  p.outputs = {y, dx, dw, shared, sum};
  EXPECT_EQ(calls_of(*lower(p, 1, true)),
            (std::vector<std::string>{"matmul(%0,%1) -> %5 [0,1]", "matmul(%2,%1) -> %6 [0,0]",
                                      "matmul(%2,%0) -> %7 [1,0]", "cast(%0) -> %8 []",
                                      "matmul(%8,%1) -> %9 [0,1]", "add(%8,%8) -> %10 []"}));
  // Without fusion nothing folds.
  EXPECT_EQ(lower(p, 1, false)->calls.size(), 8u);
}

// gelu_backward(matmul(a, b), x): the product applies gelu's backward to its output.
TEST(CallFolding, ProductUnderGeluBackwardAppliesItToItsOutput) {
  Program p;
  const int32_t a = input(p, {4, 3});
  const int32_t w = input(p, {3, 5});
  const int32_t x = input(p, {4, 5});
  const int32_t plain =
      op(p, Op::kGeluBackward, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {a, w}, {0, 0}), x}, {0});
  // The tanh form, and a product read elsewhere too, stay calls of their own.
  const int32_t tanh_form =
      op(p, Op::kGeluBackward, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {a, w}, {0, 0}), x}, {1});
  const int32_t shared = op(p, Op::kMatmul, {4, 5}, {a, w}, {0, 0});
  const int32_t read = op(p, Op::kGeluBackward, {4, 5}, {shared, x}, {0});
  p.outputs = {plain, tanh_form, read, shared};
  EXPECT_EQ(
      calls_of(*lower(p, 1, true)),
      (std::vector<std::string>{"matmul(%0,%1,%2) -> %4 [0,0,0,1]", "matmul(%0,%1) -> %5 [0,0]",
                                "gelu_backward(%5,%2) -> %6 [1]", "matmul(%0,%1) -> %7 [0,0]",
                                "gelu_backward(%7,%2) -> %8 [0]"}));
}

// where(x > 0, matmul(a, b), 0), relu's backward as autograd traces it: the product keeps its
// output where x > 0 and writes +0 elsewhere; neither the product nor the comparison is a call.
TEST(CallFolding, ProductUnderRelusBackwardAppliesItToItsOutput) {
  Program p;
  const int32_t a = input(p, {4, 3});
  const int32_t w = input(p, {3, 5});
  const int32_t x = input(p, {4, 5});
  const int32_t zero = p.append(Op::kFill, DType::kFloat32, {}, {}, {}, std::vector<double>{0.0});
  const int32_t minus_zero =
      p.append(Op::kFill, DType::kFloat32, {}, {}, {}, std::vector<double>{-0.0});
  const int32_t one = p.append(Op::kFill, DType::kFloat32, {}, {}, {}, std::vector<double>{1.0});
  auto above = [&](int32_t value, int32_t threshold) {
    return p.append(Op::kGt, DType::kBool, {4, 5}, std::vector<int32_t>{value, threshold});
  };
  auto where = [&](int32_t mask, int32_t product, int32_t otherwise) {
    return op(p, Op::kWhere, {4, 5}, {mask, product, otherwise});
  };
  auto product = [&] { return op(p, Op::kMatmul, {4, 5}, {a, w}, {0, 0}); };
  const int32_t folded = where(above(x, zero), product(), zero);
  // -0 where x is not above 0, x above 1, a comparison read elsewhere and a product read
  // elsewhere: calls of their own.
  const int32_t signed_zero = where(above(x, zero), product(), minus_zero);
  const int32_t above_one = where(above(x, one), product(), zero);
  const int32_t shared_mask = above(x, zero);
  const int32_t mask_read = where(shared_mask, product(), zero);
  const int32_t shared_product = product();
  const int32_t product_read = where(above(x, zero), shared_product, zero);
  p.outputs = {folded,      signed_zero,  above_one,     mask_read,
               shared_mask, product_read, shared_product};
  const std::vector<std::string> calls = calls_of(*lower(p, 1, true));
  EXPECT_EQ(calls[3], "matmul(%0,%1,%2) -> %8 [0,0,0,0,0,1]") << ::testing::PrintToString(calls);
  EXPECT_EQ(std::ranges::count_if(calls, [](const std::string& c) { return c.ends_with("1]"); }), 1)
      << ::testing::PrintToString(calls);
  for (const char* kernel : {"gt", "where"}) {  // the other four stay calls
    EXPECT_EQ(
        std::ranges::count_if(calls, [&](const std::string& c) { return c.starts_with(kernel); }),
        4)
        << ::testing::PrintToString(calls);
  }
  // Without fusion nothing folds.
  const std::vector<std::string> unfolded = calls_of(*lower(p, 1, false));
  EXPECT_EQ(
      std::ranges::count_if(unfolded, [](const std::string& c) { return c.starts_with("where"); }),
      5);
}

// A linear layer and relu, and relu's backward of the next layer's input gradient, as an MLP's
// step traces them: the backward's product reads relu's result instead of its input, so the
// product and its bias's add fold into the relu; a relu read by nothing else's product stays.
TEST(CallFolding, ALinearLayersReluFoldsIntoItsProductWhenTheBackwardReadsTheRelu) {
  Program p;
  const int32_t x = input(p, {4, 3});
  const int32_t w = input(p, {5, 3});
  const int32_t b = input(p, {5});
  const int32_t grad = input(p, {4, 6});
  const int32_t w2 = input(p, {6, 5});
  const int32_t zero = p.append(Op::kFill, DType::kFloat32, {}, {}, {}, std::vector<double>{0.0});
  const int32_t pre = op(p, Op::kAdd, {4, 5}, {op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 1}), b});
  const int32_t relu = op(p, Op::kRelu, {4, 5}, {pre});
  const int32_t mask = p.append(Op::kGt, DType::kBool, {4, 5}, std::vector<int32_t>{pre, zero});
  const int32_t backward =
      op(p, Op::kWhere, {4, 5}, {mask, op(p, Op::kMatmul, {4, 5}, {grad, w2}, {0, 0}), zero});
  // A relu of a product whose input the backward does not read: it stays a call.
  const int32_t lone_pre = op(p, Op::kMatmul, {4, 5}, {x, w}, {0, 1});
  const int32_t lone = op(p, Op::kRelu, {4, 5}, {lone_pre});
  const int32_t lone_mask =
      p.append(Op::kGt, DType::kBool, {4, 5}, std::vector<int32_t>{lone_pre, zero});
  p.outputs = {relu, backward, lone, lone_mask};
  const std::vector<std::string> calls = calls_of(*lower(p, 1, true));
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "fill() -> %5 []", "matmul(%0,%1,%2) -> %8 [0,1,0,0,0,0,1]",
                       "matmul(%3,%4,%8) -> %11 [0,0,0,0,0,1]", "matmul(%0,%1) -> %12 [0,1]",
                       "relu(%12) -> %13 []", "gt(%12,%5) -> %14 []"}))
      << ::testing::PrintToString(calls);
}

// Attention as the GPT's blocks give it (graph/nn): q, k and v split from one [B, T, 3 H D]
// projection and turned into heads [B, H, T, D], the grad's heads from [B, T, H D], and the
// backward's gradients turned back and concatenated into the projection's gradient.
struct AttentionHeads {
  Program p;
  int32_t qkv = 0, grad = 0, q = 0, forward = 0, backward = 0, concat = 0;
};
AttentionHeads attention_heads(const std::vector<int64_t>& gradient_order = {0, 1, 2}) {
  AttentionHeads a;
  Program& p = a.p;
  const int64_t B = 2, T = 3, H = 2, D = 2;
  a.qkv = input(p, {B, T, 3 * H * D});
  a.grad = input(p, {B, T, H * D});
  const std::vector<double> scale = {0.5};
  auto heads = [&](int32_t rows) {
    const int32_t split = op(p, Op::kReshape, {B, T, H, D}, {rows});
    return op(p, Op::kPermute, {B, H, T, D}, {split}, {0, 2, 1, 3});
  };
  std::vector<int32_t> qkv;
  for (int64_t i = 0; i < 3; ++i) {
    qkv.push_back(heads(op(p, Op::kSlice, {B, T, H * D}, {a.qkv}, {2, i * H * D, 1})));
  }
  a.q = qkv[0];
  const std::vector<int64_t> causal = {1, 0};
  a.forward = p.append(Op::kScaledDotProductAttention, DType::kFloat32, {B, H, T, D + 1}, qkv,
                       causal, scale);
  const std::vector<int32_t> operands = {qkv[0], qkv[1], qkv[2], a.forward, heads(a.grad)};
  a.backward = p.append(Op::kScaledDotProductAttentionBackward, DType::kFloat32, {B, H, 3 * T, D},
                        operands, causal, scale);
  std::vector<int32_t> gradients;
  for (int64_t i : gradient_order) {
    const int32_t slice = op(p, Op::kSlice, {B, H, T, D}, {a.backward}, {2, i * T, 1});
    const int32_t rows = op(p, Op::kPermute, {B, T, H, D}, {slice}, {0, 2, 1, 3});
    gradients.push_back(op(p, Op::kReshape, {B, T, H * D}, {rows}));
  }
  a.concat = op(p, Op::kConcat, {B, T, 3 * H * D}, gradients, {2});
  p.outputs = {a.forward, a.concat};
  return a;
}

TEST(CallFolding, AttentionReadsItsHeadsInPlaceAndWritesTheProjectionsGradient) {
  const AttentionHeads a = attention_heads();
  // q, k and v: 3 rows of 2 from columns 0, 4 and 8 of rows of 12 (batch strides 36 and 2);
  // the grad's from rows of 4; the gradients into columns 0, 4 and 8.
  const std::string qkv = "3,2,0,36,2,12,3,2,4,36,2,12,3,2,8,36,2,12";
  EXPECT_EQ(calls_of(*lower(a.p, 1, true)),
            (std::vector<std::string>{
                "scaled_dot_product_attention(%0,%0,%0) -> %11 [1,0,7," + qkv + "]",
                "scaled_dot_product_attention_backward(%0,%0,%0,%11,%1) -> %24 [1,0,31," + qkv +
                    ",3,2,0,12,2,4,0,36,2,12,4,36,2,12,8,36,2,12]"}));
}

TEST(CallFolding, AttentionHeadsReadElsewhereOrGradientsInAnotherOrderStayCalls) {
  AttentionHeads read = attention_heads();
  read.p.outputs.push_back(read.q);  // q's heads stored: q is read from them, k and v in place
  const std::vector<std::string> calls = calls_of(*lower(read.p, 1, true));
  ASSERT_EQ(calls.size(), 5u);  // q's slice and permute (the reshape shares its buffer)
  EXPECT_EQ(calls[3],
            "scaled_dot_product_attention(%4,%0,%0) -> %11 [1,0,6,3,2,4,36,2,12,3,2,8,36,2,12]");
  // The gradients concatenated as k, q, v are not the projection's: the backward writes its
  // own output, and the slices, permutes and concat stay calls.
  const AttentionHeads swapped = attention_heads({1, 0, 2});
  const std::vector<std::string> unfolded = calls_of(*lower(swapped.p, 1, true));
  EXPECT_EQ(std::count_if(unfolded.begin(), unfolded.end(),
                          [](const std::string& c) {
                            return c.rfind("cat", 0) == 0 || c.rfind("concat", 0) == 0;
                          }),
            1);
  EXPECT_EQ(unfolded[1].substr(0, unfolded[1].find('(')), "scaled_dot_product_attention_backward");
  EXPECT_NE(unfolded[1].find(") -> %14 [1,0,15,"), std::string::npos) << unfolded[1];
}

// permute(cast(slice(x))): the first 4 of x's 5 columns (attention's output without its
// logsumexp), cast to bf16 (or not), turned from [B, H, T, D] into [B, T, H, D].
struct MergedHeads {
  Program p;
  int32_t slice = 0, cast = 0, merged = 0;
};
MergedHeads merged_heads(bool cast, int64_t start = 0, int64_t dim = 3) {
  MergedHeads m;
  Program& p = m.p;
  const int32_t x = input(p, {2, 4, 8, 5});
  const Shape sliced = dim == 3 ? Shape{2, 4, 8, 4} : Shape{2, 4, 7, 5};
  m.slice = op(p, Op::kSlice, sliced, {x}, {dim, start, 1});
  const std::vector<int32_t> of_slice{m.slice};
  m.cast = cast ? p.append(Op::kCast, DType::kBFloat16, sliced, of_slice) : m.slice;
  const std::vector<int32_t> of_cast{m.cast};
  const std::vector<int64_t> swap_middle{0, 2, 1, 3};
  m.merged = p.append(Op::kPermute, cast ? DType::kBFloat16 : DType::kFloat32,
                      {sliced[0], sliced[2], sliced[1], sliced[3]}, of_cast, swap_middle);
  p.outputs = {m.merged};
  return m;
}

TEST(CallFolding, SliceAndCastUnderAPermuteFoldIntoIt) {
  EXPECT_EQ(calls_of(*lower(merged_heads(true).p, 1, true)),
            (std::vector<std::string>{"permute(%0) -> %3 [0,2,1,3,5]"}));
  EXPECT_EQ(calls_of(*lower(merged_heads(false).p, 1, true)),
            (std::vector<std::string>{"permute(%0) -> %2 [0,2,1,3,5]"}));
}

TEST(CallFolding, OtherSlicesOrOnesReadElsewhereStayCalls) {
  // Not from the rows' first column, or along another dim: three calls.
  EXPECT_EQ(calls_of(*lower(merged_heads(true, 1).p, 1, true)).size(), 3u);
  EXPECT_EQ(calls_of(*lower(merged_heads(true, 0, 2).p, 1, true)).size(), 3u);
  // The slice stored too: all three stay calls.
  MergedHeads stored = merged_heads(true);
  stored.p.outputs.push_back(stored.slice);
  EXPECT_EQ(calls_of(*lower(stored.p, 1, true)),
            (std::vector<std::string>{"slice(%0) -> %1 [3,0,1]", "cast(%1) -> %2 []",
                                      "permute(%2) -> %3 [0,2,1,3]"}));
}

}  // namespace
}  // namespace axle
