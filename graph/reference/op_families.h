// graph/reference: what the reference evaluator's op families share — the node being evaluated
// with its operands' values, errors that name it, element reads and writes in any storage dtype,
// and row-major index math. Internal to graph/reference/ (not installed).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "axle/engine/dtype.h"
#include "axle/engine/shape.h"
#include "axle/graph/ir.h"
#include "axle/graph/tensor.h"

namespace axle::reference::detail {

/// One node being evaluated: the node and its operands' values, in operand order.
struct OpCall {
  const Node& node;
  std::span<const CpuTensor* const> operands;

  [[nodiscard]] const CpuTensor& operand(std::size_t i) const { return *operands[i]; }
  [[nodiscard]] DType dtype() const noexcept { return node.dtype(); }
  [[nodiscard]] const Shape& shape() const noexcept { return node.shape(); }
  [[nodiscard]] std::span<const int64_t> ints() const noexcept { return node.ints(); }
  [[nodiscard]] std::span<const double> reals() const noexcept { return node.reals(); }
};

/// Throws std::invalid_argument naming the op, its operands and result, `why` and the source
/// line that traced it: "reference evaluator: add(f32[2,3], f32[4]) -> f32[2,3]: why (at
/// model.cpp:12 in train)".
[[noreturn]] void fail(const OpCall& call, std::string_view why);
/// Fails unless the node has `count` operands.
void expect_operands(const OpCall& call, std::size_t count);
/// Fails unless the node has at least `count` int attributes (`layout` names them).
void expect_ints(const OpCall& call, std::size_t count, std::string_view layout);
/// Fails unless `what` (an operand or the result) has dtype `want`.
void expect_dtype(const OpCall& call, std::string_view what, DType got, DType want);

/// A zero-filled tensor of `dtype` and `shape` (zero bytes are 0 in every dtype).
[[nodiscard]] CpuTensor zeros(DType dtype, const Shape& shape);
/// A zero-filled tensor of the node's dtype and shape.
[[nodiscard]] CpuTensor result_of(const OpCall& call);

// ---- Elements --------------------------------------------------------------------------------

/// Element `i` as a double (bf16 widens exactly; s64 beyond 2^53 rounds).
[[nodiscard]] double real_at(const CpuTensor& t, int64_t i);
/// Element `i` of an integer or bool tensor, exactly (a floating one truncates toward zero).
[[nodiscard]] int64_t int_at(const CpuTensor& t, int64_t i);
/// Stores `value` rounded to t's dtype: floating dtypes round to nearest (bf16 through f32, as
/// the CPU backend narrows), integers truncate toward zero (NaN and out-of-range values give the
/// type's minimum, as x86's conversion does), bool is `value != 0` (NaN is true).
void store_real(CpuTensor& t, int64_t i, double value);
/// Stores an integer: integer dtypes wrap to their width, floating ones round once (an s64 to
/// f32 directly, not through f64), bool is `value != 0`.
void store_int(CpuTensor& t, int64_t i, int64_t value);
/// Copies element `from_index` of `from` to element `to_index` of `to` (same dtype), bit for bit.
void copy_element(const CpuTensor& from, int64_t from_index, CpuTensor& to, int64_t to_index);

/// Integer arithmetic as C++ computes it on the type's unsigned form: it wraps.
[[nodiscard]] inline int64_t wrapping_add(int64_t a, int64_t b) noexcept {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
[[nodiscard]] inline int64_t wrapping_mul(int64_t a, int64_t b) noexcept {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// ---- Index math ------------------------------------------------------------------------------

/// A multi-index or per-dim strides, outermost first (the first `rank` entries are used).
using Index = std::array<int64_t, Shape::kMaxRank>;

/// Row-major strides of `shape`, in elements.
[[nodiscard]] Index strides_of(const Shape& shape);
/// sum(index[d] * strides[d]) over the first `rank` dims.
[[nodiscard]] int64_t offset_of(const Index& index, const Index& strides, int rank);
/// Whether `in` broadcasts to `out` as in NumPy: dims align at the end, each 1 or equal.
[[nodiscard]] bool broadcasts_to(const Shape& in, const Shape& out);
/// Strides of `in` along each of `out`'s dims when broadcast to it: 0 where it repeats.
[[nodiscard]] Index broadcast_strides(const Shape& in, const Shape& out);

/// Calls f(index) for every index of `shape` in row-major order: once for a 0-d shape, never
/// when a dim is 0.
template <class F>
void for_each_index(const Shape& shape, F&& f) {
  const int rank = shape.rank();
  if (shape.numel() == 0) return;
  Index index{};
  while (true) {
    f(static_cast<const Index&>(index));
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

/// Calls f(output index, offsets) for every element of the node's shape in row-major order, with
/// offsets[k] the flat index of the element operand k contributes when broadcast to that shape
/// (NumPy rules); fails naming the operand when one does not broadcast.
template <std::size_t N, class F>
void broadcast_loop(const OpCall& call, const std::array<const CpuTensor*, N>& operands, F&& f) {
  const Shape& out = call.shape();
  std::array<Index, N> strides;
  for (std::size_t k = 0; k < N; ++k) {
    if (!broadcasts_to(operands[k]->shape, out)) {
      fail(call, "operand " + std::to_string(k) + " of shape " + operands[k]->shape.to_string() +
                     " does not broadcast to " + out.to_string());
    }
    strides[k] = broadcast_strides(operands[k]->shape, out);
  }
  int64_t i = 0;
  for_each_index(out, [&](const Index& index) {
    std::array<int64_t, N> offsets;
    for (std::size_t k = 0; k < N; ++k) offsets[k] = offset_of(index, strides[k], out.rank());
    f(i++, offsets);
  });
}

// ---- Op families (one file each) ---------------------------------------------------------------

/// Arithmetic, comparisons, logical ops, where, unary math, cast, fill and iota (elementwise.cpp).
[[nodiscard]] CpuTensor evaluate_elementwise(const OpCall& call);
/// sum, mean, max, min, logsumexp, argmax, softmax, log_softmax, cumsum and topk (reduce.cpp).
[[nodiscard]] CpuTensor evaluate_reduction(const OpCall& call);
/// matmul and conv2d (linalg.cpp).
[[nodiscard]] CpuTensor evaluate_linalg(const OpCall& call);
/// max_pool2d, avg_pool2d and their gradients (pooling.cpp).
[[nodiscard]] CpuTensor evaluate_pooling(const OpCall& call);
/// reshape, permute, expand, slice, cat, index_select, gather, one_hot, scatter_add
/// (data_movement.cpp).
[[nodiscard]] CpuTensor evaluate_data_movement(const OpCall& call);
/// rand, randn, randint and bernoulli (random.cpp).
[[nodiscard]] CpuTensor evaluate_random(const OpCall& call);
/// scaled_dot_product_attention and its backward (attention.cpp).
[[nodiscard]] CpuTensor evaluate_attention(const OpCall& call);
/// The collectives, as a group of one replica (collective.cpp).
[[nodiscard]] CpuTensor evaluate_collective(const OpCall& call);

}  // namespace axle::reference::detail
