// backends: kernel names and the safety check of programs from outside the compiler.
#include "backends/executable.h"

#include <fmt/format.h>

#include <array>
#include <limits>

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
      "gather",  "one_hot",     "rand_uniform", "rand_normal", "rand_int",   "bernoulli"};
  auto i = static_cast<std::size_t>(kernel);
  return i < kNames.size() ? kNames[i] : "unknown";
}

namespace {

std::string slot_error(const BufferDesc& desc) {
  if (static_cast<int>(desc.dtype) >= kNumDTypes) {
    return fmt::format("dtype {} is unknown", static_cast<int>(desc.dtype));
  }
  // A size that overflows would allocate a small buffer that the kernels then overrun.
  int64_t bytes = static_cast<int64_t>(dtype_size(desc.dtype));
  for (int64_t dim : desc.shape.dims()) {
    if (dim < 0) return fmt::format("shape {} has a negative dim", desc.shape.to_string());
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return fmt::format("shape {} is too large", desc.shape.to_string());
    }
  }
  return {};
}

}  // namespace

std::string program_error(const Executable& program) {
  const auto slot_count = static_cast<int64_t>(program.slots.size());
  if (slot_count > std::numeric_limits<int32_t>::max()) return "too many slots";
  for (std::size_t i = 0; i < program.slots.size(); ++i) {
    if (std::string why = slot_error(program.slots[i]); !why.empty()) {
      return fmt::format("slot {}: {}", i, why);
    }
  }
  auto in_range = [&](int32_t slot) { return slot >= 0 && slot < slot_count; };
  std::vector<bool> bound(program.slots.size(), false);
  for (int32_t slot : program.input_slots) {
    if (!in_range(slot)) return fmt::format("input slot {} is out of range", slot);
    if (bound[slot]) return fmt::format("input slot {} is bound twice", slot);
    bound[slot] = true;
  }
  for (std::size_t i = 0; i < program.calls.size(); ++i) {
    const KernelCall& call = program.calls[i];
    if (static_cast<std::size_t>(call.kernel) >= static_cast<std::size_t>(Kernel::kCount)) {
      return fmt::format("call {}: kernel {} is unknown", i, static_cast<int>(call.kernel));
    }
    if (!in_range(call.output)) {
      return fmt::format("call {} ({}): output slot {} is out of range", i,
                         kernel_name(call.kernel), call.output);
    }
    for (int32_t in : call.inputs) {
      if (!in_range(in)) {
        return fmt::format("call {} ({}): input slot {} is out of range", i,
                           kernel_name(call.kernel), in);
      }
      if (!bound[in]) {
        return fmt::format("call {} ({}): reads slot {} before anything writes it", i,
                           kernel_name(call.kernel), in);
      }
      // The backend replaces the output slot's buffer before the kernel reads its inputs.
      if (in == call.output) {
        return fmt::format("call {} ({}): writes its own input slot {}", i,
                           kernel_name(call.kernel), in);
      }
    }
    bound[call.output] = true;
  }
  for (int32_t slot : program.output_slots) {
    if (!in_range(slot)) return fmt::format("output slot {} is out of range", slot);
    if (!bound[slot]) return fmt::format("output slot {} is never written", slot);
  }
  return {};
}

}  // namespace axle
