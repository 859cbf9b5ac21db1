// actors: lowering's folds.
#include "axle/actors/compiler/call_folding.h"

#include <algorithm>
#include <span>

namespace axle {
namespace {

bool floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16;
}

// Whether node id is a permute of a rank-4 value swapping its first two dims.
bool swaps_first_dims(const Program& program, std::size_t id) {
  const std::span<const int64_t> ints = program.ints(id);
  return program[id].op == Op::kPermute && program[id].shape.rank() == 4 && ints.size() == 4 &&
         ints[0] == 1 && ints[1] == 0 && ints[2] == 2 && ints[3] == 3;
}

// What the folds share: the program, its calls, and which producers are folded already.
struct Folding {
  const Program& program;
  const std::vector<int32_t>& root_of;
  std::vector<KernelCall>& calls;
  std::vector<uint8_t>& absorbed;
  std::vector<int32_t> uses;  // readers of each value; an output counts 2 (stored: never folded)

  // A producer that only its reader reads and that has a call of its own (not a leaf, not part
  // of a fused kernel, not folded already).
  [[nodiscard]] bool foldable(int32_t producer) const {
    const auto p = static_cast<std::size_t>(producer);
    return uses[p] == 1 && !program.is_leaf(p) && root_of[p] < 0 && !absorbed[p];
  }

  // max_pool2d(relu(x)): the pool applies the relu as it reads (relu_first).
  void relu_into_pool(std::size_t id) {
    KernelCall& call = calls[id];
    const int32_t relu = call.inputs[0];
    if (program[relu].op == Op::kRelu && foldable(relu) &&
        program[relu].dtype == program[id].dtype) {
      call.inputs[0] = program.operands(relu)[0];
      call.ints.push_back(1);  // relu_first
      absorbed[relu] = 1;
    }
  }

  // Operands stored with their first two dims swapped: layout bits 1 (x) and 2 (w).
  void swapped_operands_into_conv(std::size_t id) {
    KernelCall& call = calls[id];
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
  }

  // producer(...) + bias, the bias one value per output channel of a convolution (`fits`:
  // per_channel) or per output column of a product (per_column): the producer's kernel adds it
  // as it writes its output, taking the bias as a third operand. A filled constant may be stored
  // as one element (lowering.cpp), so it stays an add.
  template <class Fits>
  void bias_into(std::size_t id, Op producer_op, Fits fits) {
    KernelCall& call = calls[id];
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t producer = call.inputs[k], bias = call.inputs[1 - k];
      if (program[producer].op != producer_op || !foldable(producer) ||
          calls[producer].inputs.size() != 2 || !(program[producer].shape == program[id].shape) ||
          program[producer].dtype != program[id].dtype ||
          program[bias].dtype != program[id].dtype || !fits(program[bias].shape) ||
          program[bias].op == Op::kConstant) {
        continue;
      }
      KernelCall folded = calls[producer];
      folded.inputs.push_back(bias);
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[producer] = 1;
      return;
    }
  }

  // Whether `b` holds one value per column (the last dim) of node id's result.
  [[nodiscard]] bool per_column(const Shape& b, std::size_t id) const {
    const Shape& out = program[id].shape;
    if (b.rank() < 1 || b.rank() > out.rank() || b[b.rank() - 1] != out[out.rank() - 1]) {
      return false;
    }
    for (int d = 0; d + 1 < b.rank(); ++d) {
      if (b[d] != 1) return false;
    }
    return true;
  }

  // Whether `b` holds one value per channel (dim 1) of node id's result.
  [[nodiscard]] bool per_channel(const Shape& b, std::size_t id) const {
    if (b.rank() < 1 || b.rank() > 4 || b.numel() != program[id].shape[1]) return false;
    for (int d = 0; d < b.rank(); ++d) {
      // Dim d of b lines up with dim d + 4 - rank of the output: only dim 1 may be > 1.
      if (b[d] != 1 && d + 4 - b.rank() != 1) return false;
    }
    return true;
  }

  // Whether `w` holds one value per element of a row of layer_norm_backward `id`'s result (its
  // last k dims, any dims before them 1).
  [[nodiscard]] bool per_row_element(const Shape& w, std::size_t id) const {
    const Shape& out = program[id].shape;
    const int64_t k = calls[id].ints[0];
    if (w.rank() < k || w.rank() > out.rank()) return false;
    for (int d = 0; d < w.rank(); ++d) {
      const int from_end = w.rank() - d;
      if (from_end <= k ? w[d] != out[out.rank() - from_end] : w[d] != 1) return false;
    }
    return true;
  }

