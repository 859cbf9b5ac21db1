// actors: lowering's folds — an op whose only reader's kernel can compute it on the fly is
// computed there instead of by a call of its own, so its full-size result is never stored and
// read back: a relu under a max pool, a convolution or a matrix product under the add of its
// bias (the kernel adds it), and the transposes around a convolution's weight gradient
// (graph/autograd/conv_grad.cpp swaps batch and channels of the input and the output gradient,
// and of the result), and around a layer norm's backward the product of its incoming gradient
// by the affine weight and the add of its result to the residual gradient (in f32), a bf16
// product's cast to f32 (the product stores its bf16 values as f32) and the add of a residual
// to those f32 values (the product adds it as it stores them), gelu's backward of a
// product and relu's (where(x > 0, product, 0): both applied to each block of the product's
// output as it is finished; relu's backward then reads a stored relu(x) in place of x), a
// product's relu (relu_folds.cpp), and the slices,
// reshapes and permutes that split a [B, T, 3 H D] projection into attention's heads [B, H, T,
// D] (and its grad's), and that concatenate the backward's gradients back into the
// projection's gradient: attention reads and writes those rows in place (its views); a slice of
// the first columns of rows and a cast to bf16 under a permute (attention's output turned back
// into [B, T, H, D]): the permute reads the rows in place and rounds as it copies.
// The folded relu, biases, layer norm operands, gelu's and relu's backward, residuals, attention's
// views and a permute's slice and cast give the same bits as the calls they replace, but for a bf16
// product's bias: the product's f32 sum plus the bias is rounded once, where the separate add
// rounded the sum and then the total (as torch's addmm rounds once).
#pragma once

#include <cstdint>
#include <vector>

#include "axle/backends/executable.h"
#include "axle/graph/passes/program.h"

namespace axle {

/// Folds producers into the calls of their readers: `calls[id]` is node id's call (for nodes
/// that get one of their own: not leaves, not fused; `root_of` is plan_fusion's). A folded
/// producer gets absorbed[id] = 1 and no call; its reader's call reads the producer's operand
/// and carries the kernel's flag for it (executable.h: kMaxPool2d's relu_first, kConv2d's
/// layout, kLayerNormBackward's folded weight, attention's views, kPermute's row), or a folded
/// convolution's, product's, layer norm backward's or attention backward's call becomes its
/// reader's (with the bias or the residual as a further input, writing the transposed result,
/// or writing the gradients into the concatenation).
void fold_calls(const Program& program, const std::vector<int32_t>& root_of,
                std::vector<KernelCall>& calls, std::vector<uint8_t>& absorbed);

}  // namespace axle
