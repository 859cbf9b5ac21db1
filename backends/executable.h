// backends: the program format a backend runs — a flat list of kernel calls over numbered buffer
// slots. The compiler (actors/) lowers IR to this; backends never see IR.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "axle/backends/float_functions.h"
#include "axle/engine/dtype.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/reduce_type.h"
#include "axle/engine/shape.h"

namespace axle {

/// The kernels a backend implements. Attribute layout per kernel (KernelCall::ints / reals):
///
/// Elementwise. Operands broadcast to the output shape as in NumPy (each input's dims align
/// with the output's trailing dims; a dim of 1 repeats). Arithmetic operands share the output's
/// dtype (the tracer inserts casts); comparisons and logical ops output bool.
///   kAdd kSub kMul kDiv kPow kMaximum kMinimum       [a, b]
///   kEq kNe kLt kLe kGt kGe                         [a, b] -> bool
///   kLogicalAnd kLogicalOr                          [a, b] (bool) -> bool
///   kWhere                                          [cond (bool), a, b]
///   kNeg kRelu kAbs kLogicalNot                     [x]
///   the float functions (AXLE_FLOAT_FUNCTIONS)      [x], floating dtypes
///   kGelu                                           [x]; ints = [approximate: 0 erf, 1 tanh]
///   kGeluBackward                                   [grad, x], both of the output's shape;
///                ints = [approximate]: grad times gelu's derivative at x (PyTorch's
///                gelu_backward), computed in f32 for bf16 and rounded once
///   kCast                                           [x] -> output slot's dtype
///   kFill        []; reals = [value]                output filled with value
///   kIota        []; reals = [start, step]          1-d output, out[i] = start + i * step
/// Reductions. ints = [keepdim, d0, d1, ...] (dims sorted ascending, non-negative, unique); the
/// output slot's shape already reflects keepdim.
///   kSum kMean kReduceMax kReduceMin kLogSumExp     [x]
///   kArgMax                                         [x]; ints = [keepdim, dim] -> s64
///   kSoftmax kLogSoftmax                            [x]; ints = [dim]
///   kLayerNorm   [x]; ints = [k]; reals = [eps]: layer_norm's normalisation (no weight or bias)
///   over
///                the last k dims, (x - mean) / sqrt(var + eps) with the biased variance
///   kLayerNormBackward [grad, x (both the output's shape)]; ints = [k]; reals = [eps]: the
///                gradient of kLayerNorm's input given its output's, rstd (grad - mean(grad) -
///                xhat mean(grad xhat)) per row. With ints = [k, folded] (f32 only, lowering's
///                call folding), folded's kLayerNormFoldedWeight bit adds a third operand w, one
///                value per row element, and the gradient read is grad * w (rounded as a mul
///                would); its kLayerNormFoldedResidual bit adds a last operand r of the output's
///                shape, and the output is r + the gradient (added as an add would)
///   kCumsum      [x]; ints = [dim, reverse]: out[..., i, ...] is the sum of x[..., j, ...] over
///                j <= i (j >= i when reverse), accumulated in f64 for floating dtypes (s64 for
///                integers); output has x's shape and dtype
///   kTopK        [x]; ints = [dim, k, largest]: s64 indices along dim of the k largest (smallest)
///                elements, best first; equal values in index order; NaN counts as larger than
///                any number. Output is x's shape with dim of size k
/// Optimization barrier (torch_xla's xm.optimization_barrier_; one call per value it passes).
///   kOptimizationBarrier [x0, x1, ...]; ints = [i]: output is x_i (its shape and dtype), bit for
///                bit; the other operands are only waited for. The compiler passes see through
///                none of it: a barrier's output is never merged with, folded into or fused with
///                what computed its operands
///
/// Attention (torch.nn.functional.scaled_dot_product_attention, computed block by block: the
/// scores of one block of queries and one block of keys at a time, softmax online). q is
/// [..., L, E], k [..., S, E], v [..., S, Ev], all of one dtype (f32, f64 or bf16; the outputs
/// have it too, or f32 for bf16 operands, which are computed in f32); batch dims broadcast to the
/// output's. ints = [is_causal, mask: 0 none, 1 bool (keeps where true), 2 added]; reals =
/// [scale]. With a mask, it is the last operand and broadcasts to [batch..., L, S] (bool, or the
/// operands' dtype). is_causal keeps key j <= query i. A row that keeps no key has NaN outputs
/// and a logsumexp of -inf.
///   kScaledDotProductAttention [q, k, v (, mask)] -> [batch..., L, Ev + 1]: per query, its
///                Ev outputs, then the logsumexp of its scaled, masked scores (what the backward
///                recomputes the softmax from)
///   kScaledDotProductAttentionBackward [q, k, v, forward output, grad (batch..., L, Ev), in
///                q's dtype (, mask)] -> [batch..., L + 2 S, max(E, Ev)]: per batch entry the
///                rows of the gradients of q, then k, then v, each row padded with zeros. The
///                forward output has the result's dtype, or is f32 for bf16 operands and a bf16
///                result (each gradient rounded once from its f32 sum)
///   Views (call folding): ints[2], when present, has a bit per operand read through a view
///                (kAttentionViewQ, K, V, and the backward's Grad) and kAttentionViewOutput for
///                the backward writing its gradients through one; for each bit, in that order,
///                its ints follow. An operand's view is [rows, cols, offset, stride0, stride1,
///                row stride]: the operand is read as [batch0, batch1, rows, cols] with element
///                (b0, b1, r, c) at offset + b0 stride0 + b1 stride1 + r row_stride + c of its
///                buffer (q, k and v of a [B, T, 3 H D] projection read in place). The output's
///                view is [offset, stride0, stride1, row stride] for dq, dk and dv in turn (12
///                ints), written so, unpadded, without overlapping; the forward operand then
///                gives the batch
/// Linear algebra and convolution.
///   kMatmul      [a, b (, bias) (, x | r)]; ints = [transpose_a, transpose_b (, bf16_as_f32 (,
///                gelu_backward (, residual (, relu_backward (, relu)))))]. a is
///                [..., M, K] (or [..., K, M] when transposed), b is [..., K, N] (or [..., N, K]);
///                batch dims broadcast; both operands have rank >= 2. bias (the operands' dtype:
///                f32, f64 or bf16; N values, [N] or 1s before N) is added to each output row,
///                as matmul(a, b) + bias computes it; a bf16 output is rounded once, after the
///                add. A bf16 product's a and b may also be f32: each is rounded to bf16 as it
///                is read, as a cast to bf16 would round it (lowering folds such casts so).
///                With bf16_as_f32 = 1, bf16 operands give an f32 output holding the values
///                a bf16 output would (lowering folds a cast of the product so). With
///                gelu_backward = 1 (f32 or bf16, not with bf16_as_f32), the last operand x has
///                the output's dtype and shape and the output is gelu_backward(product, x) as
///                kGeluBackward gives it from the stored product (lowering folds it so). With
///                residual = 1 (with bf16_as_f32, not with gelu_backward), the last operand r
///                (f32, the output's shape) is added: the output is r + the f32 output's value
///                (lowering folds a residual connection's add so). With relu_backward = 1 (f32
///                or bf16, with neither of the two before nor bf16_as_f32), the last operand x
///                has the output's dtype and shape and the output is where(x > 0, product, 0)
///                (+0 where x is not above 0; lowering folds relu's backward of a product so).
///                With relu = 1 (f32 or bf16, none of the flags before), the output is relu of
///                the product (after the bias), as kRelu gives it (lowering folds a linear
///                layer's relu so)
///   kConv2d      [x (N, C, H, W), w (O, C / groups, KH, KW) (, b (O values): f32 or f64, added
///                to each output plane, as conv2d(x, w) + b computes it)];
///                ints = [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups
///                (, layout)]. layout (groups 1 only) has bit 1 set when x's buffer holds it with
///                dims 0 and 1 swapped ([C, N, H, W]), bit 2 for w, bit 4 for the output: the
///                compiler folds the transposes of a weight gradient
///                (actors/compiler/call_folding.h)
///   kConvTranspose2d [x (N, C, H, W), w (C, O / groups, KH, KW)]; ints = [stride_h, stride_w,
///                pad_h, pad_w, dilation_h, dilation_w, groups]; the adjoint of kConv2d (its
///                input's gradient): out [N, O, OH, OW] gets x[n, c, y, x] * w[c, o, i, j] at
///                (y * stride_h - pad_h + i * dilation_h, x * stride_w - pad_w + j * dilation_w);
///                OH and OW (the output's shape) add torch's output_padding
///   kMaxPool2d   [x (N, C, H, W)]; ints = [kh, kw, stride_h, stride_w, pad_h, pad_w,
///                dilation_h, dilation_w, ceil_mode (, relu_first)]; padding counts as
///                -infinity; with relu_first 1, pools relu(x) (a folded relu)
///   kAvgPool2d   [x]; ints = [kh, kw, stride_h, stride_w, pad_h, pad_w, ceil_mode,
///                count_include_pad]
/// Data movement.
///   kCopy        [x] -> same number of elements, any shape (reshape of contiguous data)
///   kPermute     [x]; ints = permutation (output dim i is input dim ints[i]) (, row): with
///                row, the permuted value is the first columns of x's rows of `row` elements (a
///                folded slice of x's last dim), and an f32 x may give a bf16 output, each value
///                rounded as kCast rounds it (a folded cast)
///   kExpand      [x] -> broadcast to the output shape (NumPy rules)
///   kSlice       [x]; ints = [dim, start, step] (output shape gives the length)
///   kConcat      [x0, x1, ...]; ints = [dim]
///   kIndexSelect [x, index (s32/s64, 1-d)]; ints = [dim]
///   kGather      [x, index (s32/s64, same rank as x)]; ints = [dim]   (torch.gather)
///   kOneHot      [index (s32/s64)]; ints = [num_classes]; output has one more trailing dim
///   kScatterAdd  [base, index (s32/s64), src (the index's shape)]; ints = [dim]; the output is
///                base (its shape) with src[i] added at i with dim i replaced by index[i]
///                (torch.scatter_add; index dims other than dim fit in base's)
/// Gradients of pooling (autograd). ints are the forward's; the output is the input's shape.
///   kMaxPool2dBackward [x, grad_out]: grad_out goes to the max of each window (as the forward
///                picks it: the first maximum, or the last NaN), summed where windows overlap
///   kAvgPool2dBackward [grad_out]: grad_out divided by the forward's divisor, spread over each
///                window's in-bounds elements
/// Random numbers (counter-based Philox 4x32-10; the same seed and offset give the same bits on
/// any device). seed and offset are s64 scalars, so a new step never recompiles.
///   kRandUniform [seed, offset]; reals = [low, high]     uniform in [low, high)
///   kRandNormal  [seed, offset]; reals = [mean, std]
///   kRandInt     [seed, offset]; ints = [low, high]       uniform integers in [low, high)
///   kBernoulli   [seed, offset, p (same shape as output or scalar)]
/// Collectives among replicas (each replica's device runs the same program). A backend's run stops
/// at a collective call (ProgramRun::advance) and its device actor completes it with the other
/// members (Backend::collective). Groups: ints carry [group_size, the groups' ordinals...], every
/// group the same size, together covering each replica once; a replica's group is the one holding
/// its ordinal, and a member's position is its place in that group. reduce is a ReduceType
/// (engine/reduce_type.h).
///   kAllReduce        [x]; ints = [reduce, group_size, groups...]; reals = [scale]
///   kAllGather        [x]; ints = [dim, group_size, groups...]: the members' operands
///                     concatenated along dim in group order
///   kReduceScatter    [x]; ints = [reduce, scatter_dim, group_size, groups...]; reals = [scale]:
///                     member p gets block p (of group_size along scatter_dim) of the reduction
///   kAllToAll         [x]; ints = [split_dim, concat_dim, group_size, groups...]: member p gets
///                     block p (along split_dim) of each member's operand, concatenated along
///                     concat_dim in group order
///   kCollectivePermute [x]; ints = [world_size, source0, target0, source1, target1, ...]: a
///                     replica gets its source's operand, or zeros when no pair targets it
/// Fusion (a chain of elementwise ops computed block by block, intermediates never stored).
///   kFused       [e0, e1, ...] external operands, each broadcasting to the chain's shape, all of
///                the output's dtype (f32, f64 or bf16), or all f32 with a bf16 output: an f32
///                chain whose result is rounded to bf16 as it is stored (a cast ends it). ints =
///                [buffers, then five per step: kernel, destination, a, b, attribute, then
///                optionally a reduction]. Steps run in order over each block of the chain's
///                elements; kernel is one of kAdd kSub kMul kDiv kPow kMaximum kMinimum
///                kGeluBackward kNeg kAbs kRelu kGelu and the float functions (see
///                fused_step_arity); destination is a scratch buffer in [0, buffers), or -1 for the
///                output (the last step, only, and only without a reduction); an operand >= 0 is an
///                external operand, < 0 the scratch buffer -operand - 1 (b is ignored by unary
///                steps); attribute is gelu's (and gelu_backward's) approximate flag, else 0.
///                Without a reduction the chain's shape is the output's. The reduction, last:
///                [kernel, -1, a, rank, the chain's shape (rank dims), keepdim, reduced dims...],
///                kernel one of kSum kMean kReduceMax kReduceMin (see fused_reduction); it folds
///                operand a of each block into the output, which is what that reduction kernel
///                gives for a tensor of the chain's shape holding a, keepdim and dims as its ints
///                say. The reduced dims must be adjacent once the chain's size-1 dims are left out,
///                or surround one run of kept dims (see fusible_reduction_dims).
enum class Kernel : uint16_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr,
  kWhere,
  kNeg,
  kRelu,
  kGelu,
  kAbs,
  kLogicalNot,
  kCast,
  kFill,
  kIota,
  kSum,
  kMean,
  kReduceMax,
  kReduceMin,
  kLogSumExp,
  kArgMax,
  kSoftmax,
  kLogSoftmax,
  kMatmul,
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kCopy,
  kPermute,
  kExpand,
  kSlice,
  kConcat,
  kIndexSelect,
  kGather,
  kOneHot,
  kRandUniform,
  kRandNormal,
  kRandInt,
  kBernoulli,
  kScatterAdd,
  kMaxPool2dBackward,
  kAvgPool2dBackward,
  // Kernels added later go here, before kFused: a kFused call's ints hold its steps' kernels by
  // number, and programs in the persistent cache keep those numbers.
  kCumsum,
  kTopK,
  kOptimizationBarrier,
  kScaledDotProductAttention,
  kScaledDotProductAttentionBackward,
  kGeluBackward,
  kLayerNorm,
  kLayerNormBackward,
  kConvTranspose2d,
  kFused,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
#define AXLE_FLOAT_FUNCTION_KERNEL(name, str) k##name,
  AXLE_FLOAT_FUNCTIONS(AXLE_FLOAT_FUNCTION_KERNEL)
#undef AXLE_FLOAT_FUNCTION_KERNEL
      kCount
};

