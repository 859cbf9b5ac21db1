// graph/passes: the SPMD partitioner, as XLA's (GSPMD): one sweep over the global program that
// gives each instruction its local computation on shards. Every value is tracked by its layout:
// tiles per dimension and each device's tile coordinates (a ShardingSpec spelled out per
// device). An op states the layouts it needs of its operands, derived from the layout its result
// must have; operands are resharded to them (slices need no communication, all_to_all moves a
// sharded dimension, all_gather undoes one), and a result computed in another layout, or as
// partial sums over devices, is brought to the instruction's sharding with all_reduce,
// reduce_scatter or a reshard. The rules, one per op family, are listed in graph/README.md.
// Longer than most files: every op family's rule builds on the one layout and resharding
// machinery above it, and they are read together.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/reduce_type.h"
#include "graph/collectives.h"
#include "graph/passes/passes.h"

namespace axle {
namespace {

// What choosing between ways to partition an op charges each collective on top of the bytes it
// moves (its latency, in bytes' worth): of two ways that move as much, the one with fewer
// collectives wins.
constexpr int64_t kCollectiveLatencyBytes = 1024;

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

Layout replicated(int rank, int64_t devices) {
  return Layout{std::vector<int64_t>(static_cast<std::size_t>(rank), 1),
                std::vector<int64_t>(static_cast<std::size_t>(rank * devices), 0), devices};
}

Layout layout_of(const ShardingSpec& sharding, int rank, int64_t devices) {
  Layout layout = replicated(rank, devices);
  if (sharding.is_replicated()) return layout;
  for (int d = 0; d < rank; ++d) layout.tiles[d] = sharding.tiles(d);
  // The tile assignment lists the devices row-major over tile_dims (the replicate dim last).
  const std::vector<int64_t>& tile_dims = sharding.tile_dims;
  for (std::size_t i = 0; i < sharding.devices.size(); ++i) {
    const int64_t device = sharding.devices[i];
    if (device < 0 || device >= devices) continue;  // the caller rejects these
    auto linear = static_cast<int64_t>(i);
    for (std::size_t d = tile_dims.size(); d-- > 0;) {
      if (static_cast<int>(d) < rank)
        layout.at(device, static_cast<int>(d)) = linear % tile_dims[d];
      linear /= tile_dims[d];
    }
  }
  return layout;
}

// `layout` with `dims` no longer split.
Layout unsplit(Layout layout, std::initializer_list<int> dims) {
  for (int d : dims) {
    if (d < 0 || d >= layout.rank()) continue;
    layout.tiles[d] = 1;
    for (int64_t p = 0; p < layout.devices; ++p) layout.at(p, d) = 0;
  }
  return layout;
}

Layout keep_only(const Layout& layout, const std::vector<bool>& keep) {
  Layout out = layout;
  for (int d = 0; d < out.rank(); ++d) {
    if (!keep[d]) out = unsplit(std::move(out), {d});
  }
  return out;
}

// The layout an operand of shape `in` needs so that, broadcast NumPy-style to `out` (dims
// aligned at the end), each device holds what its tile of `layout` reads: a dimension that
// broadcasts (or that the operand lacks) is whole.
Layout project(const Layout& layout, const Shape& out, const Shape& in) {
  const int64_t devices = layout.devices;
  Layout result = replicated(in.rank(), devices);
  const int shift = out.rank() - in.rank();
  for (int i = 0; i < in.rank(); ++i) {
    const int j = i + shift;
    if (j < 0 || in[i] != out[j] || !layout.sharded(j)) continue;
    result.tiles[i] = layout.tiles[j];
    for (int64_t p = 0; p < devices; ++p) result.at(p, i) = layout.at(p, j);
  }
  return result;
}

Shape local_shape(const Shape& global, const Layout& layout) {
  Shape shape = global;
  for (int d = 0; d < global.rank(); ++d) shape[d] = global[d] / layout.tiles[d];
  return shape;
}

int64_t bytes_of(const Shape& shape, DType dtype) {
  return shape.numel() * static_cast<int64_t>(dtype_size(dtype));
}

// Groups of devices that differ only in their coordinates along `dims`: each holds one device
// per combination of those coordinates, ordered row-major by them; the devices of a group agree
// on every other coordinate. nullopt when the devices do not split so (some combination has more
// replicas than another).
std::optional<std::vector<std::vector<int64_t>>> groups_over(const Layout& layout,
                                                             std::span<const int> dims) {
  int64_t combos = 1;
  for (int d : dims) combos *= layout.tiles[d];
  std::map<std::vector<int64_t>, std::vector<std::vector<int64_t>>> buckets;
  for (int64_t p = 0; p < layout.devices; ++p) {
    const auto coords = layout.of(p);
    std::vector<int64_t> key(coords.begin(), coords.end());
    int64_t combo = 0;
    for (int d : dims) {
      combo = combo * layout.tiles[d] + key[d];
      key[d] = -1;
    }
    auto& bucket = buckets[key];
    bucket.resize(static_cast<std::size_t>(combos));
    bucket[combo].push_back(p);
  }
  std::vector<std::vector<int64_t>> groups;
  for (const auto& [key, bucket] : buckets) {
    const std::size_t count = bucket[0].size();
    for (const auto& members : bucket) {
      if (members.size() != count || count == 0) return std::nullopt;
    }
    for (std::size_t j = 0; j < count; ++j) {
      std::vector<int64_t> group;
      for (const auto& members : bucket) group.push_back(members[j]);
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

// A layout with one more dimension holding `extra` (per device, `extra_tiles` values): how a
// partial result is laid out, the extra dimension being the partial sums' index.
Layout with_extra(const Layout& layout, const std::vector<int64_t>& extra, int64_t extra_tiles) {
  Layout out = replicated(layout.rank() + 1, layout.devices);
  for (int d = 0; d < layout.rank(); ++d) out.tiles[d] = layout.tiles[d];
  out.tiles.back() = extra_tiles;
  for (int64_t p = 0; p < layout.devices; ++p) {
    for (int d = 0; d < layout.rank(); ++d) out.at(p, d) = layout.at(p, d);
    out.at(p, layout.rank()) = extra[static_cast<std::size_t>(p)];
  }
  return out;
}

// Ops whose operands are laid out as their result (broadcast dims whole). The sharding
// annotation (kCustomSharding) is an identity whose result has the annotated sharding; the
// per-device program keeps it, and the lowering drops it.
bool laid_out_as_result(Op op) {
  return is_elementwise(op) || op == Op::kCustomSharding || op == Op::kExpand;
}

// A local value of the per-device program and the global value it is a layout of.
struct Value {
  int32_t id = -1;
  Layout layout;
  Shape shape;  // global
  DType dtype = DType::kF32;
};

class Partitioner {
 public:
  Partitioner(const Program& global, std::span<const ShardingSpec> shardings, int64_t devices)
      : global_(global), shardings_(shardings), devices_(devices) {}

  PartitionedProgram run() {
    if (devices_ < 1) {
      throw std::invalid_argument(
          fmt::format("partition: the mesh must have at least one device, not {}", devices_));
    }
    if (shardings_.size() != global_.size()) {
      throw std::invalid_argument(
          fmt::format("partition: got {} shardings for a program of {} instructions",
                      shardings_.size(), global_.size()));
    }
    layouts_.reserve(global_.size());
    for (std::size_t id = 0; id < global_.size(); ++id) {
      const ShardingSpec& sharding = shardings_[id];
      try {
        check_sharding(global_[id].shape, sharding, "partition");
      } catch (const std::exception& e) {
        fail(static_cast<int32_t>(id), e.what());
      }
      if (!sharding.is_replicated() && static_cast<int64_t>(sharding.devices.size()) != devices_) {
        throw std::invalid_argument(fmt::format(
            "partition: sharding {} of {} places {} devices; the mesh has {}", to_string(sharding),
            describe(static_cast<int32_t>(id)), sharding.devices.size(), devices_));
      }
      for (int64_t d : sharding.devices) {
        if (d < 0 || d >= devices_) {
          throw std::invalid_argument(
              fmt::format("partition: sharding {} of {} names device {}; the mesh has {}",
                          to_string(sharding), describe(static_cast<int32_t>(id)), d, devices_));
        }
      }
      layouts_.push_back(layout_of(sharding, global_[id].shape.rank(), devices_));
    }
    out_.reserve(global_.size() * 2);
    out_.num_inputs = global_.num_inputs;
    local_.assign(global_.size(), -1);
    origins_.reserve(global_.size() * 2);
    for (std::size_t id = 0; id < global_.size(); ++id) {
      local_[id] = lower(static_cast<int32_t>(id));
      origins_.resize(out_.size(), static_cast<int32_t>(id));
      if (!(out_[static_cast<std::size_t>(local_[id])].shape ==
            local_shape(global_[id].shape, layouts_[id]))) {
        throw std::logic_error(fmt::format("partition: {} came out as {} locally",
                                           describe(static_cast<int32_t>(id)),
                                           out_[local_[id]].shape.to_string()));
      }
    }
    PartitionedProgram result;
    for (int32_t output : global_.outputs) {
      out_.outputs.push_back(local_[output]);
      result.output_shardings.push_back(shardings_[output]);
    }
    result.input_shardings.assign(static_cast<std::size_t>(out_.num_inputs),
                                  ShardingSpec::replicated());
    for (std::size_t id = 0; id < global_.size(); ++id) {
      if (global_.is_leaf(id) && global_[id].input >= 0) {
        result.input_shardings[global_[id].input] = shardings_[id];
      }
    }
    result.partition_input = partition_ >= 0 ? out_[partition_].input : -1;
    result.collective_bytes = bytes_;
    origins_.resize(out_.size(), -1);
    result.origins = std::move(origins_);
    result.program = std::move(out_);
    return result;
  }

 private:
  std::string describe(int32_t id) const {
    return fmt::format("instruction %{} ({} {}{})", id, op_name(global_[id].op),
                       dtype_name(global_[id].dtype), global_[id].shape.to_string());
  }
  [[noreturn]] void fail(int32_t id, std::string_view why) const {
    throw std::invalid_argument(fmt::format("partition: {}: {}", describe(id), why));
  }

  Value value_of(int32_t id) const {
    return Value{local_[id], layouts_[id], global_[id].shape, global_[id].dtype};
  }

  // ---- emitting ------------------------------------------------------------------------------

  int32_t emit(Op op, DType dtype, const Shape& shape, std::span<const int32_t> operands,
               std::span<const int64_t> ints = {}, std::span<const double> reals = {}) {
    return out_.append(op, dtype, shape, operands, ints, reals);
  }

  int32_t scalar(DType dtype, double value) {
    return emit(Op::kFill, dtype, Shape{}, {}, {}, std::span<const double>(&value, 1));
  }

  int64_t group_key(const std::vector<std::vector<int64_t>>& groups) {
    std::vector<int64_t> encoded{static_cast<int64_t>(groups.front().size())};
    for (const auto& group : groups) encoded.insert(encoded.end(), group.begin(), group.end());
    return detail::intern_collective_group_ints(encoded);
  }

  // The device's partition index, a leaf the runtime feeds, as an s64 [1] (made on first use).
  int32_t partition_index() {
    if (partition_ < 0) {
      partition_ = out_.append(Op::kParameter, DType::kI64, Shape{}, {}, {}, {}, out_.num_inputs);
      ++out_.num_inputs;
      const int32_t operand[] = {partition_};
      partition_vector_ = emit(Op::kReshape, DType::kI64, Shape{1}, operand);
    }
    return partition_vector_;
  }

  // An s64 [1] holding values[device] on each device.
  int32_t per_device(const std::vector<int64_t>& values) {
    if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; })) {
      const double value = static_cast<double>(values[0]);
      return emit(Op::kFill, DType::kI64, Shape{1}, {}, {}, std::span<const double>(&value, 1));
    }
    if (auto it = tables_.find(values); it != tables_.end()) return it->second;
    std::vector<int32_t> entries;
    for (int64_t v : values) {
      const double value = static_cast<double>(v);
      entries.push_back(
          emit(Op::kFill, DType::kI64, Shape{1}, {}, {}, std::span<const double>(&value, 1)));
    }
    const int64_t zero[] = {0};
    const int32_t table =
        emit(Op::kConcat, DType::kI64, Shape{static_cast<int64_t>(values.size())}, entries, zero);
    const int32_t operands[] = {table, partition_index()};
    const int32_t picked = emit(Op::kIndexSelect, DType::kI64, Shape{1}, operands, zero);
    tables_.emplace(values, picked);
    return picked;
  }

  // Global indices into a dim split in blocks of `length` (the device's block starts at
  // starts[device]) as indices into the device's block: `mask` says which fall in it, `safe` is
  // each such index, or 0 for the others (to be masked out after the lookup).
  struct BlockIndices {
    int32_t mask;
    int32_t safe;
  };
  BlockIndices block_indices(int32_t indices, DType index_dtype, const Shape& shape,
                             int64_t length, const std::vector<int64_t>& starts) {
    int32_t start = per_device(starts);
    if (index_dtype != DType::kI64) {
      const int32_t operand[] = {start};
      start = emit(Op::kCast, index_dtype, Shape{1}, operand);
    }
    const int32_t shift[] = {indices, start};
    const int32_t local = emit(Op::kSub, index_dtype, shape, shift);
    const int32_t low[] = {local, scalar(index_dtype, 0)};
    const int32_t high[] = {local, scalar(index_dtype, static_cast<double>(length))};
    const int32_t in_range[] = {emit(Op::kGe, DType::kBool, shape, low),
                                emit(Op::kLt, DType::kBool, shape, high)};
    const int32_t mask = emit(Op::kLogicalAnd, DType::kBool, shape, in_range);
    const int32_t safe_operands[] = {mask, local, scalar(index_dtype, 0)};
    return {mask, emit(Op::kWhere, index_dtype, shape, safe_operands)};
  }

  // The device's block of `dim` (of `length` elements from offsets[device]).
  int32_t dynamic_slice(int32_t x, int dim, int64_t length, const std::vector<int64_t>& offsets) {
    const double iota[] = {0, 1};
    const int32_t range = emit(Op::kIota, DType::kI64, Shape{length}, {}, {}, iota);
    const int32_t sum[] = {range, per_device(offsets)};
    const int32_t index = emit(Op::kAdd, DType::kI64, Shape{length}, sum);
    Shape shape = out_[x].shape;
    shape[dim] = length;
    const int32_t operands[] = {x, index};
    const int64_t ints[] = {dim};
    return emit(Op::kIndexSelect, out_[x].dtype, shape, operands, ints);
  }

  // ---- resharding ----------------------------------------------------------------------------

  // For layouts of the same tiles: a (source, target) pair for every device, the target holding
  // in `to` the tile the source holds in `from` (a device that keeps its tile is its own
  // source), each device a source once; none when some tile of `to` is held by no device.
  static std::optional<std::vector<std::pair<int64_t, int64_t>>> sources_of(const Layout& from,
                                                                            const Layout& to) {
    std::vector<std::pair<int64_t, int64_t>> pairs;
    std::vector<bool> used(static_cast<std::size_t>(from.devices), false);
    const auto holds = [&](int64_t source, int64_t target) {
      return std::ranges::equal(from.of(source), to.of(target));
    };
    for (int64_t target = 0; target < to.devices; ++target) {
      int64_t source = -1;
      if (holds(target, target) && !used[static_cast<std::size_t>(target)]) {
        source = target;
      } else {
        for (int64_t d = 0; d < from.devices && source < 0; ++d) {
          // A device that keeps its own tile is left to itself.
          if (!used[static_cast<std::size_t>(d)] && holds(d, target) && !holds(d, d)) source = d;
        }
        for (int64_t d = 0; d < from.devices && source < 0; ++d) {
          if (!used[static_cast<std::size_t>(d)] && holds(d, target)) source = d;
        }
      }
      if (source < 0) return std::nullopt;
      used[static_cast<std::size_t>(source)] = true;
      pairs.emplace_back(source, target);
    }
    return pairs;
  }

  // Brings `v` to layout `to`; with `emit_ops` false only returns what it would cost (bytes the
  // collectives bring to a device). The steps: the same tiles on other devices are one
  // collective_permute; a sharded dimension that moves to another
  // unsharded one with the same tiles on the same devices is one all_to_all; otherwise each
  // sharded dimension `to` splits differently is gathered (all_gather among the devices that
  // differ only along it), then each dimension `to` splits and the value does not is sliced
  // locally at the device's offset.
  int64_t reshard(Value& v, const Layout& to, bool emit_ops) {
    int64_t cost = 0;
    if (v.layout == to) return cost;
    const int rank = to.rank();
    const int64_t elem = static_cast<int64_t>(dtype_size(v.dtype));
    Layout& cur = v.layout;
    // collective_permute: the same tiles, held by other devices. Each device receives its tile
    // from one that holds it: a tile's bytes, where gathering would bring (tiles - 1) of them.
    if (cur.tiles == to.tiles) {
      if (const auto pairs = sources_of(cur, to)) {
        const int64_t bytes = local_shape(v.shape, cur).numel() * elem;
        cost += bytes + kCollectiveLatencyBytes;
        if (emit_ops) {
          std::vector<int64_t> encoded{cur.devices};
          for (const auto& [source, target] : *pairs) {
            encoded.push_back(source);
            encoded.push_back(target);
          }
          const int64_t ints[] = {detail::intern_collective_group_ints(encoded)};
          const int32_t operand[] = {v.id};
          v.id = emit(Op::kCollectivePermute, v.dtype, out_[v.id].shape, operand, ints);
          bytes_ += bytes;
        }
        v.layout = to;
        return cost;
      }
    }
    // all_to_all: dim a split -> dim b split, same devices.
    for (int a = 0; a < rank; ++a) {
      for (int b = 0; b < rank; ++b) {
        if (a == b || !cur.sharded(a) || cur.sharded(b) || to.sharded(a) ||
            to.tiles[b] != cur.tiles[a] || v.shape[b] % to.tiles[b] != 0) {
          continue;
        }
        bool fits = true;
        for (int d = 0; d < rank && fits; ++d) {
          if (d != a && d != b && cur.tiles[d] != to.tiles[d]) fits = false;
        }
        for (int64_t p = 0; p < cur.devices && fits; ++p) {
          for (int d = 0; d < rank && fits; ++d) {
            if (d == a || d == b) continue;
            if (cur.at(p, d) != to.at(p, d)) fits = false;
          }
          if (to.at(p, b) != cur.at(p, a)) fits = false;
        }
        if (!fits) continue;
        const int dims[] = {a};
        const auto groups = groups_over(cur, dims);
        if (!groups) continue;
        const int64_t g = cur.tiles[a];
        const int64_t bytes = local_shape(v.shape, cur).numel() * elem;
        cost += bytes * (g - 1) / g + kCollectiveLatencyBytes;
        if (emit_ops) {
          Shape shape = out_[v.id].shape;
          shape[b] /= g;
          shape[a] *= g;
          const int64_t ints[] = {b, a, group_key(*groups)};
          const int32_t operand[] = {v.id};
          v.id = emit(Op::kAllToAll, v.dtype, shape, operand, ints);
          bytes_ += bytes * (g - 1) / g;
        }
        v.layout = to;
        return cost;
      }
    }
    for (int d = 0; d < rank; ++d) {
      if (!cur.sharded(d)) continue;
      bool same = cur.tiles[d] == to.tiles[d];
      for (int64_t p = 0; p < cur.devices && same; ++p) {
        same = cur.at(p, d) == to.at(p, d);
      }
      if (same) continue;
      const int dims[] = {d};
      const auto groups = groups_over(cur, dims);
      if (!groups) throw std::logic_error("partition: a layout does not split into groups");
      const int64_t g = cur.tiles[d];
      const int64_t bytes = local_shape(v.shape, cur).numel() * elem * (g - 1);
      cost += bytes + kCollectiveLatencyBytes;
      if (emit_ops) {
        Shape shape = out_[v.id].shape;
        shape[d] *= g;
        const int64_t ints[] = {d, group_key(*groups)};
        const int32_t operand[] = {v.id};
        v.id = emit(Op::kAllGather, v.dtype, shape, operand, ints);
        bytes_ += bytes;
      }
      cur = unsplit(std::move(cur), {d});
    }
    for (int d = 0; d < rank; ++d) {
      if (!to.sharded(d) || cur.sharded(d)) continue;
      const int64_t length = v.shape[d] / to.tiles[d];
      if (emit_ops) {
        std::vector<int64_t> offsets;
        for (int64_t p = 0; p < to.devices; ++p) offsets.push_back(to.at(p, d) * length);
        v.id = dynamic_slice(v.id, d, length, offsets);
      }
      cur.tiles[d] = to.tiles[d];
      for (int64_t p = 0; p < cur.devices; ++p) cur.at(p, d) = to.at(p, d);
    }
    return cost;
  }

  int64_t reshard_cost(int32_t global_id, const Layout& to) {
    Value v = value_of(global_id);
    return reshard(v, to, false);
  }

  // Global operand `operand` as a local value laid out as `need`. Each layout of a value is made
  // once (q, k and v sliced from one gathered projection share the gather), so the collectives
  // and their bytes are counted as the program runs them.
  int32_t operand_as(int32_t operand, const Layout& need) {
    if (need == layouts_[operand]) return local_[operand];
    std::vector<int64_t> key{operand};
    key.insert(key.end(), need.tiles.begin(), need.tiles.end());
    key.insert(key.end(), need.coords.begin(), need.coords.end());
    if (auto it = resharded_.find(key); it != resharded_.end()) return it->second;
    Value v = value_of(operand);
    reshard(v, need, true);
    resharded_.emplace(std::move(key), v.id);
    return v.id;
  }

  // The instruction's result, computed locally (local value `id`) in layout `have`, brought to
  // the instruction's layout.
  int32_t finish(int32_t id, int32_t local, const Layout& have) {
    Value v{local, have, global_[id].shape, global_[id].dtype};
    reshard(v, layouts_[id], true);
    return v.id;
  }

  // Sums (or max / min) of partial results across the devices of `groups`, each a local value of
  // `layout`'s shape. scatter_dim >= 0: reduce_scatter along it instead (member j keeps block j).
  int32_t combine(int32_t local, ReduceType type, double scale,
                  const std::vector<std::vector<int64_t>>& groups, int scatter_dim) {
    const int64_t g = static_cast<int64_t>(groups.front().size());
    const Program::Instr& instr = out_[local];
    const int64_t bytes = bytes_of(instr.shape, instr.dtype);
    const int32_t operand[] = {local};
    if (g == 1) {
      if (scale == 1.0) return local;
      const int32_t operands[] = {local, scalar(instr.dtype, scale)};
      return emit(Op::kMul, instr.dtype, instr.shape, operands);
    }
    const double reals[] = {scale};
    if (scatter_dim >= 0) {
      bytes_ += bytes * (g - 1) / g;
      Shape shape = instr.shape;
      shape[scatter_dim] /= g;
      const int64_t ints[] = {static_cast<int64_t>(type), scatter_dim, group_key(groups)};
      return emit(Op::kReduceScatter, instr.dtype, shape, operand, ints, reals);
    }
    bytes_ += 2 * bytes * (g - 1) / g;
    const int64_t ints[] = {static_cast<int64_t>(type), group_key(groups)};
    return emit(Op::kAllReduce, instr.dtype, instr.shape, operand, ints, reals);
  }

  // ---- ops -----------------------------------------------------------------------------------

  // The op of instruction `id` on local operands, with the local shape `shape`.
  int32_t local_op(int32_t id, std::span<const int32_t> operands, const Shape& shape) {
    return out_.append(global_[id].op, global_[id].dtype, shape, operands, global_.ints(id),
                       global_.reals(id), global_[id].input);
  }

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

  int32_t lower(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const Shape& shape = instr.shape;
    const auto operands = global_.operands(id);
    const auto ints = global_.ints(id);
    auto operand_shape = [&](std::size_t i) -> const Shape& { return global_[operands[i]].shape; };
    const int rank = shape.rank();

    if (laid_out_as_result(instr.op)) {
      return local_then_finish(
          id, want, [&](std::size_t i) { return project(want, shape, operand_shape(i)); });
    }
    switch (instr.op) {
      case Op::kDeviceData:
      case Op::kParameter:
      case Op::kConstant:
      case Op::kFill:
        return local_op(id, {}, local_shape(shape, want));
      case Op::kIota:
        return lower_iota(id);
      case Op::kSum:
      case Op::kMean:
      case Op::kReduceMax:
      case Op::kReduceMin:
        return lower_reduction(id);
      case Op::kLogSumExp:
      case Op::kArgMax: {
        if (instr.op == Op::kArgMax) {
          if (const int32_t split = lower_split_scan(id); split >= 0) return split;
        }
        if (instr.op == Op::kLogSumExp) {
          if (const int32_t split = lower_split_normalizer(id); split >= 0) return split;
        }
        // [keepdim, dims...]: the reduced dims whole, the kept ones as the result's.
        const Shape& in = operand_shape(0);
        Layout need = replicated(in.rank(), devices_);
        const std::vector<int> kept = kept_dims(in.rank(), ints);
        for (int j = 0, i = 0; i < in.rank(); ++i) {
          if (std::find(kept.begin(), kept.end(), i) == kept.end()) {
            if (ints[0]) ++j;
            continue;
          }
          copy_dim(need, i, want, j++);
        }
        return local_then_finish(id, want, [&](std::size_t) { return need; });
      }
      case Op::kSoftmax:
      case Op::kLogSoftmax:
      case Op::kCumsum:
      case Op::kTopK: {
        if (instr.op == Op::kSoftmax || instr.op == Op::kLogSoftmax) {
          if (const int32_t split = lower_split_normalizer(id); split >= 0) return split;
        } else if (const int32_t split = lower_split_scan(id); split >= 0) {
          return split;
        }
        const Layout have = unsplit(want, {static_cast<int>(ints[0])});
        return local_then_finish(id, have, [&](std::size_t) { return have; });
      }
      case Op::kMatmul:
        return lower_matmul(id);
      case Op::kReshape:
        return lower_reshape(id);
      case Op::kPermute: {
        Layout need = replicated(rank, devices_);
        for (int i = 0; i < rank; ++i) copy_dim(need, static_cast<int>(ints[i]), want, i);
        return local_then_finish(id, want, [&](std::size_t) { return need; });
      }
      case Op::kSlice:
      case Op::kConcat: {
        const Layout have = unsplit(want, {static_cast<int>(ints[0])});
        return local_then_finish(id, have, [&](std::size_t) { return have; });
      }
      case Op::kIndexSelect:
        return lower_index_select(id);
      case Op::kScatterAdd:
        if (const int32_t partial = lower_split_scatter_add(id); partial >= 0) return partial;
        [[fallthrough]];
      case Op::kGather: {
        if (instr.op == Op::kGather) {
          if (const int32_t masked = lower_split_gather(id); masked >= 0) return masked;
        }
        // Every operand has the result's rank; dims where the index is shorter than x stay
        // whole, and x stays whole along dim (the index may be split there for a gather).
        const int dim = static_cast<int>(ints[0]);
        const Shape& x = operand_shape(0);
        const Shape& index = operand_shape(1);
        std::vector<bool> keep(static_cast<std::size_t>(rank), true);
        for (int d = 0; d < rank; ++d) keep[d] = x[d] == index[d];
        if (instr.op == Op::kScatterAdd) keep[dim] = false;
        const Layout have = keep_only(want, keep);
        const Layout x_need = unsplit(have, {dim});
        return local_then_finish(id, have, [&](std::size_t i) { return i == 0 ? x_need : have; });
      }
      case Op::kOneHot: {
        const Layout have = unsplit(want, {rank - 1});
        Layout index = replicated(rank - 1, devices_);
        for (int d = 0; d + 1 < rank; ++d) copy_dim(index, d, have, d);
        return local_then_finish(id, have, [&](std::size_t) { return index; });
      }
      case Op::kConv2d:
        return lower_conv2d(id);
      case Op::kMaxPool2d:
      case Op::kAvgPool2d:
      case Op::kMaxPool2dBackward:
      case Op::kAvgPool2dBackward: {
        const Layout have = unsplit(want, {2, 3});
        return local_then_finish(id, have, [&](std::size_t) { return have; });
      }
      case Op::kScaledDotProductAttention:
      case Op::kScaledDotProductAttentionBackward: {
        // Batch dims split; each operand's batch dims (they broadcast) as the result's.
        const Layout have = unsplit(want, {rank - 2, rank - 1});
        return local_then_finish(
            id, have, [&](std::size_t i) { return project(have, shape, operand_shape(i)); });
      }
      case Op::kRandUniform:
      case Op::kRandNormal:
      case Op::kRandInt:
      case Op::kBernoulli:
        return lower_random(id);
      case Op::kOptimizationBarrier: {
        const std::size_t passed = static_cast<std::size_t>(ints[0]);
        std::vector<int32_t> locals;
        for (std::size_t i = 0; i < operands.size(); ++i) {
          locals.push_back(i == passed ? operand_as(operands[i], want) : local_[operands[i]]);
        }
        return local_op(id, locals, local_shape(shape, want));
      }
      case Op::kAllReduce:
      case Op::kAllGather:
      case Op::kReduceScatter:
      case Op::kAllToAll:
      case Op::kCollectivePermute:
        fail(id,
             "collectives among replicas do not go in an SPMD program (the partitioner "
             "inserts those the shardings need)");
      default:
        fail(id, "the partitioner has no rule for this op");
    }
  }

  static void copy_dim(Layout& to, int to_dim, const Layout& from, int from_dim) {
    to.tiles[to_dim] = from.tiles[from_dim];
    for (int64_t p = 0; p < to.devices; ++p) {
      to.at(p, to_dim) = from.at(p, from_dim);
    }
  }

  // The dims a reduction with ints [keepdim, dims...] keeps.
  static std::vector<int> kept_dims(int rank, std::span<const int64_t> ints) {
    std::vector<int> kept;
    for (int d = 0; d < rank; ++d) {
      if (std::find(ints.begin() + 1, ints.end(), d) == ints.end()) kept.push_back(d);
    }
    return kept;
  }

  int32_t lower_iota(int32_t id) {
    const Layout& want = layouts_[id];
    const Program::Instr& instr = global_[id];
    if (!want.sharded(0)) return local_op(id, {}, local_shape(instr.shape, want));
    // The global index of each local element (iota from 0 plus the shard's start), then
    // start + index * step in double, as the op computes it, rounded to the dtype once.
    const int64_t length = instr.shape[0] / want.tiles[0];
    const double iota[] = {0, 1};
    const Shape shape{length};
    const int32_t range = emit(Op::kIota, DType::kI64, shape, {}, {}, iota);
    std::vector<int64_t> offsets;
    for (int64_t p = 0; p < want.devices; ++p) offsets.push_back(want.at(p, 0) * length);
    const int32_t sum[] = {range, per_device(offsets)};
    int32_t index = emit(Op::kAdd, DType::kI64, shape, sum);
    const double start = global_.reals(id)[0];
    const double step = global_.reals(id)[1];
    if (instr.dtype == DType::kI64 && start == 0 && step == 1) return index;
    const int32_t as_double[] = {index};
    index = emit(Op::kCast, DType::kF64, shape, as_double);
    const int32_t scaled[] = {index, scalar(DType::kF64, step)};
    index = emit(Op::kMul, DType::kF64, shape, scaled);
    const int32_t shifted[] = {index, scalar(DType::kF64, start)};
    index = emit(Op::kAdd, DType::kF64, shape, shifted);
    const int32_t cast[] = {index};
    return emit(Op::kCast, instr.dtype, shape, cast);
  }

  // index_select (embedding lookups): the index split as the result's dim, x whole along dim;
  // or, when x is split along dim (a vocabulary-parallel table) and that moves fewer bytes,
  // each device looks up the rows it holds (zeros for the others) and an all_reduce sums them.
  int32_t lower_index_select(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const int dim = static_cast<int>(global_.ints(id)[0]);
    const int32_t x = global_.operands(id)[0];
    const int32_t index = global_.operands(id)[1];
    const Shape& xs = global_[x].shape;
    Layout index_need = replicated(1, devices_);
    copy_dim(index_need, 0, want, dim);
    const Layout x_whole = unsplit(want, {dim});
    const Layout& x_now = layouts_[x];
    if (x_now.sharded(dim)) {
      const int64_t k = x_now.tiles[dim];
      std::vector<int64_t> k_coords;
      for (int64_t p = 0; p < x_now.devices; ++p) k_coords.push_back(x_now.at(p, dim));
      const int extra[] = {instr.shape.rank()};
      const auto groups = groups_over(with_extra(want, k_coords, k), extra);
      Layout x_split = x_whole;
      x_split.tiles[dim] = k;
      for (int64_t p = 0; p < x_split.devices; ++p) x_split.at(p, dim) = k_coords[p];
      const int64_t out_bytes = bytes_of(local_shape(instr.shape, want), instr.dtype);
      if (groups &&
          reshard_cost(x, x_split) + 2 * out_bytes * (k - 1) / k + kCollectiveLatencyBytes <
              reshard_cost(x, x_whole)) {
        const int32_t table = operand_as(x, x_split);
        const int32_t rows = operand_as(index, index_need);
        const DType index_dtype = global_[index].dtype;
        const Shape rows_shape = out_[rows].shape;
        const int64_t length = xs[dim] / k;
        std::vector<int64_t> offsets;
        for (int64_t c : k_coords) offsets.push_back(c * length);
        const auto [mask, safe] = block_indices(rows, index_dtype, rows_shape, length, offsets);
        const Shape shape = local_shape(instr.shape, want);
        const int32_t lookup[] = {table, safe};
        const int32_t picked = local_op(id, lookup, shape);
        Shape mask_shape = shape;
        for (int d = 0; d < mask_shape.rank(); ++d) mask_shape[d] = d == dim ? shape[d] : 1;
        const int32_t mask_operand[] = {mask};
        const int32_t mask_b = emit(Op::kReshape, DType::kBool, mask_shape, mask_operand);
        const int32_t kept[] = {mask_b, picked, scalar(instr.dtype, 0)};
        const int32_t masked = emit(Op::kWhere, instr.dtype, shape, kept);
        return combine(masked, ReduceType::kSum, 1.0, *groups, -1);
      }
    }
    const int32_t locals[] = {operand_as(x, x_whole), operand_as(index, index_need)};
    return local_op(id, locals, local_shape(instr.shape, want));
  }

  // softmax, log_softmax and logsumexp along dims the operand is split on (a vocabulary-parallel
  // cross entropy): each device's maximum, combined by all_reduce(max); its sum of exponentials
  // shifted by that maximum (by 0 where it is not finite, so a row of -inf gives -inf as
  // unpartitioned), combined by all_reduce(sum); logsumexp = log(sum) + shift, log_softmax =
  // x - logsumexp, softmax = exp(x - logsumexp). -1 when the operand is not split along them
  // (or its devices do not form groups over them): the caller gathers the dims instead.
  int32_t lower_split_normalizer(int32_t id) {
    const Program::Instr& instr = global_[id];
    if (!is_floating(instr.dtype)) return -1;
    const Layout& want = layouts_[id];
    const int32_t operand = global_.operands(id)[0];
    const Shape& in = global_[operand].shape;
    const auto ints = global_.ints(id);
    const bool logsumexp = instr.op == Op::kLogSumExp;
    const bool keepdim = !logsumexp || ints[0] != 0;
    std::vector<int64_t> dims;
    if (logsumexp) {
      dims.assign(ints.begin() + 1, ints.end());
    } else {
      dims.push_back(ints[0]);
    }
    const Layout& current = layouts_[operand];
    Layout need = replicated(in.rank(), devices_);
    std::vector<int> split;
    for (int j = 0, i = 0; i < in.rank(); ++i) {
      if (std::find(dims.begin(), dims.end(), i) == dims.end()) {
        copy_dim(need, i, want, j++);
        continue;
      }
      if (keepdim) ++j;
      if (current.sharded(i)) {
        copy_dim(need, i, current, i);
        split.push_back(i);
      }
    }
    if (split.empty()) return -1;
    const auto groups = groups_over(need, split);
    if (!groups) return -1;
    const DType dtype = instr.dtype;
    const int32_t x = operand_as(operand, need);
    const Shape shape = out_[x].shape;
    Shape reduced = shape;
    std::vector<int64_t> reduce_ints{1};
    for (int64_t d : dims) {
      reduced[static_cast<int>(d)] = 1;
      reduce_ints.push_back(d);
    }
    std::sort(reduce_ints.begin() + 1, reduce_ints.end());
    const int32_t x_operand[] = {x};
    const int32_t local_max = emit(Op::kReduceMax, dtype, reduced, x_operand, reduce_ints);
    const int32_t max = combine(local_max, ReduceType::kMax, 1.0, *groups, -1);
    const int32_t zero = scalar(dtype, 0);
    const int32_t max_twice[] = {max, max};
    const int32_t difference = emit(Op::kSub, dtype, reduced, max_twice);
    const int32_t compare[] = {difference, zero};
    const int32_t finite = emit(Op::kEq, DType::kBool, reduced, compare);
    const int32_t pick[] = {finite, max, zero};
    const int32_t shift = emit(Op::kWhere, dtype, reduced, pick);
    const int32_t centre[] = {x, shift};
    const int32_t centred = emit(Op::kSub, dtype, shape, centre);
    const int32_t centred_operand[] = {centred};
    const int32_t exps = emit(Op::kExp, dtype, shape, centred_operand);
    const int32_t exps_operand[] = {exps};
    const int32_t local_sum = emit(Op::kSum, dtype, reduced, exps_operand, reduce_ints);
    const int32_t sum_operand[] = {combine(local_sum, ReduceType::kSum, 1.0, *groups, -1)};
    const int32_t log_sum = emit(Op::kLog, dtype, reduced, sum_operand);
    const int32_t add[] = {log_sum, shift};
    const int32_t lse = emit(Op::kAdd, dtype, reduced, add);
    if (logsumexp) {
      if (keepdim) return lse;
      const int32_t lse_operand[] = {lse};
      return emit(Op::kReshape, dtype, local_shape(instr.shape, want), lse_operand);
    }
    const int32_t subtract[] = {x, lse};
    int32_t result = emit(Op::kSub, dtype, shape, subtract);
    if (instr.op == Op::kSoftmax) {
      const int32_t result_operand[] = {result};
      result = emit(Op::kExp, dtype, shape, result_operand);
    }
    return finish(id, result, need);
  }

  // `local` (a value split along `dim` over `groups`) gathered whole along it, in tile order.
  int32_t gather_along(int32_t local, int dim, const std::vector<std::vector<int64_t>>& groups) {
    const Program::Instr& instr = out_[local];
    const auto g = static_cast<int64_t>(groups.front().size());
    bytes_ += bytes_of(instr.shape, instr.dtype) * (g - 1);
    Shape shape = instr.shape;
    shape[dim] *= g;
    const int64_t ints[] = {dim, group_key(groups)};
    const int32_t operand[] = {local};
    return emit(Op::kAllGather, instr.dtype, shape, operand, ints);
  }

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
  int32_t lower_split_scan(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const auto ints = global_.ints(id);
    const int32_t operand = global_.operands(id)[0];
    const Shape& in = global_[operand].shape;
    const DType dtype = global_[operand].dtype;
    const Layout& current = layouts_[operand];
    const bool argmax = instr.op == Op::kArgMax;
    if ((argmax && ints.size() != 2) || (!argmax && ints.size() < 2)) return -1;
    const int d = static_cast<int>(argmax ? ints[1] : ints[0]);
    if (d < 0 || d >= in.rank() || !current.sharded(d) || dtype == DType::kBool) return -1;
    const bool keepdim = argmax && ints[0] != 0;
    Layout need = replicated(in.rank(), devices_);
    if (argmax) {
      for (int j = 0, i = 0; i < in.rank(); ++i) {
        if (i != d) {
          copy_dim(need, i, want, j++);
        } else if (keepdim) {
          ++j;
        }
      }
    } else {
      need = unsplit(want, {d});
    }
    const Layout whole = need;  // the operand as the gathering way needs it
    copy_dim(need, d, current, d);
    const int dims[] = {d};
    const auto groups = groups_over(need, dims);
    if (!groups) return -1;
    const int64_t g = need.tiles[d];
    const int64_t length = in[d] / g;
    const int64_t k = instr.op == Op::kTopK ? ints[1] : 1;
    if (k < 1 || k > length) return -1;
    Shape picked = local_shape(in, need);  // k (or 1) entries along d
    picked[d] = k;
    const int64_t entries = picked.numel() * (g - 1);
    const int64_t cost =
        reshard_cost(operand, need) + 2 * kCollectiveLatencyBytes +
        entries * static_cast<int64_t>(dtype_size(dtype) + (instr.op == Op::kCumsum ? 0 : 8));
    if (cost >= reshard_cost(operand, whole)) return -1;
    std::vector<int64_t> starts;
    std::vector<int64_t> coords;
    for (int64_t p = 0; p < devices_; ++p) {
      coords.push_back(need.at(p, d));
      starts.push_back(need.at(p, d) * length);
    }
    const int32_t x[] = {operand_as(operand, need)};
    const Shape local = out_[x[0]].shape;
    const int64_t along[] = {d};
    const int64_t first_along[] = {1, d};  // argmax's [keepdim, dim]
    if (instr.op == Op::kCumsum) {
      const int32_t scanned = local_op(id, x, local);
      const int64_t sum_ints[] = {1, d};
      const int32_t totals = gather_along(emit(Op::kSum, dtype, picked, x, sum_ints), d, *groups);
      const double iota[] = {0, 1};
      const int32_t before[] = {emit(Op::kIota, DType::kI64, Shape{g}, {}, {}, iota),
                                per_device(coords)};
      const bool reverse = ints[1] != 0;
      const int32_t chosen[] = {emit(reverse ? Op::kGt : Op::kLt, DType::kBool, Shape{g}, before)};
      Shape mask_shape = local;
      for (int i = 0; i < mask_shape.rank(); ++i) mask_shape[i] = i == d ? g : 1;
      const int32_t masked[] = {emit(Op::kReshape, DType::kBool, mask_shape, chosen), totals,
                                scalar(dtype, 0)};
      const int32_t kept[] = {emit(Op::kWhere, dtype, out_[totals].shape, masked)};
      const int32_t add[] = {scanned, emit(Op::kSum, dtype, picked, kept, sum_ints)};
      return finish(id, emit(Op::kAdd, dtype, local, add), need);
    }
    const int32_t positions =
        argmax ? emit(Op::kArgMax, DType::kI64, picked, x, first_along) : local_op(id, x, picked);
    const int32_t at[] = {x[0], positions};
    const int32_t values = gather_along(emit(Op::kGather, dtype, picked, at, along), d, *groups);
    const int32_t shift[] = {positions, per_device(starts)};
    const int32_t global_positions =
        gather_along(emit(Op::kAdd, DType::kI64, picked, shift), d, *groups);
    Shape best_shape = out_[values].shape;
    best_shape[d] = k;
    const int32_t candidates[] = {values};
    const int32_t best = argmax
                             ? emit(Op::kArgMax, DType::kI64, best_shape, candidates, first_along)
                             : emit(Op::kTopK, DType::kI64, best_shape, candidates, ints);
    const int32_t pick[] = {global_positions, best};
    int32_t result = emit(Op::kGather, DType::kI64, best_shape, pick, along);
    if (argmax && !keepdim) {
      const int32_t operand_of[] = {result};
      result = emit(Op::kReshape, DType::kI64, local_shape(instr.shape, want), operand_of);
      return finish(id, result, want);
    }
    return finish(id, result, argmax ? want : whole);
  }

  // sum / mean / max / min with ints [keepdim, dims...]: reduced dims keep the operand's split
  // (when the devices form groups over it), reduced locally, then combined across each group
  // (all_reduce, or reduce_scatter into the result's split).
  int32_t lower_reduction(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const int32_t operand = global_.operands(id)[0];
    const Shape& in = global_[operand].shape;
    const auto ints = global_.ints(id);
    const bool keepdim = ints[0] != 0;
    const Layout& current = layouts_[operand];
    auto is_reduced = [&](int i) {
      return std::find(ints.begin() + 1, ints.end(), i) != ints.end();
    };
    std::vector<int> source;  // result dim -> operand dim
    std::vector<int> split_reduced;
    for (int i = 0; i < in.rank(); ++i) {
      if (!is_reduced(i) || keepdim) source.push_back(i);
      if (is_reduced(i) && current.sharded(i)) split_reduced.push_back(i);
    }
    // A sum over one split dim whose result is wanted split on the very same devices (along a dim
    // the operand holds whole), as a data-parallel bias gradient kept sharded (FSDP): summed and
    // split at once by reduce_scatter instead of all_reduce and a slice.
    Layout result = want;
    int scatter_dim = -1;
    if ((instr.op == Op::kSum || instr.op == Op::kMean) && split_reduced.size() == 1) {
      const Contraction c = contraction(current, split_reduced[0], want);
      if (c.scatter_dim >= 0 && !current.sharded(source[c.scatter_dim])) {
        scatter_dim = c.scatter_dim;
        result = unsplit(want, {scatter_dim});
      }
    }
    Layout need = replicated(in.rank(), devices_);
    std::vector<int> reduced_split;
    for (int j = 0, i = 0; i < in.rank(); ++i) {
      if (!is_reduced(i)) {
        copy_dim(need, i, result, j++);
        continue;
      }
      if (keepdim) ++j;
      if (current.sharded(i)) {
        copy_dim(need, i, current, i);
        reduced_split.push_back(i);
      }
    }
    std::optional<std::vector<std::vector<int64_t>>> groups;
    if (!reduced_split.empty()) {
      groups = groups_over(need, reduced_split);
      if (!groups) {
        for (int d : reduced_split) need = unsplit(std::move(need), {d});
        reduced_split.clear();
      }
    }
    const int32_t local_operand = operand_as(operand, need);
    const int32_t operands[] = {local_operand};
    const int32_t partial = local_op(id, operands, local_shape(instr.shape, result));
    if (reduced_split.empty()) return finish(id, partial, result);
    int64_t parts = 1;
    for (int d : reduced_split) parts *= need.tiles[d];
    ReduceType type = ReduceType::kSum;
    double scale = 1.0;
    if (instr.op == Op::kMean) scale = 1.0 / static_cast<double>(parts);
    if (instr.op == Op::kReduceMax) type = ReduceType::kMax;
    if (instr.op == Op::kReduceMin) type = ReduceType::kMin;
    const int32_t combined = combine(partial, type, scale, *groups, scatter_dim);
    return scatter_dim >= 0 ? combined : finish(id, combined, result);
  }

  // matmul: a [..., M, K] @ b [..., K, N] (either transposed). When both operands are already
  // split alike along K, the partial products are summed. Otherwise three ways, the cheapest in
  // bytes moved (and collectives met) wins: operands laid out by the result (K whole), or K
  // split as a's (or b's) current split, with the partial products summed by all_reduce
  // (reduce_scatter when the result is split along a dim on the devices K was split on).
  int32_t lower_matmul(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const Shape& out = instr.shape;
    const int r = out.rank();
    const auto ints = global_.ints(id);
    const int32_t a = global_.operands(id)[0];
    const int32_t b = global_.operands(id)[1];
    const Shape& as = global_[a].shape;
    const Shape& bs = global_[b].shape;
    const int ra = as.rank();
    const int rb = bs.rank();
    const int a_m = ints[0] ? ra - 1 : ra - 2;
    const int a_k = ints[0] ? ra - 2 : ra - 1;
    const int b_k = ints[1] ? rb - 1 : rb - 2;
    const int b_n = ints[1] ? rb - 2 : rb - 1;

    struct Plan {
      Layout result;  // the local product's layout (without the partial index)
      Layout a, b;
      std::optional<std::vector<std::vector<int64_t>>> groups;  // partial sums' groups
      int scatter_dim = -1;
      int64_t cost = 0;
      bool in_place = false;  // neither operand needs resharding
    };
    auto operand_layout = [&](const Layout& result, const Shape& shape, int free_dim, int out_free,
                              int k_dim, const std::vector<int64_t>* k_coords, int64_t k_tiles) {
      Layout batch = unsplit(result, {r - 2, r - 1});
      // Batch dims broadcast as elementwise operands do; the last two are set below.
      Shape probe = shape;
      for (int d = shape.rank() - 2; d < shape.rank(); ++d) probe[d] = 1;
      Layout layout = project(batch, out, probe);
      copy_dim(layout, free_dim, result, out_free);
      if (k_coords) {
        layout.tiles[k_dim] = k_tiles;
        for (int64_t p = 0; p < layout.devices; ++p) {
          layout.at(p, k_dim) = (*k_coords)[p];
        }
      }
      return layout;
    };
    std::vector<Plan> plans;
    {
      Plan plan{want, operand_layout(want, as, a_m, r - 2, a_k, nullptr, 1),
                operand_layout(want, bs, b_n, r - 1, b_k, nullptr, 1)};
      plan.cost = reshard_cost(a, plan.a) + reshard_cost(b, plan.b);
      plans.push_back(std::move(plan));
    }
    for (int side = 0; side < 2; ++side) {
      const Layout& split = layouts_[side == 0 ? a : b];
      const int k_dim = side == 0 ? a_k : b_k;
      if (!split.sharded(k_dim)) continue;
      const int64_t k_tiles = split.tiles[k_dim];
      std::vector<int64_t> k_coords;
      for (int64_t p = 0; p < split.devices; ++p) k_coords.push_back(split.at(p, k_dim));
      int scatter_dim = -1;
      for (int d = 0; d < r && scatter_dim < 0; ++d) {
        if (want.tiles[d] != k_tiles) continue;
        bool same = true;
        for (int64_t p = 0; p < want.devices && same; ++p) {
          same = want.at(p, d) == k_coords[p];
        }
        if (same) scatter_dim = d;
      }
      Plan plan;
      plan.result = scatter_dim >= 0 ? unsplit(want, {scatter_dim}) : want;
      plan.scatter_dim = scatter_dim;
      const int extra[] = {r};
      plan.groups = groups_over(with_extra(plan.result, k_coords, k_tiles), extra);
      if (!plan.groups) continue;
      plan.a = operand_layout(plan.result, as, a_m, r - 2, a_k, &k_coords, k_tiles);
      plan.b = operand_layout(plan.result, bs, b_n, r - 1, b_k, &k_coords, k_tiles);
      const int64_t partial = bytes_of(local_shape(out, plan.result), instr.dtype);
      const int64_t g = k_tiles;
      const int64_t operands_cost = reshard_cost(a, plan.a) + reshard_cost(b, plan.b);
      plan.in_place = operands_cost == 0;
      plan.cost = operands_cost + kCollectiveLatencyBytes +
                  (scatter_dim >= 0 ? partial * (g - 1) / g : 2 * partial * (g - 1) / g);
      plans.push_back(std::move(plan));
    }
    // Operands already split alike along K: the partial products are summed as they are (as
    // XLA's dot handler does), even where gathering small operands would move fewer bytes, for
    // that would have every device compute the whole product.
    const auto in_place = std::find_if(plans.begin() + 1, plans.end(),
                                       [](const Plan& plan) { return plan.in_place; });
    const Plan& best =
        plans[0].cost > 0 && in_place != plans.end()
            ? *in_place
            : *std::min_element(plans.begin(), plans.end(),
                                [](const Plan& x, const Plan& y) { return x.cost < y.cost; });
    const int32_t locals[] = {operand_as(a, best.a), operand_as(b, best.b)};
    int32_t result = local_op(id, locals, local_shape(out, best.result));
    if (best.groups) {
      result = combine(result, ReduceType::kSum, 1.0, *best.groups, best.scatter_dim);
      if (best.scatter_dim >= 0) return result;
    }
    return finish(id, result, best.result);
  }

  // A split of a dim that sums partial results (a contracting dim: matmul's K, a convolution's
  // input channels, the scattered rows of scatter_add): its tiles' coordinates on each device.
  struct Contraction {
    int64_t tiles = 1;
    std::vector<int64_t> coords;
    // The result's dim the sums can be reduce-scattered along (split on the same devices as the
    // contraction in `want`), or -1.
    int scatter_dim = -1;
  };
  Contraction contraction(const Layout& split, int dim, const Layout& want) const {
    Contraction c;
    c.tiles = split.tiles[dim];
    for (int64_t p = 0; p < split.devices; ++p) c.coords.push_back(split.at(p, dim));
    for (int d = 0; d < want.rank() && c.scatter_dim < 0; ++d) {
      if (want.tiles[d] != c.tiles) continue;
      bool same = true;
      for (int64_t p = 0; p < want.devices && same; ++p) same = want.at(p, d) == c.coords[p];
      if (same) c.scatter_dim = d;
    }
    return c;
  }
  static void split_as(Layout& layout, int dim, const Contraction& c) {
    layout.tiles[dim] = c.tiles;
    for (int64_t p = 0; p < layout.devices; ++p) layout.at(p, dim) = c.coords[p];
  }
  // What summing partial results of `bytes` (one device's) over groups of `g` costs.
  static int64_t sum_cost(int64_t bytes, int64_t g, bool scatter) {
    return kCollectiveLatencyBytes + (scatter ? bytes * (g - 1) / g : 2 * bytes * (g - 1) / g);
  }
  // The layout the result of a partial sum has after combine(): `result`, or with the reduce-
  // scattered dim split as the contraction was.
  static Layout combined_layout(Layout result, const Contraction& c) {
    if (c.scatter_dim >= 0) split_as(result, c.scatter_dim, c);
    return result;
  }

  // conv2d: the batch (x's dim 0) split, the output channels (the weight's dim 0) without groups;
  // or the input channels (dim 1 of both) split alike, as in a weight gradient (x^T and the
  // output's gradient, whose dim 1 is the batch): partial sums combined by all_reduce, or
  // reduce_scatter when the result is split on those devices. The cheaper way in bytes wins;
  // operands already split alike along the input channels are summed as they are (as matmul).
  int32_t lower_conv2d(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const auto ints = global_.ints(id);
    const auto operands = global_.operands(id);
    const bool ungrouped = ints.size() > 6 && ints[6] == 1;
    const Layout have = keep_only(want, {true, ungrouped, false, false});
    auto needs = [&](const Layout& result, const Contraction* c) {
      std::vector<Layout> need;
      for (int32_t operand : operands) {
        need.push_back(replicated(global_[operand].shape.rank(), devices_));
      }
      copy_dim(need[0], 0, result, 0);
      copy_dim(need[1], 0, result, 1);
      if (c) {
        split_as(need[0], 1, *c);
        split_as(need[1], 1, *c);
      }
      if (need.size() > 2 && need[2].rank() == 1) copy_dim(need[2], 0, result, 1);  // a bias
      return need;
    };
    auto cost_of = [&](const std::vector<Layout>& need) {
      int64_t cost = 0;
      for (std::size_t i = 0; i < need.size(); ++i) cost += reshard_cost(operands[i], need[i]);
      return cost;
    };
    std::vector<Layout> best = needs(have, nullptr);
    int64_t best_cost = cost_of(best);
    std::optional<Contraction> best_split;
    std::optional<std::vector<std::vector<int64_t>>> best_groups;
    Layout best_result = have;
    bool in_place = false;
    // A bias would be added once per partial sum: only a bare convolution sums partials.
    for (std::size_t side = 0; side < 2 && ungrouped && operands.size() == 2; ++side) {
      const Layout& split = layouts_[operands[side]];
      if (!split.sharded(1)) continue;
      Contraction c = contraction(split, 1, want);
      const Layout result = c.scatter_dim >= 0 ? unsplit(have, {c.scatter_dim}) : have;
      const int extra[] = {4};
      auto groups = groups_over(with_extra(result, c.coords, c.tiles), extra);
      if (!groups) continue;
      std::vector<Layout> need = needs(result, &c);
      const int64_t operands_cost = cost_of(need);
      const int64_t partial = bytes_of(local_shape(instr.shape, result), instr.dtype);
      const int64_t cost = operands_cost + sum_cost(partial, c.tiles, c.scatter_dim >= 0);
      if ((operands_cost == 0 && !in_place && best_cost > 0) || (cost < best_cost && !in_place)) {
        in_place = operands_cost == 0;
        best = std::move(need);
        best_cost = cost;
        best_split = std::move(c);
        best_groups = std::move(groups);
        best_result = result;
      }
    }
    std::vector<int32_t> locals;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      locals.push_back(operand_as(operands[i], best[i]));
    }
    int32_t result = local_op(id, locals, local_shape(instr.shape, best_result));
    if (!best_split) return finish(id, result, best_result);
    result = combine(result, ReduceType::kSum, 1.0, *best_groups, best_split->scatter_dim);
    return finish(id, result, combined_layout(best_result, *best_split));
  }

