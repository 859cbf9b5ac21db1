// actors: what lowering's folds share (call_folding.cpp), and relu's folds (relu_folds.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "axle/backends/executable.h"
#include "axle/graph/passes/program.h"

namespace axle {

/// The program, its calls, and which producers are folded already.
struct FoldContext {
  const Program& program;
  const std::vector<int32_t>& root_of;
  std::vector<KernelCall>& calls;
  std::vector<uint8_t>& absorbed;
  std::vector<int32_t> uses;     // readers of each value; an output counts 2 (stored: never folded)
  std::vector<int32_t> relu_of;  // a relu of each value, or -1

  /// A producer that only its reader reads and that has a call of its own (not a leaf, not part
  /// of a fused kernel, not folded already).
  [[nodiscard]] bool foldable(int32_t producer) const {
    const auto p = static_cast<std::size_t>(producer);
    return uses[p] == 1 && !program.is_leaf(p) && root_of[p] < 0 && !absorbed[p];
  }

  /// Whether `product` is a product's own call with no flag past its transposes (a bias at
  /// most), foldable, of node `reader`'s dtype and shape: one an epilogue can join.
  [[nodiscard]] bool plain_product_for(int32_t product, std::size_t reader) const {
    const KernelCall& produced = calls[static_cast<std::size_t>(product)];
    return produced.kernel == Kernel::kMatmul && produced.output == product &&
           produced.ints.size() == 2 && foldable(product) &&
           program[product].dtype == program[reader].dtype &&
           program[product].shape == program[reader].shape;
  }

  /// Makes node `reader`'s call the plain `product`'s with `flags` after its transposes and
  /// `operand` (unless -1) as its last input; the product is folded.
  void product_into(int32_t product, std::size_t reader, std::initializer_list<int64_t> flags,
                    int32_t operand = -1) {
    KernelCall folded = calls[static_cast<std::size_t>(product)];
    folded.ints.insert(folded.ints.end(), flags);
    if (operand >= 0) folded.inputs.push_back(operand);
    folded.output = static_cast<int32_t>(reader);
    calls[reader] = std::move(folded);
    absorbed[static_cast<std::size_t>(product)] = 1;
  }
};

/// max_pool2d(relu(x)) at node `pool`: the pool applies the relu as it reads (relu_first).
void relu_into_pool(FoldContext& f, std::size_t pool);

/// where(x > 0, product, 0) at node `where`, f32 or bf16 (relu's backward of the gradient a
/// product computes): the product keeps each block of its output where x > 0 and writes +0
/// elsewhere as it finishes it; neither the product's result nor the comparison's is stored.
/// When a stored relu of x exists, the product reads it instead of x (relu(x) > 0 exactly where
/// x > 0), so that x may fold into its own relu (product_into_relu).
void product_into_relu_backward(FoldContext& f, std::size_t where);

/// relu(product) at node `relu`, f32 or bf16, the product (with its bias) read by the relu alone:
/// the product applies relu to each block of its output as it finishes it.
void product_into_relu(FoldContext& f, std::size_t relu);

}  // namespace axle
