// graph: the IR's operations. Most lower one-to-one to a backend kernel of the same name (see
// backends/executable.h for operand and attribute layouts, which IR nodes share).
#pragma once

#include <cstdint>
#include <string_view>

#include "axle/backends/float_functions.h"

namespace axle {

// The IR's ops after the leaves and reshape, one row each: X(Name, "ir_name", Family) for an op
// that lowers to the kernel of the same name, I(Name, "ir_name", Family) for one that lowers to no
// kernel (the lowering reads its operand instead). The floating-point functions of one tensor
// (exp, log, ...) follow, from backends' AXLE_FLOAT_FUNCTIONS, as family FloatFunction. The family
// is what the passes ask first (the reference evaluator dispatches on it, sharding propagation and
// the partitioner treat elementwise families alike); an op's tracing is in graph/ops/, its
// derivative in graph/autograd/ (a float function's in graph/ops/float_functions.cpp), its
// kernel in backends/. Graph hashes take an op's name, not its number, so rows may be reordered.
// clang-format off
#define AXLE_IR_OPS(X, I)                                                                  \
  X(Add, "add", Elementwise)                                                               \
  X(Sub, "sub", Elementwise)                                                               \
  X(Mul, "mul", Elementwise)                                                               \
  X(Div, "div", Elementwise)                                                               \
  X(Pow, "pow", Elementwise)                                                               \
  X(Maximum, "maximum", Elementwise)                                                       \
  X(Minimum, "minimum", Elementwise)                                                       \
  X(Eq, "eq", Elementwise)                                                                 \
  X(Ne, "ne", Elementwise)                                                                 \
  X(Lt, "lt", Elementwise)                                                                 \
  X(Le, "le", Elementwise)                                                                 \
  X(Gt, "gt", Elementwise)                                                                 \
  X(Ge, "ge", Elementwise)                                                                 \
  X(LogicalAnd, "logical_and", Elementwise)                                                \
  X(LogicalOr, "logical_or", Elementwise)                                                  \
  X(Where, "where", Elementwise)                                                           \
  X(Neg, "neg", Elementwise)                                                               \
  X(Relu, "relu", Elementwise)                                                             \
  X(Gelu, "gelu", Elementwise)                                                             \
  X(Abs, "abs", Elementwise)                                                               \
  X(LogicalNot, "logical_not", Elementwise)                                                \
  X(Cast, "cast", Elementwise)                                                             \
  X(Fill, "full", Generator)                                                               \
  X(Iota, "arange", Generator)                                                             \
  X(Sum, "sum", Reduction)                                                                 \
  X(Mean, "mean", Reduction)                                                               \
  X(ReduceMax, "max", Reduction)                                                           \
  X(ReduceMin, "min", Reduction)                                                           \
  X(LogSumExp, "logsumexp", Reduction)                                                     \
  X(ArgMax, "argmax", Reduction)                                                           \
  X(Softmax, "softmax", Reduction)                                                         \
  X(LogSoftmax, "log_softmax", Reduction)                                                  \
  X(Matmul, "matmul", Linalg)                                                              \
  X(Conv2d, "conv2d", Linalg)                                                              \
  X(MaxPool2d, "max_pool2d", Pooling)                                                      \
  X(AvgPool2d, "avg_pool2d", Pooling)                                                      \
  X(Permute, "permute", DataMovement)                                                      \
  X(Expand, "expand", DataMovement)                                                        \
  X(Slice, "slice", DataMovement)                                                          \
  X(Concat, "cat", DataMovement)                                                           \
  X(IndexSelect, "index_select", DataMovement)                                             \
  X(Gather, "gather", DataMovement)                                                        \
  X(OneHot, "one_hot", DataMovement)                                                       \
  X(RandUniform, "rand", Random)                                                           \
  X(RandNormal, "randn", Random)                                                           \
  X(RandInt, "randint", Random)                                                            \
  X(Bernoulli, "bernoulli", Random)                                                        \
  X(ScatterAdd, "scatter_add", DataMovement)                                               \
  X(MaxPool2dBackward, "max_pool2d_backward", Pooling)                                     \
  X(AvgPool2dBackward, "avg_pool2d_backward", Pooling)                                     \
  X(AllReduce, "all_reduce", Collective)                                                   \
  X(AllGather, "all_gather", Collective)                                                   \
  X(ReduceScatter, "reduce_scatter", Collective)                                           \
  X(AllToAll, "all_to_all", Collective)                                                    \
  X(CollectivePermute, "collective_permute", Collective)                                   \
  X(Cumsum, "cumsum", Reduction)                                                           \
  X(TopK, "topk", Reduction)                                                               \
  X(OptimizationBarrier, "optimization_barrier", Barrier)                                  \
  X(ScaledDotProductAttention, "scaled_dot_product_attention", Attention)                  \
  X(ScaledDotProductAttentionBackward, "scaled_dot_product_attention_backward", Attention) \
  X(GeluBackward, "gelu_backward", Elementwise)                                            \
  X(LayerNorm, "layer_norm", Reduction)                                                    \
  X(LayerNormBackward, "layer_norm_backward", Reduction)                                   \
  X(ConvTranspose2d, "conv_transpose2d", Linalg)                                           \
  I(CustomSharding, "custom_sharding", Annotation)
// clang-format on

/// An IR operation.
enum class Op : uint16_t {
  kDeviceData,  ///< a leaf holding device data (hashes by shape and dtype, never by value)
  kParameter,   ///< a leaf holding a host scalar fed at execution (hashes by dtype only)
  kConstant,    ///< a scalar 0 or 1 baked into the program (hashes by value)
  kReshape,     ///< same elements, new shape (lowers to a copy)
#define AXLE_OP_ENUM(name, str, family) k##name,
  AXLE_IR_OPS(AXLE_OP_ENUM, AXLE_OP_ENUM)
#undef AXLE_OP_ENUM
#define AXLE_FLOAT_FUNCTION_OP(name, str) k##name,
      AXLE_FLOAT_FUNCTIONS(AXLE_FLOAT_FUNCTION_OP)
#undef AXLE_FLOAT_FUNCTION_OP
          kCount
};

/// What kind of computation an op is; the op table gives each op one.
enum class OpFamily : uint8_t {
  kLeaf,           ///< device data, a fed parameter, a constant
  kElementwise,    ///< arithmetic, comparisons, logical ops, where, neg abs relu gelu, cast,
                   ///< gelu_backward
  kFloatFunction,  ///< exp, log, ... (AXLE_FLOAT_FUNCTIONS): elementwise, floating dtypes only
  kGenerator,      ///< full, arange: no operands
  kReduction,      ///< sums, extrema, logsumexp, argmax, softmaxes, cumsum, topk, layer_norm's
                   ///< normalisation and its gradient
  kLinalg,         ///< matmul, conv2d, conv_transpose2d
  kPooling,        ///< max and average pooling and their backward ops
  kDataMovement,   ///< reshape, permute, expand, slice, cat, gathers and scatters, one_hot
  kRandom,         ///< rand, randn, randint, bernoulli
  kCollective,     ///< all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute
  kAttention,      ///< scaled_dot_product_attention and its backward op
  kBarrier,        ///< optimization_barrier
  kAnnotation,     ///< custom_sharding: a sharding note on a value, no computation
};

/// The op's name in IR dumps and per-op counters (`xla::add`).
[[nodiscard]] std::string_view op_name(Op op) noexcept;

/// The op's family, from its row in the op table.
[[nodiscard]] OpFamily op_family(Op op) noexcept;

/// Whether each element of the op's output is computed from the elements of its operands at the
/// same position (operands broadcast NumPy-style): families kElementwise and kFloatFunction. The
/// passes that lay values out (sharding propagation, the partitioner) treat these alike.
[[nodiscard]] inline bool is_elementwise(Op op) noexcept {
  const OpFamily family = op_family(op);
  return family == OpFamily::kElementwise || family == OpFamily::kFloatFunction;
}

}  // namespace axle
