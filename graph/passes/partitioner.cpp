// graph/passes: the SPMD partitioner, as XLA's (GSPMD): one sweep over the global program that
// gives each instruction its local computation on shards. Every value is tracked by its layout:
// tiles per dimension and each device's tile coordinates (a ShardingSpec spelled out per
// device). An op states the layouts it needs of its operands, derived from the layout its result
// must have; operands are resharded to them (slices need no communication, all_to_all moves a
// sharded dimension, all_gather undoes one), and a result computed in another layout, or as
// partial sums over devices, is brought to the instruction's sharding with all_reduce,
// reduce_scatter or a reshard. The rules, one per op family, are listed in graph/README.md.
// This file: the sweep, emitting instructions and resharding; the layouts and the rules are in
// the files partitioner_internal.h names.
#include "axle/graph/passes/partitioner_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "axle/graph/collectives.h"

namespace axle::spmd_partitioning {

PartitionedProgram Partitioner::run() {
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

std::string Partitioner::describe(int32_t id) const {
  return fmt::format("instruction %{} ({} {}{})", id, op_name(global_[id].op),
                     dtype_name(global_[id].dtype), global_[id].shape.to_string());
}

[[noreturn]] void Partitioner::fail(int32_t id, std::string_view why) const {
  throw std::invalid_argument(fmt::format("partition: {}: {}", describe(id), why));
}

Value Partitioner::value_of(int32_t id) const {
  return Value{local_[id], layouts_[id], global_[id].shape, global_[id].dtype};
}

int32_t Partitioner::emit(Op op, DType dtype, const Shape& shape, std::span<const int32_t> operands,
                          std::span<const int64_t> ints, std::span<const double> reals) {
  return out_.append(op, dtype, shape, operands, ints, reals);
}

int32_t Partitioner::scalar(DType dtype, double value) {
  return emit(Op::kFill, dtype, Shape{}, {}, {}, std::span<const double>(&value, 1));
}

int64_t Partitioner::group_key(const std::vector<std::vector<int64_t>>& groups) {
  std::vector<int64_t> encoded{static_cast<int64_t>(groups.front().size())};
  for (const auto& group : groups) encoded.insert(encoded.end(), group.begin(), group.end());
  return detail::intern_collective_group_ints(encoded);
}

int32_t Partitioner::partition_index() {
  if (partition_ < 0) {
    partition_ = out_.append(Op::kParameter, DType::kInt64, Shape{}, {}, {}, {}, out_.num_inputs);
    ++out_.num_inputs;
    const int32_t operand[] = {partition_};
    partition_vector_ = emit(Op::kReshape, DType::kInt64, Shape{1}, operand);
  }
  return partition_vector_;
}

int32_t Partitioner::per_device(const std::vector<int64_t>& values) {
  if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v == values[0]; })) {
    const double value = static_cast<double>(values[0]);
    return emit(Op::kFill, DType::kInt64, Shape{1}, {}, {}, std::span<const double>(&value, 1));
  }
  if (auto it = tables_.find(values); it != tables_.end()) return it->second;
  std::vector<int32_t> entries;
  for (int64_t v : values) {
    const double value = static_cast<double>(v);
    entries.push_back(
        emit(Op::kFill, DType::kInt64, Shape{1}, {}, {}, std::span<const double>(&value, 1)));
  }
  const int64_t zero[] = {0};
  const int32_t table =
      emit(Op::kConcat, DType::kInt64, Shape{static_cast<int64_t>(values.size())}, entries, zero);
  const int32_t operands[] = {table, partition_index()};
  const int32_t picked = emit(Op::kIndexSelect, DType::kInt64, Shape{1}, operands, zero);
  tables_.emplace(values, picked);
  return picked;
}

