// graph/passes: the SPMD partitioner's insides, shared by its files (partitioner.cpp: the sweep,
// emitting and resharding; partitioner_layout.cpp: layouts; partitioner_rules.cpp,
// partitioner_reductions.cpp, partitioner_products.cpp: the rules of the op families). The
// public entry points are partition() and spmd_text() in passes.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "axle/engine/reduce_type.h"
#include "axle/graph/passes/passes.h"

namespace axle::spmd_partitioning {

// What choosing between ways to partition an op charges each collective on top of the bytes it
// moves (its latency, in bytes' worth): of two ways that move as much, the one with fewer
// collectives wins.
inline constexpr int64_t kCollectiveLatencyBytes = 1024;

// A value's layout over the devices: tiles per dimension and, per device, the tile it holds.
// Devices with equal coordinates hold the same data (replicas).
// Coordinates are one flat array, device-major: each instruction's layout is two allocations.
struct Layout {
  std::vector<int64_t> tiles;
  std::vector<int64_t> coords;  // [device * rank + dim]
  int64_t devices = 0;

  [[nodiscard]] int rank() const noexcept { return static_cast<int>(tiles.size()); }
  [[nodiscard]] bool sharded(int dim) const noexcept { return tiles[dim] > 1; }
  [[nodiscard]] int64_t at(int64_t device, int dim) const noexcept {
    return coords[static_cast<std::size_t>(device * rank() + dim)];
  }
  [[nodiscard]] int64_t& at(int64_t device, int dim) noexcept {
    return coords[static_cast<std::size_t>(device * rank() + dim)];
  }
  /// Device `device`'s coordinates.
  [[nodiscard]] std::span<const int64_t> of(int64_t device) const noexcept {
    return {coords.data() + device * rank(), static_cast<std::size_t>(rank())};
  }
  friend bool operator==(const Layout&, const Layout&) = default;
};

Layout replicated(int rank, int64_t devices);

Layout layout_of(const ShardingSpec& sharding, int rank, int64_t devices);

// `layout` with `dims` no longer split.
Layout unsplit(Layout layout, std::initializer_list<int> dims);

Layout keep_only(const Layout& layout, const std::vector<bool>& keep);

// The layout an operand of shape `in` needs so that, broadcast NumPy-style to `out` (dims
// aligned at the end), each device holds what its tile of `layout` reads: a dimension that
// broadcasts (or that the operand lacks) is whole.
Layout project(const Layout& layout, const Shape& out, const Shape& in);

Shape local_shape(const Shape& global, const Layout& layout);

int64_t bytes_of(const Shape& shape, DType dtype);

// Groups of devices that differ only in their coordinates along `dims`: each holds one device
// per combination of those coordinates, ordered row-major by them; the devices of a group agree
// on every other coordinate. nullopt when the devices do not split so (some combination has more
// replicas than another).
std::optional<std::vector<std::vector<int64_t>>> groups_over(const Layout& layout,
                                                             std::span<const int> dims);

// A layout with one more dimension holding `extra` (per device, `extra_tiles` values): how a
// partial result is laid out, the extra dimension being the partial sums' index.
Layout with_extra(const Layout& layout, const std::vector<int64_t>& extra, int64_t extra_tiles);

// Dim `to_dim` of `to` split as dim `from_dim` of `from` (tiles and each device's coordinate).
void copy_dim(Layout& to, int to_dim, const Layout& from, int from_dim);

// Ops whose operands are laid out as their result (broadcast dims whole). The sharding
// annotation (kCustomSharding) is an identity whose result has the annotated sharding; the
// per-device program keeps it, and the lowering drops it.
bool laid_out_as_result(Op op);

// A local value of the per-device program and the global value it is a layout of.
struct Value {
  int32_t id = -1;
  Layout layout;
  Shape shape;  // global
  DType dtype = DType::kFloat32;
};

class Partitioner {
 public:
  Partitioner(const Program& global, std::span<const ShardingSpec> shardings, int64_t devices)
      : global_(global), shardings_(shardings), devices_(devices) {}

  PartitionedProgram run();

