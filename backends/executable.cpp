// backends: kernel names.
#include "backends/executable.h"

#include <array>

namespace axle {

std::string_view kernel_name(Kernel kernel) noexcept {
  static constexpr std::array<std::string_view, static_cast<std::size_t>(Kernel::kCount)> kNames = {
      "add",     "sub",         "mul",          "div",         "pow",        "maximum",
      "minimum", "eq",          "ne",           "lt",          "le",         "gt",
      "ge",      "logical_and", "logical_or",   "where",       "neg",        "exp",
      "log",     "sqrt",        "rsqrt",        "tanh",        "sigmoid",    "relu",
      "gelu",    "abs",         "logical_not",  "cast",        "fill",       "iota",
      "sum",     "mean",        "reduce_max",   "reduce_min",  "logsumexp",  "argmax",
      "softmax", "log_softmax", "matmul",       "conv2d",      "max_pool2d", "avg_pool2d",
      "copy",    "permute",     "expand",       "slice",       "concat",     "index_select",
      "gather",  "one_hot",     "rand_uniform", "rand_normal", "rand_int",   "bernoulli",
      "fused"};
  auto i = static_cast<std::size_t>(kernel);
  return i < kNames.size() ? kNames[i] : "unknown";
}

}  // namespace axle
