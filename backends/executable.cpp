// backends: kernel names and the safety check of programs from outside the compiler.
#include "axle/backends/executable.h"

#include <fmt/format.h>

#include <algorithm>

#include <array>
#include <limits>

#include "axle/engine/hash.h"

namespace axle {

std::string_view kernel_name(Kernel kernel) noexcept {
  // A table by hand, the backward kernels' long names on a row of their own (clang-format would
  // put every name on its own line).
  // clang-format off
  static constexpr std::array<std::string_view, static_cast<std::size_t>(Kernel::kCount)> kNames = {
      "add",     "sub",         "mul",          "div",         "pow",        "maximum",
      "minimum", "eq",          "ne",           "lt",          "le",         "gt",
      "ge",      "logical_and", "logical_or",   "where",       "neg",        "relu",
      "gelu",    "abs",         "logical_not",  "cast",        "fill",       "iota",
      "sum",     "mean",        "reduce_max",   "reduce_min",  "logsumexp",  "argmax",
      "softmax", "log_softmax", "matmul",       "conv2d",      "max_pool2d", "avg_pool2d",
      "copy",    "permute",     "expand",       "slice",       "concat",     "index_select",
      "gather",  "one_hot",     "rand_uniform", "rand_normal", "rand_int",   "bernoulli",
      "scatter_add", "max_pool2d_backward", "avg_pool2d_backward",
      "cumsum",  "topk",        "optimization_barrier",
      "scaled_dot_product_attention", "scaled_dot_product_attention_backward", "gelu_backward",
      "layer_norm", "layer_norm_backward", "conv_transpose2d",
      "fused", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
#define AXLE_FLOAT_FUNCTION_NAME(name, str) str,
      AXLE_FLOAT_FUNCTIONS(AXLE_FLOAT_FUNCTION_NAME)
#undef AXLE_FLOAT_FUNCTION_NAME
  };
  // clang-format on
  auto i = static_cast<std::size_t>(kernel);
  return i < kNames.size() ? kNames[i] : "unknown";
}

uint64_t kernel_table_fingerprint() noexcept {
  static const uint64_t kFingerprint = [] {
    uint64_t h = hash_string("kernels");
    for (std::size_t k = 0; k < static_cast<std::size_t>(Kernel::kCount); ++k) {
      h = hash_combine(h, hash_string(kernel_name(static_cast<Kernel>(k))));
    }
    return h;
  }();
  return kFingerprint;
}

int collective_groups_at(Kernel kernel) noexcept {
  switch (kernel) {
    case Kernel::kAllReduce:
    case Kernel::kAllGather:
      return 1;
    case Kernel::kReduceScatter:
    case Kernel::kAllToAll:
      return 2;
    default:
      return -1;
  }
}

std::vector<int> collective_members(const KernelCall& call, int replica) {
  const int at = collective_groups_at(call.kernel);
  if (at < 0) {
    if (call.ints.empty()) return {};
    std::vector<int> all(static_cast<std::size_t>(call.ints[0]));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    return all;
  }
  if (call.ints.size() <= static_cast<std::size_t>(at)) return {};
  const auto size = static_cast<std::size_t>(call.ints[at]);
  if (size == 0) return {};
  for (std::size_t begin = at + 1; begin + size <= call.ints.size(); begin += size) {
    const auto first = call.ints.begin() + static_cast<std::ptrdiff_t>(begin);
    if (std::find(first, first + static_cast<std::ptrdiff_t>(size), replica) !=
        first + static_cast<std::ptrdiff_t>(size)) {
      return std::vector<int>(first, first + static_cast<std::ptrdiff_t>(size));
    }
  }
  return {};
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

int fused_step_arity(Kernel kernel) noexcept {
  switch (kernel) {
    case Kernel::kAdd:
    case Kernel::kSub:
    case Kernel::kMul:
    case Kernel::kDiv:
    case Kernel::kPow:
    case Kernel::kMaximum:
    case Kernel::kMinimum:
    case Kernel::kGeluBackward:
      return 2;
    case Kernel::kNeg:
    case Kernel::kAbs:
    case Kernel::kRelu:
    case Kernel::kGelu:
#define AXLE_FLOAT_FUNCTION_CASE(name, str) case Kernel::k##name:
      AXLE_FLOAT_FUNCTIONS(AXLE_FLOAT_FUNCTION_CASE)
#undef AXLE_FLOAT_FUNCTION_CASE
      return 1;
    default:
      return 0;
  }
}

bool fused_reduction(Kernel kernel) noexcept {
  return kernel == Kernel::kSum || kernel == Kernel::kMean || kernel == Kernel::kReduceMax ||
         kernel == Kernel::kReduceMin;
}

bool fusible_reduction_dims(const Shape& shape, std::span<const int64_t> dims) noexcept {
  // The runs of reduced and kept dims among the dims of size > 1 (as the CPU reduction kernels
  // group them): one reduced run or none, or a kept run between two reduced ones.
  int reduced_runs = 0, runs = 0;
  bool first_reduced = false, last_reduced = false;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (runs == 0 || reduced != last_reduced) {
      ++runs;
      reduced_runs += reduced;
      if (runs == 1) first_reduced = reduced;
    }
    last_reduced = reduced;
  }
  return reduced_runs <= 1 || (runs == 3 && first_reduced);
}

bool writes_in_place_safely(const KernelCall& call, std::size_t operand) noexcept {
  if (operand >= call.inputs.size()) return false;
  // scatter_add adds into a copy of its base, element by element: the base may be that copy, but
  // not when the index or src is the same slot (read anywhere while the sums are written).
  if (call.kernel == Kernel::kScatterAdd) {
    return operand == 0 && std::count(call.inputs.begin(), call.inputs.end(), call.inputs[0]) == 1;
  }
  // Every fusible step reads element i only to write element i; so do where and fused kernels,
  // unless a reduction ends them (an output element then depends on many operand elements).
  // An optimization barrier copies one operand whole (and skips the copy when it is that
  // operand's buffer); it reads none of the others. layer_norm_backward reads a row of each
  // operand (whole, or element i to write element i) before it writes that row.
  if (fused_step_arity(call.kernel) > 0 || call.kernel == Kernel::kWhere ||
      call.kernel == Kernel::kOptimizationBarrier || call.kernel == Kernel::kLayerNormBackward) {
    return true;
  }
  if (call.kernel != Kernel::kFused) return false;
  // Steps are five ints each; the reduction, if any, begins where a step would.
  for (std::size_t at = 1; at < call.ints.size(); at += 5) {
    const int64_t kernel = call.ints[at];
    if (kernel < 0 || kernel >= static_cast<int64_t>(Kernel::kCount) ||
        fused_reduction(static_cast<Kernel>(kernel))) {
      return false;
    }
  }
  return true;
}

// What is wrong with a program's memory plan (see program_error), or empty.
std::string plan_error(const Executable& program, const std::vector<bool>& caller_owned) {
  const MemoryPlan& plan = program.plan;
  if (plan.empty())
    return plan.in_place.empty() && plan.release_slots.empty() ? "" : "plan without release lists";
  const std::size_t calls = program.calls.size();
  if (plan.release_begin.size() != calls + 1 || plan.in_place.size() != calls) {
    return fmt::format("memory plan for {} calls, program has {}", plan.in_place.size(), calls);
  }
  if (plan.release_begin.front() != 0 || plan.release_begin.back() != plan.release_slots.size()) {
    return "memory plan release lists do not cover its slots";
  }
  // A slot released, or written over in place, is never read afterwards.
  std::vector<bool> gone(program.slots.size(), false);
  for (std::size_t c = 0; c < calls; ++c) {
    const KernelCall& call = program.calls[c];
    for (int32_t in : call.inputs) {
      if (gone[in]) return fmt::format("call {} reads slot {} after the plan released it", c, in);
    }
    if (const int32_t s = plan.in_place[c]; s >= 0) {
      const auto at = std::find(call.inputs.begin(), call.inputs.end(), s);
      if (at == call.inputs.end() ||
          !writes_in_place_safely(call, static_cast<std::size_t>(at - call.inputs.begin())) ||
          caller_owned[s] || !(program.slots[s].dtype == program.slots[call.output].dtype) ||
          !(program.slots[s].shape == program.slots[call.output].shape)) {
        return fmt::format("call {} ({}) cannot write in place over slot {}", c,
                           kernel_name(call.kernel), s);
      }
      gone[s] = true;
    }
    if (plan.release_begin[c + 1] < plan.release_begin[c]) return "memory plan lists overlap";
    // The last bound is checked against the list above; one in the middle may point past it.
    if (plan.release_begin[c + 1] > plan.release_slots.size()) {
      return "memory plan release lists do not cover its slots";
    }
    for (uint32_t r = plan.release_begin[c]; r < plan.release_begin[c + 1]; ++r) {
      const int32_t s = plan.release_slots[r];
      if (s < 0 || static_cast<std::size_t>(s) >= program.slots.size() || caller_owned[s]) {
        return fmt::format("call {}: the plan releases slot {}, which it does not own", c, s);
      }
      gone[s] = true;
    }
  }
  return {};
}

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
  if (!program.donated_inputs.empty() &&
      program.donated_inputs.size() != program.input_slots.size()) {
    return fmt::format("{} donation flags for {} inputs", program.donated_inputs.size(),
                       program.input_slots.size());
  }
  // Inputs not donated, and outputs.
  std::vector<bool> caller_owned(program.slots.size(), false);
  for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
    if (!program.donated(i)) caller_owned[program.input_slots[i]] = true;
  }
  for (int32_t slot : program.output_slots) {
    if (!in_range(slot)) return fmt::format("output slot {} is out of range", slot);
    if (!bound[slot]) return fmt::format("output slot {} is never written", slot);
    caller_owned[slot] = true;
  }
  return plan_error(program, caller_owned);
}

std::string describe_call(const Executable& program, const KernelCall& call) {
  std::string s = fmt::format("{}(", kernel_name(call.kernel));
  for (std::size_t i = 0; i < call.inputs.size(); ++i) {
    const BufferDesc& d = program.slots[call.inputs[i]];
    s += fmt::format("{}{}{}", i ? ", " : "", dtype_name(d.dtype), d.shape.to_string());
  }
  const BufferDesc& out = program.slots[call.output];
  return s + fmt::format(") -> {}{}", dtype_name(out.dtype), out.shape.to_string());
}

}  // namespace axle