 private:
  std::string describe(int32_t id) const;
  [[noreturn]] void fail(int32_t id, std::string_view why) const;

  Value value_of(int32_t id) const;

  // ---- emitting (partitioner.cpp) ------------------------------------------------------------

  int32_t emit(Op op, DType dtype, const Shape& shape, std::span<const int32_t> operands,
               std::span<const int64_t> ints = {}, std::span<const double> reals = {});

  int32_t scalar(DType dtype, double value);

  int64_t group_key(const std::vector<std::vector<int64_t>>& groups);

  // The device's partition index, a leaf the runtime feeds, as an s64 [1] (made on first use).
  int32_t partition_index();

  // An s64 [1] holding values[device] on each device.
  int32_t per_device(const std::vector<int64_t>& values);

  // Global indices into a dim split in blocks of `length` (the device's block starts at
  // starts[device]) as indices into the device's block: `mask` says which fall in it, `safe` is
  // each such index, or 0 for the others (to be masked out after the lookup).
  struct BlockIndices {
    int32_t mask;
    int32_t safe;
  };
  BlockIndices block_indices(int32_t indices, DType index_dtype, const Shape& shape, int64_t length,
                             const std::vector<int64_t>& starts);

  // The device's block of `dim` (of `length` elements from offsets[device]).
  int32_t dynamic_slice(int32_t x, int dim, int64_t length, const std::vector<int64_t>& offsets);

  // ---- resharding ----------------------------------------------------------------------------

  // For layouts of the same tiles: a (source, target) pair for every device, the target holding
  // in `to` the tile the source holds in `from` (a device that keeps its tile is its own
  // source), each device a source once; none when some tile of `to` is held by no device.
  static std::optional<std::vector<std::pair<int64_t, int64_t>>> sources_of(const Layout& from,
                                                                            const Layout& to);

  // Brings `v` to layout `to`; with `emit_ops` false only returns what it would cost (bytes the
  // collectives bring to a device). The steps: the same tiles on other devices are one
  // collective_permute; a sharded dimension that moves to another
  // unsharded one with the same tiles on the same devices is one all_to_all; otherwise each
  // sharded dimension `to` splits differently is gathered (all_gather among the devices that
  // differ only along it), then each dimension `to` splits and the value does not is sliced
  // locally at the device's offset.
  int64_t reshard(Value& v, const Layout& to, bool emit_ops);
  // reshard's ways, each when it applies (nullopt otherwise): the same tiles on other devices
  // (collective_permute); a split moved to another dim on the same devices (all_to_all); and
  // the general way, each changed split gathered, then each new one sliced.
  std::optional<int64_t> reshard_by_permute(Value& v, const Layout& to, bool emit_ops);
  std::optional<int64_t> reshard_by_all_to_all(Value& v, const Layout& to, bool emit_ops);
  int64_t reshard_by_gather_and_slice(Value& v, const Layout& to, bool emit_ops);

  int64_t reshard_cost(int32_t global_id, const Layout& to);

  // Global operand `operand` as a local value laid out as `need`. Each layout of a value is made
  // once (q, k and v sliced from one gathered projection share the gather), so the collectives
  // and their bytes are counted as the program runs them.
  int32_t operand_as(int32_t operand, const Layout& need);

  // The instruction's result, computed locally (local value `id`) in layout `have`, brought to
  // the instruction's layout.
  int32_t finish(int32_t id, int32_t local, const Layout& have);

  // Sums (or max / min) of partial results across the devices of `groups`, each a local value of
  // `layout`'s shape. scatter_dim >= 0: reduce_scatter along it instead (member j keeps block j).
  int32_t combine(int32_t local, ReduceType type, double scale,
                  const std::vector<std::vector<int64_t>>& groups, int scatter_dim);

  // ---- ops -----------------------------------------------------------------------------------

  // The op of instruction `id` on local operands, with the local shape `shape`.
  int32_t local_op(int32_t id, std::span<const int32_t> operands, const Shape& shape);