Partitioner::BlockIndices Partitioner::block_indices(int32_t indices, DType index_dtype,
                                                     const Shape& shape, int64_t length,
                                                     const std::vector<int64_t>& starts) {
  int32_t start = per_device(starts);
  if (index_dtype != DType::kInt64) {
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

int32_t Partitioner::dynamic_slice(int32_t x, int dim, int64_t length,
                                   const std::vector<int64_t>& offsets) {
  const double iota[] = {0, 1};
  const int32_t range = emit(Op::kIota, DType::kInt64, Shape{length}, {}, {}, iota);
  const int32_t sum[] = {range, per_device(offsets)};
  const int32_t index = emit(Op::kAdd, DType::kInt64, Shape{length}, sum);
  Shape shape = out_[x].shape;
  shape[dim] = length;
  const int32_t operands[] = {x, index};
  const int64_t ints[] = {dim};
  return emit(Op::kIndexSelect, out_[x].dtype, shape, operands, ints);
}

std::optional<std::vector<std::pair<int64_t, int64_t>>> Partitioner::sources_of(const Layout& from,
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

int64_t Partitioner::reshard(Value& v, const Layout& to, bool emit_ops) {
  if (v.layout == to) return 0;
  if (const auto cost = reshard_by_permute(v, to, emit_ops)) return *cost;
  if (const auto cost = reshard_by_all_to_all(v, to, emit_ops)) return *cost;
  return reshard_by_gather_and_slice(v, to, emit_ops);
}

std::optional<int64_t> Partitioner::reshard_by_permute(Value& v, const Layout& to, bool emit_ops) {
  const Layout& cur = v.layout;
  if (cur.tiles != to.tiles) return std::nullopt;
  const auto pairs = sources_of(cur, to);
  if (!pairs) return std::nullopt;
  // Each device receives its tile from one that holds it: a tile's bytes, where gathering would
  // bring (tiles - 1) of them.
  const int64_t bytes =
      local_shape(v.shape, cur).numel() * static_cast<int64_t>(dtype_size(v.dtype));
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
  return bytes + kCollectiveLatencyBytes;
}

namespace {

// Whether going from `cur` to `to` moves the split of dim a to the unsplit dim b on the same
// devices, every other dim as it was.
bool moves_split(const Layout& cur, const Layout& to, const Shape& shape, int a, int b) {
  const int rank = to.rank();
  if (a == b || !cur.sharded(a) || cur.sharded(b) || to.sharded(a) || to.tiles[b] != cur.tiles[a] ||
      shape[b] % to.tiles[b] != 0) {
    return false;
  }
  for (int d = 0; d < rank; ++d) {
    if (d != a && d != b && cur.tiles[d] != to.tiles[d]) return false;
  }
  for (int64_t p = 0; p < cur.devices; ++p) {
    for (int d = 0; d < rank; ++d) {
      if (d != a && d != b && cur.at(p, d) != to.at(p, d)) return false;
    }
    if (to.at(p, b) != cur.at(p, a)) return false;
  }
  return true;
}

}  // namespace

std::optional<int64_t> Partitioner::reshard_by_all_to_all(Value& v, const Layout& to,
                                                          bool emit_ops) {
  const Layout& cur = v.layout;
  for (int a = 0; a < to.rank(); ++a) {
    for (int b = 0; b < to.rank(); ++b) {
      if (!moves_split(cur, to, v.shape, a, b)) continue;
      const int dims[] = {a};
      const auto groups = groups_over(cur, dims);
      if (!groups) continue;
      const int64_t g = cur.tiles[a];
      const int64_t bytes =
          local_shape(v.shape, cur).numel() * static_cast<int64_t>(dtype_size(v.dtype));
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
      return bytes * (g - 1) / g + kCollectiveLatencyBytes;
    }
  }
  return std::nullopt;
}

int64_t Partitioner::reshard_by_gather_and_slice(Value& v, const Layout& to, bool emit_ops) {
  int64_t cost = 0;
  const int64_t elem = static_cast<int64_t>(dtype_size(v.dtype));
  Layout& cur = v.layout;
  for (int d = 0; d < to.rank(); ++d) {
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
  for (int d = 0; d < to.rank(); ++d) {
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

int64_t Partitioner::reshard_cost(int32_t global_id, const Layout& to) {
  Value v = value_of(global_id);
  return reshard(v, to, false);
}

int32_t Partitioner::operand_as(int32_t operand, const Layout& need) {
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

int32_t Partitioner::finish(int32_t id, int32_t local, const Layout& have) {
  Value v{local, have, global_[id].shape, global_[id].dtype};
  reshard(v, layouts_[id], true);
  return v.id;
}

int32_t Partitioner::combine(int32_t local, ReduceType type, double scale,
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

int32_t Partitioner::local_op(int32_t id, std::span<const int32_t> operands, const Shape& shape) {
  return out_.append(global_[id].op, global_[id].dtype, shape, operands, global_.ints(id),
                     global_.reals(id), global_[id].input);
}

}  // namespace axle::spmd_partitioning

namespace axle {

using spmd_partitioning::Partitioner;

PartitionedProgram partition(const Program& global, std::span<const ShardingSpec> shardings,
                             int64_t num_devices) {
  return Partitioner(global, shardings, num_devices).run();
}

std::string spmd_text(const Program& global, std::span<const ShardingSpec> shardings,
                      const PartitionedProgram& partitioned, int64_t num_devices) {
  const Program& local = partitioned.program;
  int collectives = 0;
  for (std::size_t id = 0; id < local.size(); ++id) {
    collectives += op_family(local[id].op) == OpFamily::kCollective;
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
    if (op_family(op) != OpFamily::kCollective || id >= partitioned.origins.size() ||
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
