// tests/graph: the harness of the SPMD partitioner's tests. A case traces a global program; it
// is partitioned for N devices, and the per-device program runs on every device in lockstep with
// the reference evaluator's op semantics, the collectives computed across the devices' states.
// Each device is fed its shards of the global inputs and its partition index; the outputs,
// reassembled from the devices' tiles (replicas must agree), must equal the global program's
// reference values. The collectives inserted are counted by kind.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "axle/graph/collectives.h"
#include "axle/graph/passes/passes.h"
#include "axle/graph/reference/evaluator.h"
#include "axle/graph/reference/op_families.h"
#include "axle/graph/spmd.h"
#include "axle/graph/step_graph.h"

namespace axle::partition_test {

namespace ref = reference::detail;

// ---- lockstep evaluation of a per-device program on N devices -------------------------------

using Feed = std::function<CpuTensor(int64_t device, int32_t input)>;

inline double combine(ReduceType type, double a, double b) {
  switch (type) {
    case ReduceType::kSum:
      return a + b;
    case ReduceType::kMul:
      return a * b;
    case ReduceType::kMax:
      return std::isnan(a) || a > b ? a : b;
    case ReduceType::kMin:
      return std::isnan(a) || a < b ? a : b;
    case ReduceType::kAnd:
      return (a != 0) && (b != 0);
    case ReduceType::kOr:
      return (a != 0) || (b != 0);
  }
  return 0;
}

// The groups of a collective instruction (its last int is their key), checked to hold every
// device once.
inline std::vector<std::vector<int64_t>> groups_of(const Program& program, std::size_t id,
                                                   int64_t devices) {
  const std::vector<int64_t> encoded = detail::collective_group_ints(program.ints(id).back());
  EXPECT_FALSE(encoded.empty());
  const int64_t size = encoded[0];
  std::vector<std::vector<int64_t>> groups;
  std::vector<int> seen(static_cast<std::size_t>(devices), 0);
  for (std::size_t i = 1; i < encoded.size(); i += static_cast<std::size_t>(size)) {
    groups.emplace_back(encoded.begin() + static_cast<std::ptrdiff_t>(i),
                        encoded.begin() + static_cast<std::ptrdiff_t>(i + size));
    for (int64_t d : groups.back()) ++seen.at(static_cast<std::size_t>(d));
  }
  for (int s : seen) EXPECT_EQ(s, 1) << "groups must hold each device once";
  return groups;
}

// Element-wise fold of the members' values (in group order), times scale.
inline CpuTensor reduce_members(const std::vector<const CpuTensor*>& members, ReduceType type,
                                double scale) {
  CpuTensor out = ref::zeros(members[0]->dtype, members[0]->shape);
  for (int64_t i = 0; i < out.shape.numel(); ++i) {
    double acc = ref::real_at(*members[0], i);
    for (std::size_t m = 1; m < members.size(); ++m) {
      acc = combine(type, acc, ref::real_at(*members[m], i));
    }
    ref::store_real(out, i, out.dtype == DType::kBool ? acc : acc * scale);
  }
  return out;
}

// Runs `program` on `devices` devices, instruction by instruction; returns each device's outputs.
inline std::vector<std::vector<CpuTensor>> run_lockstep(const Program& program, int64_t devices,
                                                        const Feed& feed) {
  const std::size_t count = program.size();
  std::vector<NodePtr> nodes(count);
  std::vector<std::vector<CpuTensor>> values(static_cast<std::size_t>(devices),
                                             std::vector<CpuTensor>(count));
  for (std::size_t id = 0; id < count; ++id) {
    const Program::Instr& instr = program[id];
    const auto operand_ids = program.operands(id);
    if (program.is_leaf(id) || instr.op == Op::kConstant) {
      nodes[id] = make_intrusive<Node>(Op::kFill, instr.dtype, instr.shape, Operands{}, IntAttrs{},
                                       RealAttrs{0.0});
      for (int64_t p = 0; p < devices; ++p) {
        CpuTensor value;
        if (instr.op == Op::kConstant) {
          value = ref::zeros(instr.dtype, instr.shape);
          for (int64_t i = 0; i < instr.shape.numel(); ++i) {
            ref::store_real(value, i, program.constant_value(id));
          }
        } else {
          value = feed(p, instr.input);
          EXPECT_EQ(value.dtype, instr.dtype) << "input " << instr.input;
          EXPECT_EQ(value.shape, instr.shape) << "input " << instr.input;
        }
        values[p][id] = std::move(value);
      }
      continue;
    }
    Operands operands;
    for (int32_t o : operand_ids) operands.push_back(nodes[o]);
    nodes[id] = make_intrusive<Node>(instr.op, instr.dtype, instr.shape, std::move(operands),
                                     IntAttrs(program.ints(id)), RealAttrs(program.reals(id)));
    const Node& node = *nodes[id];
    const auto ints = program.ints(id);
    switch (instr.op) {
      case Op::kAllReduce:
      case Op::kReduceScatter:
      case Op::kAllGather:
      case Op::kAllToAll: {
        for (const auto& group : groups_of(program, id, devices)) {
          std::vector<const CpuTensor*> members;
          for (int64_t p : group) members.push_back(&values[p][operand_ids[0]]);
          const Shape& in = members[0]->shape;
          for (std::size_t j = 0; j < group.size(); ++j) {
            CpuTensor out = ref::zeros(instr.dtype, instr.shape);
            const ref::Index out_strides = ref::strides_of(instr.shape);
            const ref::Index in_strides = ref::strides_of(in);
            if (instr.op == Op::kAllReduce) {
              out = reduce_members(members, static_cast<ReduceType>(ints[0]), program.reals(id)[0]);
            } else if (instr.op == Op::kReduceScatter) {
              const CpuTensor full =
                  reduce_members(members, static_cast<ReduceType>(ints[0]), program.reals(id)[0]);
              const int dim = static_cast<int>(ints[1]);
              ref::for_each_index(instr.shape, [&](const ref::Index& index) {
                ref::Index from = index;
                from[dim] += static_cast<int64_t>(j) * instr.shape[dim];
                ref::copy_element(full, ref::offset_of(from, in_strides, in.rank()), out,
                                  ref::offset_of(index, out_strides, in.rank()));
              });
            } else if (instr.op == Op::kAllGather) {
              const int dim = static_cast<int>(ints[0]);
              ref::for_each_index(instr.shape, [&](const ref::Index& index) {
                ref::Index from = index;
                from[dim] = index[dim] % in[dim];
                ref::copy_element(*members[index[dim] / in[dim]],
                                  ref::offset_of(from, in_strides, in.rank()), out,
                                  ref::offset_of(index, out_strides, in.rank()));
              });
            } else {
              const int split = static_cast<int>(ints[0]);
              const int concat = static_cast<int>(ints[1]);
              ref::for_each_index(instr.shape, [&](const ref::Index& index) {
                ref::Index from = index;
                from[concat] = index[concat] % in[concat];
                from[split] = index[split] + static_cast<int64_t>(j) * instr.shape[split];
                ref::copy_element(*members[index[concat] / in[concat]],
                                  ref::offset_of(from, in_strides, in.rank()), out,
                                  ref::offset_of(index, out_strides, in.rank()));
              });
            }
            values[group[j]][id] = std::move(out);
          }
        }
        break;
      }
      case Op::kCollectivePermute: {
        // [devices, source, target, ...]: each target takes its source's value; a device no
        // pair names gets zeros.
        const std::vector<int64_t> pairs = detail::collective_group_ints(ints.back());
        for (int64_t p = 0; p < devices; ++p) values[p][id] = ref::zeros(instr.dtype, instr.shape);
        for (std::size_t i = 1; i + 1 < pairs.size(); i += 2) {
          values[pairs[i + 1]][id] = values[pairs[i]][operand_ids[0]];
        }
        break;
      }
      default:
        for (int64_t p = 0; p < devices; ++p) {
          std::vector<const CpuTensor*> operand_values;
          for (int32_t o : operand_ids) operand_values.push_back(&values[p][o]);
          values[p][id] = reference::evaluate_node(node, operand_values);
        }
    }
  }
  std::vector<std::vector<CpuTensor>> outputs(static_cast<std::size_t>(devices));
  for (int64_t p = 0; p < devices; ++p) {
    for (int32_t o : program.outputs) outputs[p].push_back(values[p][o]);
  }
  return outputs;
}

// ---- shards ----------------------------------------------------------------------------------

inline std::vector<int64_t> tile(const ShardingSpec& sharding, int rank, int64_t device) {
  std::vector<int64_t> coords(static_cast<std::size_t>(rank), 0);
  if (sharding.is_replicated()) return coords;
  const std::vector<int64_t> t = sharding.tile_of(device);
  for (int d = 0; d < rank && d < static_cast<int>(t.size()); ++d) coords[d] = t[d];
  return coords;
}

inline CpuTensor shard_of(const CpuTensor& global, const ShardingSpec& sharding, int64_t device) {
  const Shape local = shard_shape(global.shape, sharding);
  CpuTensor out = ref::zeros(global.dtype, local);
  const int rank = local.rank();
  const std::vector<int64_t> coords = tile(sharding, rank, device);
  const ref::Index in_strides = ref::strides_of(global.shape);
  int64_t i = 0;
  ref::for_each_index(local, [&](const ref::Index& index) {
    ref::Index at = index;
    for (int d = 0; d < rank; ++d) at[d] += coords[d] * local[d];
    ref::copy_element(global, ref::offset_of(at, in_strides, rank), out, i++);
  });
  return out;
}

// The global value from each device's tile; every replica of a tile must hold the same values.
inline CpuTensor assemble(const std::vector<const CpuTensor*>& locals, const ShardingSpec& sharding,
                          const Shape& global, double tolerance) {
  CpuTensor out = ref::zeros(locals[0]->dtype, global);
  std::vector<bool> written(static_cast<std::size_t>(global.numel()), false);
  const int rank = global.rank();
  const ref::Index out_strides = ref::strides_of(global);
  for (std::size_t p = 0; p < locals.size(); ++p) {
    const CpuTensor& local = *locals[p];
    EXPECT_EQ(local.shape, shard_shape(global, sharding)) << "device " << p;
    const std::vector<int64_t> coords = tile(sharding, rank, static_cast<int64_t>(p));
    int64_t i = 0;
    ref::for_each_index(local.shape, [&](const ref::Index& index) {
      ref::Index at = index;
      for (int d = 0; d < rank; ++d) at[d] += coords[d] * local.shape[d];
      const int64_t o = ref::offset_of(at, out_strides, rank);
      if (written[o]) {
        const double a = ref::real_at(out, o);
        const double b = ref::real_at(local, i);
        if (std::isnan(a) || std::isinf(a)) {
          EXPECT_TRUE(std::isnan(a) ? std::isnan(b) : a == b) << "replicas differ at " << o;
        } else {
          EXPECT_NEAR(a, b, tolerance * (1 + std::abs(a))) << "replicas differ at " << o;
        }
      } else {
        ref::copy_element(local, i, out, o);
        written[o] = true;
      }
      ++i;
    });
  }
  return out;
}

// ---- tracing cases ---------------------------------------------------------------------------

inline std::map<const DeviceData*, CpuTensor>& leaf_values() {
  static std::map<const DeviceData*, CpuTensor> values;
  return values;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 engine(1234);
  return engine;
}

// A device-data leaf holding uniform values in [-1, 1) (integers in [0, high)).
inline Tensor input(const Shape& shape, DType dtype = DType::kFloat32, int64_t high = 0) {
  auto data = make_intrusive<DeviceData>(Device{}, dtype, shape);
  CpuTensor value = ref::zeros(dtype, shape);
  std::uniform_real_distribution<double> real(-1, 1);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    if (is_floating(dtype)) {
      ref::store_real(value, i, real(rng()));
    } else {
      ref::store_int(value, i, static_cast<int64_t>(rng()() % static_cast<uint64_t>(high)));
    }
  }
  leaf_values()[data.get()] = std::move(value);
  return Tensor(make_intrusive<TensorImpl>(dtype, data));
}

