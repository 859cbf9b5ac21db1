// actors: lowering's folds.
#include "actors/compiler/call_folding.h"

#include <algorithm>
#include <span>

namespace axle {
namespace {

bool floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16;
}

// Whether node id is a permute of a rank-4 value swapping its first two dims.
bool swaps_first_dims(const Program& program, std::size_t id) {
  const std::span<const int64_t> ints = program.ints(id);
  return program[id].op == Op::kPermute && program[id].shape.rank() == 4 && ints.size() == 4 &&
         ints[0] == 1 && ints[1] == 0 && ints[2] == 2 && ints[3] == 3;
}

}  // namespace

void fold_calls(const Program& program, const std::vector<int32_t>& root_of,
                std::vector<KernelCall>& calls, std::vector<uint8_t>& absorbed) {
  const std::size_t n = program.size();
  std::vector<int32_t> uses(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) ++uses[operand];
  }
  for (int32_t output : program.outputs) uses[output] += 2;  // stored: never folded
  absorbed.assign(n, 0);
  // A producer that only `reader` reads and that has a call of its own (not a leaf, not part of
  // a fused kernel, not folded already).
  auto foldable = [&](int32_t producer) {
    const auto p = static_cast<std::size_t>(producer);
    return uses[p] == 1 && !program.is_leaf(p) && root_of[p] < 0 && !absorbed[p];
  };
  for (std::size_t id = 0; id < n; ++id) {
    if (program.is_leaf(id) || root_of[id] >= 0) continue;
    KernelCall& call = calls[id];
    if (call.kernel == Kernel::kMaxPool2d && call.ints.size() == 9 && floating(program[id].dtype)) {
      const int32_t relu = call.inputs[0];
      if (program[relu].op == Op::kRelu && foldable(relu) &&
          program[relu].dtype == program[id].dtype) {
        call.inputs[0] = program.operands(relu)[0];
        call.ints.push_back(1);  // relu_first
        absorbed[relu] = 1;
      }
      continue;
    }
    if (call.kernel == Kernel::kConv2d && call.ints.size() == 7 && call.ints[6] == 1 &&
        call.inputs.size() == 2) {
      // Operands stored with their first two dims swapped: layout bits 1 (x) and 2 (w).
      int64_t layout = 0;
      for (std::size_t k = 0; k < 2; ++k) {
        const int32_t permute = call.inputs[k];
        if (swaps_first_dims(program, permute) && foldable(permute)) {
          call.inputs[k] = program.operands(permute)[0];
          absorbed[permute] = 1;
          layout |= int64_t{1} << k;
        }
      }
      if (layout != 0) call.ints.push_back(layout);
      continue;
    }
    if (call.kernel == Kernel::kAdd && call.inputs.size() == 2 &&
        (program[id].dtype == DType::kF32 || program[id].dtype == DType::kF64)) {
      // conv2d(x, w) + b with b one value per output channel ([1, O, 1, 1] or [O, 1, 1]): the
      // convolution adds it to each plane as it writes it.
      for (std::size_t k = 0; k < 2; ++k) {
        const int32_t conv = call.inputs[k], bias = call.inputs[1 - k];
        if (program[conv].op != Op::kConv2d || !foldable(conv) ||
            !(program[conv].shape == program[id].shape) || calls[conv].inputs.size() != 2 ||
            program[bias].dtype != program[id].dtype) {
          continue;
        }
        const Shape& b = program[bias].shape;
        const int64_t channels = program[id].shape[1];
        bool per_channel = b.rank() >= 1 && b.rank() <= 4 && b.numel() == channels;
        for (int d = 0; d < b.rank() && per_channel; ++d) {
          // Dim d of b lines up with dim d + 4 - rank of the output: only dim 1 may be > 1.
          per_channel = b[d] == 1 || d + 4 - b.rank() == 1;
        }
        if (!per_channel) continue;
        KernelCall folded = calls[conv];
        folded.inputs.push_back(bias);
        folded.output = static_cast<int32_t>(id);
        call = std::move(folded);
        absorbed[conv] = 1;
        break;
      }
      continue;
    }
    if (swaps_first_dims(program, id)) {
      // The result of a convolution transposed: the convolution writes it so (layout bit 4).
      const int32_t conv = program.operands(id)[0];
      KernelCall& produced = calls[conv];
      if (program[conv].op != Op::kConv2d || !foldable(conv) || produced.ints.size() < 7 ||
          produced.ints[6] != 1 || produced.inputs.size() != 2) {
        continue;
      }
      KernelCall folded = produced;
      if (folded.ints.size() == 7) folded.ints.push_back(0);
      folded.ints[7] |= 4;
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[conv] = 1;
    }
  }
}

}  // namespace axle
