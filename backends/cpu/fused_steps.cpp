// backends/cpu: reading and checking a fused kernel's step list.
#include "axle/backends/cpu/fused_steps.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace axle::cpu {

void fused_malformed(const std::string& what) { throw std::invalid_argument("fused: " + what); }

namespace {

// Reads the reduction at ints[at..] (to the end of ints).
FusedReduction parse_reduction(const std::vector<int64_t>& ints, std::size_t at) {
  const std::size_t size = ints.size() - at;
  const int64_t rank = size >= 4 ? ints[at + 3] : -1;
  if (size < 5 || rank < 0 || rank > Shape::kMaxRank || size < 5 + static_cast<std::size_t>(rank)) {
    fused_malformed(
        fmt::format("the reduction must be [kernel, -1, operand, rank, shape..., keepdim, "
                    "dims...], got {} values",
                    size));
  }
  FusedReduction r{
      static_cast<Kernel>(ints[at]), static_cast<int32_t>(ints[at + 2]), {}, false, {}};
  if (ints[at + 1] != -1)
    fused_malformed(fmt::format("the reduction writes {}, not -1", ints[at + 1]));
  int64_t elements = 1;
  for (std::size_t d = 0; d < static_cast<std::size_t>(rank); ++d) {
    const int64_t dim = ints[at + 4 + d];
    if (dim < 0 || __builtin_mul_overflow(elements, dim, &elements)) {
      fused_malformed(fmt::format("the reduction's shape has a negative or too large dim {}", dim));
    }
    r.shape.push_back(dim);
  }
  const int64_t keepdim = ints[at + 4 + static_cast<std::size_t>(rank)];
  if (keepdim != 0 && keepdim != 1) fused_malformed(fmt::format("reduction keepdim {}", keepdim));
  r.keepdim = keepdim != 0;
  r.dims.assign(ints.begin() + static_cast<std::ptrdiff_t>(at + 5 + rank), ints.end());
  return r;
}

// Reads and checks the step list (a program from disk or a bug must not index out of bounds).
}  // namespace

FusedSteps parse_fused_steps(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  auto wrong_length = [&] {
    fused_malformed(fmt::format(
        "ints must be [buffers, 5 per step, optionally a reduction], got {} values", ints.size()));
  };
  if (ints.size() < 2) wrong_length();
  if (ints[0] < 0 || ints[0] > 1024) fused_malformed(fmt::format("{} scratch buffers", ints[0]));
  FusedSteps fused;
  fused.buffers = static_cast<int32_t>(ints[0]);
  const auto inputs = static_cast<int64_t>(args.inputs.size());
  auto check_operand = [&](int64_t operand, std::size_t step) {
    if (operand >= inputs || operand < -static_cast<int64_t>(fused.buffers)) {
      fused_malformed(fmt::format("step {} reads operand {} ({} inputs, {} buffers)", step, operand,
                                  inputs, fused.buffers));
    }
  };
  for (std::size_t at = 1, s = 0; at < ints.size(); at += 5, ++s) {
    const int64_t* f = ints.data() + at;
    if (f[0] < 0 || f[0] >= static_cast<int64_t>(Kernel::kCount)) {
      fused_malformed(fmt::format("step {} has kernel number {}", s, f[0]));
    }
    const auto kernel = static_cast<Kernel>(f[0]);
    if (fused_reduction(kernel)) {
      fused.reduction = parse_reduction(ints, at);
      check_operand(ints[at + 2], s);
      break;
    }
    if (at + 5 > ints.size()) wrong_length();
    const int arity = fused_step_arity(kernel);
    if (arity == 0) {
      fused_malformed(
          fmt::format("step {}: {} is not a fusible elementwise kernel", s, kernel_name(kernel)));
    }
    check_operand(f[2], s);
    if (arity == 2) check_operand(f[3], s);
    fused.steps.push_back({kernel, static_cast<int32_t>(std::clamp<int64_t>(f[1], -2, 1 << 20)),
                           static_cast<int32_t>(f[2]), arity == 2 ? static_cast<int32_t>(f[3]) : 0,
                           f[4] != 0});
  }
  if (fused.steps.empty() && !fused.reduction) wrong_length();
  for (std::size_t s = 0; s < fused.steps.size(); ++s) {
    const int32_t d = fused.steps[s].destination;
    const bool to_output = s + 1 == fused.steps.size() && !fused.reduction;
    if (to_output ? d != -1 : (d < 0 || d >= fused.buffers)) {
      fused_malformed(
          fmt::format("step {} writes {} (scratch buffers 0..{}; the last step writes -1, unless a "
                      "reduction follows)",
                      s, d, fused.buffers - 1));
    }
  }
  return fused;
}

}  // namespace axle::cpu