inline Tensor weight(const Shape& shape) {
  Tensor w = input(shape);
  w.requires_grad_();
  return w;
}

struct Case {
  Program program;
  std::vector<CpuTensor> inputs;  // by input position
};

inline Case trace(const std::vector<Tensor>& outputs) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : outputs) roots.push_back(t.impl()->ir());
  const StepGraph graph = build_step_graph(roots);
  Case c{Program::from(graph), {}};
  for (int32_t id : graph.inputs) {
    const Node& node = *graph.nodes[static_cast<std::size_t>(id)];
    if (node.op() == Op::kDeviceData) {
      c.inputs.push_back(leaf_values().at(node.data().get()));
    } else {
      CpuTensor value = ref::zeros(node.dtype(), node.shape());
      ref::store_real(value, 0, node.value());
      c.inputs.push_back(std::move(value));
    }
  }
  return c;
}

// ---- meshes and shardings ----------------------------------------------------------------------

struct MeshCase {
  int64_t data;
  int64_t model;
  bool reversed = false;  // device ids placed on the mesh last first
  [[nodiscard]] Mesh mesh() const {
    std::vector<int64_t> ids(static_cast<std::size_t>(data * model));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>(reversed ? ids.size() - 1 - i : i);
    }
    return Mesh(ids, {data, model}, {"data", "model"});
  }
  [[nodiscard]] int64_t devices() const { return data * model; }
  [[nodiscard]] std::string name() const {
    return fmt::format("mesh {}x{}{}", data, model, reversed ? " reversed" : "");
  }
};