  // rand, randn, randint, bernoulli [seed, offset, p...]: element i of the result draws Philox
  // counter offset + i (row-major, backends/cpu/random.cpp), so a device whose tile is a run of
  // whole slices of the leading dim (the first of size > 1) draws just those counters, from
  // offset + the index of its first element: the unpartitioned values, computed once. The op's
  // other splits are sliced from that; with the leading dim whole every device draws it all.
  int32_t lower_random(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const Shape& shape = instr.shape;
    const auto operands = global_.operands(id);
    int lead = -1;
    for (int d = 0; d < shape.rank() && lead < 0; ++d) {
      if (shape[d] > 1) lead = d;
    }
    Layout have = replicated(shape.rank(), devices_);
    if (lead >= 0 && want.sharded(lead) && operands.size() >= 2 &&
        global_[operands[1]].dtype == DType::kI64 && global_[operands[1]].shape.rank() == 0) {
      copy_dim(have, lead, want, lead);
    }
    std::vector<int32_t> locals;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      const Shape& operand = global_[operands[i]].shape;
      locals.push_back(operand_as(operands[i], i >= 2 ? project(have, shape, operand)
                                                      : replicated(operand.rank(), devices_)));
    }
    if (lead >= 0 && have.sharded(lead)) {
      const int64_t rows = shape[lead] / have.tiles[lead];
      const int64_t inner = shape.numel() / shape[lead];
      std::vector<int64_t> first;
      for (int64_t p = 0; p < devices_; ++p) first.push_back(have.at(p, lead) * rows * inner);
      const int32_t start[] = {per_device(first)};
      const int32_t start_scalar[] = {locals[1], emit(Op::kReshape, DType::kI64, Shape{}, start)};
      locals[1] = emit(Op::kAdd, DType::kI64, Shape{}, start_scalar);
    }
    return finish(id, local_op(id, locals, local_shape(shape, have)), have);
  }