  // Each operand laid out by `need(i)`, the op computed locally in layout `have`, then brought
  // to the instruction's layout.
  template <class Need>
  int32_t local_then_finish(int32_t id, const Layout& have, Need&& need) {
    const auto operands = global_.operands(id);
    std::vector<int32_t> locals;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      locals.push_back(operand_as(operands[i], need(i)));
    }
    const int32_t result = local_op(id, locals, local_shape(global_[id].shape, have));
    return finish(id, result, have);
  }

  // The local computation of global instruction `id`, by its op family's rule (the rules are in
  // partitioner_rules.cpp, partitioner_reductions.cpp and partitioner_products.cpp).
  int32_t lower(int32_t id);

  // The dims a reduction with ints [keepdim, dims...] keeps.
  static std::vector<int> kept_dims(int rank, std::span<const int64_t> ints);

  // logsumexp and argmax: along a split dim without gathering when it can (lower_split_*),
  // else the reduced dims gathered and the kept ones as the result's.
  int32_t lower_reduction_to_one(int32_t id);

  // gather and scatter_add: along a split dim without gathering when it can, else dims where the
  // index is shorter than x whole, and x whole along dim.
  int32_t lower_gather(int32_t id);

  // optimization_barrier: the operand it passes laid out as its result, the others as they are.
  int32_t lower_barrier(int32_t id);

  int32_t lower_iota(int32_t id);

  // An op computed locally with `dims` of its result whole on every device, its operands laid
  // out as its result.
  int32_t whole_along(int32_t id, std::initializer_list<int> dims);
  // softmax, log_softmax, cumsum, topk: split along their dim where that pays (the normalizer's
  // and the scan's own rules), else whole along it; layer_norm and its gradient: each row (the
  // last k dims) whole.
  int32_t lower_along_dim(int32_t id);
  // scaled_dot_product_attention and its backward op: the batch dims split, each row whole.
  int32_t lower_attention(int32_t id);
  int32_t lower_permute(int32_t id);
  int32_t lower_one_hot(int32_t id);

  // index_select (embedding lookups): the index split as the result's dim, x whole along dim;
  // or, when x is split along dim (a vocabulary-parallel table) and that moves fewer bytes,
  // each device looks up the rows it holds (zeros for the others) and an all_reduce sums them.
  int32_t lower_index_select(int32_t id);

  // softmax, log_softmax and logsumexp along dims the operand is split on (a vocabulary-parallel
  // cross entropy): each device's maximum, combined by all_reduce(max); its sum of exponentials
  // shifted by that maximum (by 0 where it is not finite, so a row of -inf gives -inf as
  // unpartitioned), combined by all_reduce(sum); logsumexp = log(sum) + shift, log_softmax =
  // x - logsumexp, softmax = exp(x - logsumexp). -1 when the operand is not split along them
  // (or its devices do not form groups over them): the caller gathers the dims instead.
  int32_t lower_split_normalizer(int32_t id);

  // `local` (a value split along `dim` over `groups`) gathered whole along it, in tile order.
  int32_t gather_along(int32_t local, int dim, const std::vector<std::vector<int64_t>>& groups);

  // argmax, cumsum and topk along a dim the operand is split on, without gathering the operand:
  //   argmax: each device's first maximum and its global position; both gathered (one entry per
  //     device, in tile order), the first maximum of those picks the position: the first
  //     maximum overall (a NaN counting as the maximum, as unpartitioned).
  //   cumsum: the local scan plus the sum of the shards before this one (after it, reversed),
  //     from each shard's total, gathered.
  //   topk: each device's top k (k within its shard) with their global positions, gathered; the
  //     top k of those (equal values keep their order: the lower position first, as
  //     unpartitioned) pick the positions.
  // -1 when the operand is not split along the dim, its devices do not form groups there, or
  // gathering the operand moves fewer bytes.
  int32_t lower_split_scan(int32_t id);
  int32_t scan_with_prefixes(int32_t id, int32_t x, const Layout& need, const Shape& picked, int d,
                             const std::vector<std::vector<int64_t>>& groups,
                             const std::vector<int64_t>& coords);