/// kLayerNormBackward's folded operands (ints[1]), see above.
inline constexpr int64_t kLayerNormFoldedWeight = 1, kLayerNormFoldedResidual = 2;
/// Attention's views (ints[2]), see above.
inline constexpr int64_t kAttentionViewQ = 1, kAttentionViewK = 2, kAttentionViewV = 4,
                         kAttentionViewGrad = 8, kAttentionViewOutput = 16;

/// The number of operands of `kernel` as a kFused step (1 or 2), or 0 when it cannot be one.
[[nodiscard]] int fused_step_arity(Kernel kernel) noexcept;

/// Whether `kernel` can end a kFused call as its reduction: kSum kMean kReduceMax kReduceMin.
[[nodiscard]] bool fused_reduction(Kernel kernel) noexcept;

/// Whether a kFused call can end in reducing `shape` over `dims` (sorted, unique, in range): once
/// size-1 dims are left out, the reduced dims are adjacent, so every output's terms lie in one
/// contiguous run or one evenly strided column of the chain; or they are the dims before and
/// after one run of kept dims (a per-channel statistic over [N, C, H, W]), so every output's
/// terms lie in evenly strided runs.
[[nodiscard]] bool fusible_reduction_dims(const Shape& shape,
                                          std::span<const int64_t> dims) noexcept;