  // gather(x, dim, index) with x split along dim (topk's values, picked from a split operand):
  // each device picks the positions its shard holds (zeros for the others) and an all_reduce
  // sums the picks, as a vocabulary-parallel lookup; -1 when gathering x moves fewer bytes (or x
  // is not split there, or the index is).
  int32_t lower_split_gather(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const int dim = static_cast<int>(global_.ints(id)[0]);
    const auto operands = global_.operands(id);
    const Shape& xs = global_[operands[0]].shape;
    const Shape& is = global_[operands[1]].shape;
    const Layout& x_now = layouts_[operands[0]];
    const int rank = instr.shape.rank();
    if (!x_now.sharded(dim) || instr.dtype == DType::kBool) return -1;
    std::vector<bool> keep(static_cast<std::size_t>(rank), true);
    for (int d = 0; d < rank; ++d) keep[d] = d != dim && xs[d] == is[d];
    const Layout have = keep_only(want, keep);
    const Layout x_whole = unsplit(have, {dim});
    Layout x_split = x_whole;
    copy_dim(x_split, dim, x_now, dim);
    const int64_t k = x_now.tiles[dim];
    std::vector<int64_t> k_coords;
    for (int64_t p = 0; p < devices_; ++p) k_coords.push_back(x_now.at(p, dim));
    const int extra[] = {rank};
    const auto groups = groups_over(with_extra(have, k_coords, k), extra);
    if (!groups || !groups_over(x_split, std::span<const int>(&dim, 1))) return -1;
    const int64_t out_bytes = bytes_of(local_shape(instr.shape, have), instr.dtype);
    if (reshard_cost(operands[0], x_split) + sum_cost(out_bytes, k, false) >=
        reshard_cost(operands[0], x_whole)) {
      return -1;
    }
    const int32_t table = operand_as(operands[0], x_split);
    const int32_t positions = operand_as(operands[1], have);
    const Shape shape = out_[positions].shape;
    const DType index_dtype = global_[operands[1]].dtype;
    const int64_t length = xs[dim] / k;
    std::vector<int64_t> starts;
    for (int64_t c : k_coords) starts.push_back(c * length);
    const auto [mask, safe] = block_indices(positions, index_dtype, shape, length, starts);
    const int32_t pick[] = {table, safe};
    const int32_t picked = local_op(id, pick, shape);
    const int32_t kept[] = {mask, picked, scalar(instr.dtype, 0)};
    const int32_t masked = emit(Op::kWhere, instr.dtype, shape, kept);
    return finish(id, combine(masked, ReduceType::kSum, 1.0, *groups, -1), have);
  }