  // sum / mean / max / min with ints [keepdim, dims...]: reduced dims keep the operand's split
  // (when the devices form groups over it), reduced locally, then combined across each group
  // (all_reduce, or reduce_scatter into the result's split).
  int32_t lower_reduction(int32_t id);

  // matmul: a [..., M, K] @ b [..., K, N] (either transposed). When both operands are already
  // split alike along K, the partial products are summed. Otherwise three ways, the cheapest in
  // bytes moved (and collectives met) wins: operands laid out by the result (K whole), or K
  // split as a's (or b's) current split, with the partial products summed by all_reduce
  // (reduce_scatter when the result is split along a dim on the devices K was split on).
  int32_t lower_matmul(int32_t id);

  // A split of a dim that sums partial results (a contracting dim: matmul's K, a convolution's
  // input channels, the scattered rows of scatter_add): its tiles' coordinates on each device.
  struct Contraction {
    int64_t tiles = 1;
    std::vector<int64_t> coords;
    // The result's dim the sums can be reduce-scattered along (split on the same devices as the
    // contraction in `want`), or -1.
    int scatter_dim = -1;
  };
  Contraction contraction(const Layout& split, int dim, const Layout& want) const;
  static void split_as(Layout& layout, int dim, const Contraction& c);
  // What summing partial results of `bytes` (one device's) over groups of `g` costs.
  static int64_t sum_cost(int64_t bytes, int64_t g, bool scatter);
  // The layout the result of a partial sum has after combine(): `result`, or with the reduce-
  // scattered dim split as the contraction was.
  static Layout combined_layout(Layout result, const Contraction& c);

  // conv2d: the batch (x's dim 0) split, the output channels (the weight's dim 0) without groups;
  // or the input channels (dim 1 of both) split alike, as in a weight gradient (x^T and the
  // output's gradient, whose dim 1 is the batch): partial sums combined by all_reduce, or
  // reduce_scatter when the result is split on those devices. The cheaper way in bytes wins;
  // operands already split alike along the input channels are summed as they are (as matmul).
  int32_t lower_conv2d(int32_t id);

  // rand, randn, randint, bernoulli [seed, offset, p...]: element i of the result draws Philox
  // counter offset + i (row-major, backends/cpu/random.cpp), so a device whose tile is a run of
  // whole slices of the leading dim (the first of size > 1) draws just those counters, from
  // offset + the index of its first element: the unpartitioned values, computed once. The op's
  // other splits are sliced from that; with the leading dim whole every device draws it all.
  int32_t lower_random(int32_t id);

  // gather(x, dim, index) with x split along dim (topk's values, picked from a split operand):
  // each device picks the positions its shard holds (zeros for the others) and an all_reduce
  // sums the picks, as a vocabulary-parallel lookup; -1 when gathering x moves fewer bytes (or x
  // is not split there, or the index is).
  int32_t lower_split_gather(int32_t id);

  // scatter_add(x, dim, index, src) with the index (or src) split along `dim`, as an embedding's
  // gradient is (its rows are the batch's tokens): each device scatters its rows into zeros, the
  // partial results are summed by all_reduce (or reduce_scatter), and x is added once. -1 when
  // gathering the index and src along `dim` moves fewer bytes (or they are not split there).
  int32_t lower_split_scatter_add(int32_t id);

  // reshape: the dims fall into groups of equal element counts (in and out); a split carries
  // over on a group's major dim (its first of size > 1), which keeps each device's elements
  // one contiguous block. Any other split of the result is sliced after a local reshape.
  int32_t lower_reshape(int32_t id);

  const Program& global_;
  std::span<const ShardingSpec> shardings_;
  int64_t devices_;
  std::vector<Layout> layouts_;
  std::vector<int32_t> local_;
  Program out_;
  int32_t partition_ = -1;
  int32_t partition_vector_ = -1;
  std::map<std::vector<int64_t>, int32_t> tables_;
  std::map<std::vector<int64_t>, int32_t> resharded_;  // [operand, tiles..., coords...] -> local
  int64_t bytes_ = 0;
  std::vector<int32_t> origins_;  // by local instruction: the global one it was made for
};

}  // namespace axle::spmd_partitioning