/// Lower-case name of a kernel ("add", "matmul"), for dumps and errors.
[[nodiscard]] std::string_view kernel_name(Kernel kernel) noexcept;

/// A hash of every kernel's name in order: stored programs name their kernels, but a kFused
/// call's steps hold kernel numbers, which a build with another kernel table reads otherwise.
[[nodiscard]] uint64_t kernel_table_fingerprint() noexcept;

/// Type and shape of one buffer slot.
struct BufferDesc {
  DType dtype;
  Shape shape;
  [[nodiscard]] std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  }
  friend bool operator==(const BufferDesc&, const BufferDesc&) = default;
};

/// One kernel invocation: reads the input slots, writes the output slot.
struct KernelCall {
  Kernel kernel;
  std::vector<int32_t> inputs;
  int32_t output = -1;
  std::vector<int64_t> ints;
  std::vector<double> reals;
  friend bool operator==(const KernelCall&, const KernelCall&) = default;
};

/// Whether `kernel` is a collective: a backend's run stops at it (see ProgramRun).
[[nodiscard]] constexpr bool is_collective(Kernel kernel) noexcept {
  return kernel >= Kernel::kAllReduce && kernel <= Kernel::kCollectivePermute;
}

/// The first int of a collective call's group description ([group_size, groups...]), or -1 for
/// kCollectivePermute, which has pairs instead.
[[nodiscard]] int collective_groups_at(Kernel kernel) noexcept;