  // Whether global instruction `id` is zero everywhere (a zero fill or constant, broadcast).
  bool is_zero(int32_t id) const {
    for (int depth = 0; depth < 8; ++depth) {
      const Op op = global_[id].op;
      if (op == Op::kFill || op == Op::kConstant) return global_.reals(id)[0] == 0;
      if (op != Op::kExpand && op != Op::kReshape) return false;
      id = global_.operands(id)[0];
    }
    return false;
  }

  // scatter_add(x, dim, index, src) with the index (or src) split along `dim`, as an embedding's
  // gradient is (its rows are the batch's tokens): each device scatters its rows into zeros, the
  // partial results are summed by all_reduce (or reduce_scatter), and x is added once. -1 when
  // gathering the index and src along `dim` moves fewer bytes (or they are not split there).
  int32_t lower_split_scatter_add(int32_t id) {
    const Program::Instr& instr = global_[id];
    const Layout& want = layouts_[id];
    const int dim = static_cast<int>(global_.ints(id)[0]);
    const auto operands = global_.operands(id);
    const Shape& x = global_[operands[0]].shape;
    const Shape& index = global_[operands[1]].shape;
    const int rank = instr.shape.rank();
    std::vector<bool> keep(static_cast<std::size_t>(rank), true);
    for (int d = 0; d < rank; ++d) keep[d] = d != dim && x[d] == index[d];
    const Layout have = keep_only(want, keep);
    const Layout* split = nullptr;
    for (std::size_t i = 1; i < 3 && !split; ++i) {
      if (layouts_[operands[i]].sharded(dim)) split = &layouts_[operands[i]];
    }
    if (!split) return -1;
    const Contraction c = contraction(*split, dim, want);
    const Layout result = c.scatter_dim >= 0 ? unsplit(have, {c.scatter_dim}) : have;
    const int extra[] = {rank};
    const auto groups = groups_over(with_extra(result, c.coords, c.tiles), extra);
    if (!groups) return -1;
    Layout rows = result;
    split_as(rows, dim, c);
    const int64_t partial = bytes_of(local_shape(instr.shape, result), instr.dtype);
    const Layout after = combined_layout(result, c);
    const bool zero_base = is_zero(operands[0]);
    const int64_t cost = reshard_cost(operands[1], rows) + reshard_cost(operands[2], rows) +
                         sum_cost(partial, c.tiles, c.scatter_dim >= 0) +
                         (zero_base ? 0 : reshard_cost(operands[0], after));
    const int64_t gather_cost = reshard_cost(operands[0], have) + reshard_cost(operands[1], have) +
                                reshard_cost(operands[2], have);
    if (cost >= gather_cost) return -1;
    const Shape shape = local_shape(instr.shape, result);
    const double zero = 0;
    const int32_t zeros =
        emit(Op::kFill, instr.dtype, shape, {}, {}, std::span<const double>(&zero, 1));
    const int32_t locals[] = {zeros, operand_as(operands[1], rows), operand_as(operands[2], rows)};
    int32_t sum =
        combine(local_op(id, locals, shape), ReduceType::kSum, 1.0, *groups, c.scatter_dim);
    if (!zero_base) {
      const int32_t add[] = {operand_as(operands[0], after), sum};
      sum = emit(Op::kAdd, instr.dtype, local_shape(instr.shape, after), add);
    }
    return finish(id, sum, after);
  }