inline const std::vector<MeshCase>& meshes() {
  static const std::vector<MeshCase> all{{1, 1}, {2, 1}, {1, 2},       {4, 1},
                                         {1, 4}, {2, 2}, {2, 2, true}, {1, 4, true}};
  return all;
}

// The trivial rule: in every instruction, the first dim of a size in `data_sizes` is split over the
// "data" axis and the first of size `model_size` over "model"; the rest is whole.
inline std::vector<ShardingSpec> by_size(const Program& program, const Mesh& mesh,
                                         const std::vector<int64_t>& data_sizes,
                                         int64_t model_size) {
  std::vector<ShardingSpec> shardings;
  for (std::size_t id = 0; id < program.size(); ++id) {
    const Shape& shape = program[id].shape;
    PartitionSpec spec;
    bool data = false;
    bool model = false;
    for (int d = 0; d < shape.rank(); ++d) {
      if (!data && std::find(data_sizes.begin(), data_sizes.end(), shape[d]) != data_sizes.end()) {
        spec.emplace_back("data");
        data = true;
      } else if (!model && shape[d] == model_size) {
        spec.emplace_back("model");
        model = true;
      } else {
        spec.emplace_back(std::nullopt);
      }
    }
    shardings.push_back(mesh.sharding(spec, shape.rank()));
  }
  return shardings;
}

