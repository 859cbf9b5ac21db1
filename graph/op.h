// graph: the IR's operations. Most lower one-to-one to a backend kernel of the same name (see
// backends/executable.h for operand and attribute layouts, which IR nodes share).
#pragma once

#include <cstdint>
#include <string_view>

namespace axle {

// The IR's ops after the leaves and reshape, one per line: X(Name, "ir_name") for an op that
// lowers to the kernel of the same name, I(Name, "ir_name") for one that lowers to no kernel (the
// lowering reads its operand instead). This table names an op; what it computes is written apart
// (its traced function in graph/ops/, its derivative in graph/autograd/, its kernel in backends/,
// its reference in graph/reference/, and the passes' cases that list it). New ops
// go last: an op's number enters graph hashes, which key programs in the persistent cache, so
// renumbering an op could give a new graph an old one's program.
// clang-format off
#define AXLE_IR_OPS(X, I)                     \
  X(Add, "add")                               \
  X(Sub, "sub")                               \
  X(Mul, "mul")                               \
  X(Div, "div")                               \
  X(Pow, "pow")                               \
  X(Maximum, "maximum")                       \
  X(Minimum, "minimum")                       \
  X(Eq, "eq")                                 \
  X(Ne, "ne")                                 \
  X(Lt, "lt")                                 \
  X(Le, "le")                                 \
  X(Gt, "gt")                                 \
  X(Ge, "ge")                                 \
  X(LogicalAnd, "logical_and")                \
  X(LogicalOr, "logical_or")                  \
  X(Where, "where")                           \
  X(Neg, "neg")                               \
  X(Exp, "exp")                               \
  X(Log, "log")                               \
  X(Sqrt, "sqrt")                             \
  X(Rsqrt, "rsqrt")                           \
  X(Tanh, "tanh")                             \
  X(Sigmoid, "sigmoid")                       \
  X(Relu, "relu")                             \
  X(Gelu, "gelu")                             \
  X(Abs, "abs")                               \
  X(LogicalNot, "logical_not")                \
  X(Cast, "cast")                             \
  X(Fill, "full")                             \
  X(Iota, "arange")                           \
  X(Sum, "sum")                               \
  X(Mean, "mean")                             \
  X(ReduceMax, "max")                         \
  X(ReduceMin, "min")                         \
  X(LogSumExp, "logsumexp")                   \
  X(ArgMax, "argmax")                         \
  X(Softmax, "softmax")                       \
  X(LogSoftmax, "log_softmax")                \
  X(Matmul, "matmul")                         \
  X(Conv2d, "conv2d")                         \
  X(MaxPool2d, "max_pool2d")                  \
  X(AvgPool2d, "avg_pool2d")                  \
  X(Permute, "permute")                       \
  X(Expand, "expand")                         \
  X(Slice, "slice")                           \
  X(Concat, "cat")                            \
  X(IndexSelect, "index_select")              \
  X(Gather, "gather")                         \
  X(OneHot, "one_hot")                        \
  X(RandUniform, "rand")                      \
  X(RandNormal, "randn")                      \
  X(RandInt, "randint")                       \
  X(Bernoulli, "bernoulli")                   \
  X(ScatterAdd, "scatter_add")                \
  X(MaxPool2dBackward, "max_pool2d_backward") \
  X(AvgPool2dBackward, "avg_pool2d_backward") \
  X(AllReduce, "all_reduce")                  \
  X(AllGather, "all_gather")                  \
  X(ReduceScatter, "reduce_scatter")          \
  X(AllToAll, "all_to_all")                   \
  X(CollectivePermute, "collective_permute")  \
  X(Sin, "sin")                               \
  X(Cos, "cos")                               \
  X(Cumsum, "cumsum")                         \
  X(TopK, "topk")                             \
  X(OptimizationBarrier, "optimization_barrier") \
  X(ScaledDotProductAttention, "scaled_dot_product_attention") \
  X(ScaledDotProductAttentionBackward, "scaled_dot_product_attention_backward") \
  X(Erf, "erf")                               \
  I(CustomSharding, "custom_sharding")
// clang-format on

/// An IR operation.
enum class Op : uint16_t {
  kDeviceData,  ///< a leaf holding device data (hashes by shape and dtype, never by value)
  kParameter,   ///< a leaf holding a host scalar fed at execution (hashes by dtype only)
  kConstant,    ///< a scalar 0 or 1 baked into the program (hashes by value)
  kReshape,     ///< same elements, new shape (lowers to a copy)
#define AXLE_OP_ENUM(name, str) k##name,
  AXLE_IR_OPS(AXLE_OP_ENUM, AXLE_OP_ENUM)
#undef AXLE_OP_ENUM
      kCount
};

/// The op's name in IR dumps and per-op counters (`xla::add`).
[[nodiscard]] std::string_view op_name(Op op) noexcept;

/// Whether each element of the op's output is computed from the elements of its operands at the
/// same position (operands broadcast NumPy-style): arithmetic, comparisons, logical ops, where,
/// unary math and cast. The passes that lay values out (sharding propagation, the partitioner)
/// treat these alike.
[[nodiscard]] bool is_elementwise(Op op) noexcept;

}  // namespace axle