  // reshape: the dims fall into groups of equal element counts (in and out); a split carries
  // over on a group's major dim (its first of size > 1), which keeps each device's elements
  // one contiguous block. Any other split of the result is sliced after a local reshape.
  int32_t lower_reshape(int32_t id) {
    const Layout& want = layouts_[id];
    const Shape& out = global_[id].shape;
    const int32_t operand = global_.operands(id)[0];
    const Shape& in = global_[operand].shape;
    Layout need = replicated(in.rank(), devices_);
    std::vector<bool> keep(static_cast<std::size_t>(out.rank()), false);
    if (in.numel() > 0) {
      int i = 0;
      int j = 0;
      while (i < in.rank() || j < out.rank()) {
        const int i0 = i;
        const int j0 = j;
        int64_t pin = 1;
        int64_t pout = 1;
        if (i < in.rank()) pin *= in[i++];
        if (j < out.rank()) pout *= out[j++];
        while (pin != pout) {
          if (pin < pout && i < in.rank()) {
            pin *= in[i++];
          } else if (j < out.rank()) {
            pout *= out[j++];
          } else {
            break;
          }
        }
        int major_in = -1;
        int major_out = -1;
        for (int d = i0; d < i && major_in < 0; ++d) {
          if (in[d] > 1) major_in = d;
        }
        for (int d = j0; d < j && major_out < 0; ++d) {
          if (out[d] > 1) major_out = d;
        }
        if (major_in >= 0 && major_out >= 0 && want.sharded(major_out) &&
            in[major_in] % want.tiles[major_out] == 0) {
          keep[major_out] = true;
          copy_dim(need, major_in, want, major_out);
        }
      }
    }
    const Layout have = keep_only(want, keep);
    return local_then_finish(id, have, [&](std::size_t) { return need; });
  }

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

}  // namespace