inline std::vector<ShardingSpec> by_size(const Program& program, const Mesh& mesh,
                                         int64_t data_size, int64_t model_size) {
  return by_size(program, mesh, std::vector<int64_t>{data_size}, model_size);
}

// A 1-D sharding of a rank-`rank` tensor split `devices` ways along `dim` (devices in order).
inline ShardingSpec split(int rank, int dim, int64_t devices) {
  ShardingSpec s;
  s.tile_dims.assign(static_cast<std::size_t>(rank), 1);
  s.tile_dims[dim] = devices;
  for (int64_t p = 0; p < devices; ++p) s.devices.push_back(p);
  return s;
}

struct Checked {
  PartitionedProgram partitioned;
  std::map<Op, int> collectives;
  int count(Op op) const {
    auto it = collectives.find(op);
    return it == collectives.end() ? 0 : it->second;
  }
  int total() const {
    int n = 0;
    for (const auto& [op, k] : collectives) n += k;
    return n;
  }
};

inline void compare(const std::vector<std::vector<CpuTensor>>& outputs,
                    const std::vector<CpuTensor>& expected, const PartitionedProgram& part,
                    double tolerance);

// Partitions `c` for `devices`, runs it in lockstep and compares every output with the global
// program's reference values.
inline Checked check(const Case& c, const std::vector<ShardingSpec>& shardings, int64_t devices,
                     double tolerance = 1e-4) {
  const auto global_feed = [&](int64_t, int32_t input) { return c.inputs.at(input); };
  const std::vector<CpuTensor> expected = run_lockstep(c.program, 1, global_feed).at(0);
  Checked result{partition(c.program, shardings, devices), {}};
  const PartitionedProgram& part = result.partitioned;
  EXPECT_EQ(part.input_shardings.size(), static_cast<std::size_t>(part.program.num_inputs));
  const auto feed = [&](int64_t device, int32_t input) {
    if (input == part.partition_input) {
      CpuTensor index = ref::zeros(DType::kInt64, Shape{});
      ref::store_int(index, 0, device);
      return index;
    }
    return shard_of(c.inputs.at(input), part.input_shardings.at(input), device);
  };
  if (std::getenv("PARTITION_DUMP")) {
    std::printf("global:\n%s\npartitioned for %ld:\n%s\n", c.program.to_text().c_str(),
                static_cast<long>(devices), part.program.to_text().c_str());
  }
  const auto outputs = run_lockstep(part.program, devices, feed);
  if (!outputs.empty()) compare(outputs, expected, part, tolerance);
  for (std::size_t id = 0; id < part.program.size(); ++id) {
    const Op op = part.program[id].op;
    if (op >= Op::kAllReduce && op <= Op::kCollectivePermute) ++result.collectives[op];
  }
  return result;
}

inline void compare(const std::vector<std::vector<CpuTensor>>& outputs,
                    const std::vector<CpuTensor>& expected, const PartitionedProgram& part,
                    double tolerance) {
  for (std::size_t k = 0; k < expected.size(); ++k) {
    std::vector<const CpuTensor*> locals;
    for (const auto& device_outputs : outputs) locals.push_back(&device_outputs[k]);
    const CpuTensor got = assemble(locals, part.output_shardings[k], expected[k].shape, tolerance);
    ASSERT_EQ(got.dtype, expected[k].dtype);
    for (int64_t i = 0; i < got.shape.numel(); ++i) {
      const double want = ref::real_at(expected[k], i);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(ref::real_at(got, i))) << "output " << k << " element " << i;
        continue;
      }
      if (std::isinf(want)) {
        ASSERT_EQ(ref::real_at(got, i), want) << "output " << k << " element " << i;
        continue;
      }
      ASSERT_NEAR(ref::real_at(got, i), want, tolerance * (1 + std::abs(want)))
          << "output " << k << " element " << i << "\n"
          << part.program.to_text();
    }
  }
}

}  // namespace axle::partition_test