/// The members of `replica`'s group in a collective call (all replicas for kCollectivePermute,
/// whose pairs may join any two), in group order; empty when no group holds it.
[[nodiscard]] std::vector<int> collective_members(const KernelCall& call, int replica);

/// Whether `call` may write its output over its operand at position `operand` (of the output's
/// shape and dtype): it reads each element of that operand only before writing the same element
/// of the output. True for every operand of elementwise kernels and kFused calls without a
/// reduction; for scatter_add's base (position 0) when no other position reads the same slot.
[[nodiscard]] bool writes_in_place_safely(const KernelCall& call, std::size_t operand) noexcept;

/// When a program's buffers are released and reused (made by actors/compiler/memory_plan.cpp).
/// Without a plan (no release lists), a backend keeps every buffer until the program ends.
struct MemoryPlan {
  /// Slots whose buffers go back to the backend's pool after call i runs:
  /// release_slots[release_begin[i] .. release_begin[i + 1]).
  std::vector<uint32_t> release_begin;
  std::vector<int32_t> release_slots;
  /// Per call: a slot dying at that call whose buffer the call's output takes over (the call
  /// writes in place; only elementwise kernels whose operand has the output's shape and dtype),
  /// or -1.
  std::vector<int32_t> in_place;
  /// The most bytes the program holds at once, inputs and outputs included, when run by a
  /// backend that reuses a released buffer only for a slot of the same size.
  uint64_t peak_bytes = 0;