PartitionedProgram partition(const Program& global, std::span<const ShardingSpec> shardings,
                             int64_t num_devices) {
  return Partitioner(global, shardings, num_devices).run();
}

std::string spmd_text(const Program& global, std::span<const ShardingSpec> shardings,
                      const PartitionedProgram& partitioned, int64_t num_devices) {
  const Program& local = partitioned.program;
  int collectives = 0;
  for (std::size_t id = 0; id < local.size(); ++id) {
    collectives += local[id].op >= Op::kAllReduce && local[id].op <= Op::kCollectivePermute;
  }
  std::string text = "after sharding propagation:\n";
  text += global.to_text([&](std::size_t id) {
    return id < shardings.size() ? "sharding=" + to_string(shardings[id]) : std::string();
  });
  text += fmt::format(
      "\nafter SPMD partitioning, the program of each of {} devices ({} collective{} inserted, "
      "about {} bytes per device per execution):\n",
      num_devices, collectives, collectives == 1 ? "" : "s", partitioned.collective_bytes);
  text += local.to_text([&](std::size_t id) {
    const Op op = local[id].op;
    if (op < Op::kAllReduce || op > Op::kCollectivePermute || id >= partitioned.origins.size() ||
        partitioned.origins[id] < 0) {
      return std::string();
    }
    const int32_t g = partitioned.origins[id];
    return fmt::format("inserted for %{} ({} {}{})", g, op_name(global[g].op),
                       dtype_name(global[g].dtype), global[g].shape.to_string());
  });
  return text;
}

}  // namespace axle