  // layer_norm_backward(w * g, x), the weight one value per row element (layer_norm's affine
  // weight): the kernel multiplies as it reads the gradient (folded operand 1).
  void weight_into_layer_norm_backward(std::size_t id) {
    KernelCall& call = calls[id];
    const int32_t product = call.inputs[0];
    if (program[product].op != Op::kMul || !foldable(product) ||
        calls[product].kernel != Kernel::kMul || calls[product].inputs.size() != 2) {
      return;
    }
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t w = calls[product].inputs[k], g = calls[product].inputs[1 - k];
      if (!(program[g].shape == program[id].shape) || program[g].dtype != program[id].dtype ||
          program[w].dtype != program[id].dtype || !per_row_element(program[w].shape, id) ||
          program[w].op == Op::kConstant) {
        continue;
      }
      call.inputs = {g, call.inputs[1], w};
      call.ints.push_back(kLayerNormFoldedWeight);
      absorbed[product] = 1;
      return;
    }
  }

  // residual + layer_norm_backward(...): the kernel adds its result to the residual (folded
  // operand 2, last).
  void layer_norm_backward_into_add(std::size_t id) {
    KernelCall& call = calls[id];
    for (std::size_t k = 0; k < 2; ++k) {
      const int32_t backward = call.inputs[k], residual = call.inputs[1 - k];
      if (program[backward].op != Op::kLayerNormBackward || !foldable(backward) ||
          calls[backward].kernel != Kernel::kLayerNormBackward ||
          !(program[backward].shape == program[id].shape) ||
          program[backward].dtype != program[id].dtype ||
          !(program[residual].shape == program[id].shape) ||
          program[residual].dtype != program[id].dtype) {
        continue;
      }
      KernelCall folded = calls[backward];
      if (folded.ints.size() == 1) folded.ints.push_back(0);
      folded.ints[1] |= kLayerNormFoldedResidual;
      folded.inputs.push_back(residual);
      folded.output = static_cast<int32_t>(id);
      call = std::move(folded);
      absorbed[backward] = 1;
      return;
    }
  }

  // A bf16 product (its bias folded in or not) widened to f32: the product stores its values
  // as f32 (kMatmul's bf16_as_f32), so the bf16 result is never stored and read back.
  void product_into_widening_cast(std::size_t id) {
    const int32_t product = calls[id].inputs[0];
    const KernelCall& produced = calls[product];
    if (produced.kernel != Kernel::kMatmul || produced.output != product ||
        produced.ints.size() != 2 || program[product].dtype != DType::kBFloat16 ||
        !foldable(product)) {
      return;
    }
    KernelCall folded = produced;
    folded.ints.push_back(1);
    folded.output = static_cast<int32_t>(id);
    calls[id] = std::move(folded);
    absorbed[product] = 1;
  }

  // The result of a convolution transposed: the convolution writes it so (layout bit 4).
  void conv_into_transpose(std::size_t id) {
    const int32_t conv = program.operands(id)[0];
    const KernelCall& produced = calls[conv];
    if (program[conv].op != Op::kConv2d || !foldable(conv) || produced.ints.size() < 7 ||
        produced.ints[6] != 1 || produced.inputs.size() != 2) {
      return;
    }
    KernelCall folded = produced;
    if (folded.ints.size() == 7) folded.ints.push_back(0);
    folded.ints[7] |= 4;
    folded.output = static_cast<int32_t>(id);
    calls[id] = std::move(folded);
    absorbed[conv] = 1;
  }
};

}  // namespace

void fold_calls(const Program& program, const std::vector<int32_t>& root_of,
                std::vector<KernelCall>& calls, std::vector<uint8_t>& absorbed) {
  const std::size_t n = program.size();
  absorbed.assign(n, 0);
  Folding folding{program, root_of, calls, absorbed, std::vector<int32_t>(n, 0)};
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) ++folding.uses[operand];
  }
  for (int32_t output : program.outputs) folding.uses[output] += 2;
  for (std::size_t id = 0; id < n; ++id) {
    if (program.is_leaf(id) || root_of[id] >= 0) continue;
    const KernelCall& call = calls[id];
    const DType dtype = program[id].dtype;
    if (call.kernel == Kernel::kMaxPool2d && call.ints.size() == 9 && floating(dtype)) {
      folding.relu_into_pool(id);
    } else if (call.kernel == Kernel::kConv2d && call.ints.size() == 7 && call.ints[6] == 1 &&
               call.inputs.size() == 2) {
      folding.swapped_operands_into_conv(id);
    } else if (call.kernel == Kernel::kAdd && call.inputs.size() == 2 && floating(dtype)) {
      // A convolution's bias is f32 or f64 (executable.h); a product's any floating dtype.
      if (dtype != DType::kBFloat16) {
        folding.bias_into(id, Op::kConv2d,
                          [&](const Shape& b) { return folding.per_channel(b, id); });
      }
      if (calls[id].kernel == Kernel::kAdd) {
        folding.bias_into(id, Op::kMatmul,
                          [&](const Shape& b) { return folding.per_column(b, id); });
      }
      // layer_norm_backward folds f32 operands (executable.h).
      if (calls[id].kernel == Kernel::kAdd && dtype == DType::kFloat32) {
        folding.layer_norm_backward_into_add(id);
      }
    } else if (call.kernel == Kernel::kLayerNormBackward && call.inputs.size() == 2 &&
               call.ints.size() == 1 && dtype == DType::kFloat32) {
      folding.weight_into_layer_norm_backward(id);
    } else if (call.kernel == Kernel::kCast && call.inputs.size() == 1 &&
               dtype == DType::kFloat32) {
      folding.product_into_widening_cast(id);
    } else if (swaps_first_dims(program, id)) {
      folding.conv_into_transpose(id);
    }
  }
}

}  // namespace axle