  [[nodiscard]] bool empty() const noexcept { return release_begin.empty(); }
};

/// A compiled program: buffer slots, which of them the caller provides and receives, and the
/// kernel calls in execution order.
///
/// The persistent compile cache stores every field of Executable, KernelCall and BufferDesc
/// (actors/compiler/persistent_cache.cpp): a field added here is added there too.
struct Executable : RefCounted {
  std::vector<BufferDesc> slots;
  std::vector<int32_t> input_slots;   ///< bound to the caller's input buffers, in order
  std::vector<int32_t> output_slots;  ///< handed back to the caller, in order
  std::vector<KernelCall> calls;
  MemoryPlan plan;
  /// Per input, 1 when the caller donates its buffer: the program may release it after its last
  /// reader and write over it (empty: no input is donated).
  std::vector<uint8_t> donated_inputs;
  uint64_t graph_hash = 0;
  /// An SPMD program: every device of a mesh runs it on its own shards
  /// (actors/host/spmd_runtime.h). Backends never read this; the runtime feeds and binds the shards
  /// by it.
  struct Spmd {
    int64_t devices = 0;           ///< the mesh's devices; 0: not an SPMD program
    int32_t partition_input = -1;  ///< the input fed each device's position, or -1
    /// Per input and per output of the global program: its sharding as a key of the graph
    /// layer's intern_sharding, or -1 for replicated.
    std::vector<int64_t> input_shardings;
    std::vector<int64_t> output_shardings;
    std::vector<Shape> output_shard_shapes;  ///< each output's shard, the same on every device
    int64_t collective_bytes = 0;            ///< the partitioner's estimate per device
  };
  Spmd spmd;

  [[nodiscard]] bool donated(std::size_t input) const noexcept {
    return input < donated_inputs.size() && donated_inputs[input] != 0;
  }
};

/// Why `program` is not safe to hand to a backend, or empty when it is: every dtype and kernel is
/// known, dims are non-negative and sizes fit in memory, slot indices are in range, each call
/// reads only slots already bound or written and never writes its own input, and every output
/// slot is written. For programs from outside the compiler (the persistent cache); the kernels
/// check their own shapes and attributes.
[[nodiscard]] std::string program_error(const Executable& program);

/// A call of `program` as errors name it: "matmul(f32[2,3], f32[3,4]) -> f32[2,4]".
[[nodiscard]] std::string describe_call(const Executable& program, const KernelCall& call);

}  // namespace axle
