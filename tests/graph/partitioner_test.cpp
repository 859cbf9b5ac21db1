// graph/passes: the SPMD partitioner. Each case traces a global program, gives every
// instruction a sharding (by hand, or by a trivial rule: a dim of a given size is split over a
// mesh axis), partitions it for 1, 2 and 4 devices (meshes 1x1, 2x1, 1x2, 4x1, 1x4, 2x2) and
// runs the per-device program on every device in lockstep with the reference evaluator's op
// semantics, the collectives computed across the devices' states. Each device is fed its shards
// of the global inputs and its partition index; the outputs, reassembled from the devices'
// tiles (replicas must agree), must equal the global program's reference values. The
// collectives inserted are checked by kind and count.
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

#include "graph/collectives.h"
#include "graph/nn/functional.h"
#include "graph/nn/loss.h"
#include "graph/ops.h"
#include "graph/passes/passes.h"
#include "graph/reference/evaluator.h"
#include "graph/reference/op_families.h"
#include "graph/spmd.h"
#include "graph/step_graph.h"

namespace axle {
namespace {

namespace ref = reference::detail;

// ---- lockstep evaluation of a per-device program on N devices -------------------------------

using Feed = std::function<CpuTensor(int64_t device, int32_t input)>;

double combine(ReduceType type, double a, double b) {
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
std::vector<std::vector<int64_t>> groups_of(const Program& program, std::size_t id,
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
CpuTensor reduce_members(const std::vector<const CpuTensor*>& members, ReduceType type,
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
std::vector<std::vector<CpuTensor>> run_lockstep(const Program& program, int64_t devices,
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
      case Op::kCollectivePermute:
        ADD_FAILURE() << "the partitioner emitted a collective_permute";
        return {};
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

std::vector<int64_t> tile(const ShardingSpec& sharding, int rank, int64_t device) {
  std::vector<int64_t> coords(static_cast<std::size_t>(rank), 0);
  if (sharding.is_replicated()) return coords;
  const std::vector<int64_t> t = sharding.tile_of(device);
  for (int d = 0; d < rank && d < static_cast<int>(t.size()); ++d) coords[d] = t[d];
  return coords;
}

CpuTensor shard_of(const CpuTensor& global, const ShardingSpec& sharding, int64_t device) {
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
CpuTensor assemble(const std::vector<const CpuTensor*>& locals, const ShardingSpec& sharding,
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

std::map<const DeviceData*, CpuTensor>& leaf_values() {
  static std::map<const DeviceData*, CpuTensor> values;
  return values;
}

std::mt19937_64& rng() {
  static std::mt19937_64 engine(1234);
  return engine;
}

// A device-data leaf holding uniform values in [-1, 1) (integers in [0, high)).
Tensor input(const Shape& shape, DType dtype = DType::kF32, int64_t high = 0) {
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

Tensor weight(const Shape& shape) {
  Tensor w = input(shape);
  w.requires_grad_();
  return w;
}

struct Case {
  Program program;
  std::vector<CpuTensor> inputs;  // by input position
};

Case trace(const std::vector<Tensor>& outputs) {
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

const std::vector<MeshCase>& meshes() {
  static const std::vector<MeshCase> all{{1, 1}, {2, 1}, {1, 2},       {4, 1},
                                         {1, 4}, {2, 2}, {2, 2, true}, {1, 4, true}};
  return all;
}

// The trivial rule: in every instruction, the first dim of a size in `data_sizes` is split over the
// "data" axis and the first of size `model_size` over "model"; the rest is whole.
std::vector<ShardingSpec> by_size(const Program& program, const Mesh& mesh,
                                  const std::vector<int64_t>& data_sizes, int64_t model_size) {
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

std::vector<ShardingSpec> by_size(const Program& program, const Mesh& mesh, int64_t data_size,
                                  int64_t model_size) {
  return by_size(program, mesh, std::vector<int64_t>{data_size}, model_size);
}

// A 1-D sharding of a rank-`rank` tensor split `devices` ways along `dim` (devices in order).
ShardingSpec split(int rank, int dim, int64_t devices) {
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

void compare(const std::vector<std::vector<CpuTensor>>& outputs,
             const std::vector<CpuTensor>& expected, const PartitionedProgram& part,
             double tolerance);

// Partitions `c` for `devices`, runs it in lockstep and compares every output with the global
// program's reference values.
Checked check(const Case& c, const std::vector<ShardingSpec>& shardings, int64_t devices,
              double tolerance = 1e-4) {
  const auto global_feed = [&](int64_t, int32_t input) { return c.inputs.at(input); };
  const std::vector<CpuTensor> expected = run_lockstep(c.program, 1, global_feed).at(0);
  Checked result{partition(c.program, shardings, devices), {}};
  const PartitionedProgram& part = result.partitioned;
  EXPECT_EQ(part.input_shardings.size(), static_cast<std::size_t>(part.program.num_inputs));
  const auto feed = [&](int64_t device, int32_t input) {
    if (input == part.partition_input) {
      CpuTensor index = ref::zeros(DType::kI64, Shape{});
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

void compare(const std::vector<std::vector<CpuTensor>>& outputs,
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

// ---- cases -----------------------------------------------------------------------------------

constexpr int64_t kB = 8;   // batch: split over "data"
constexpr int64_t kH = 12;  // hidden: split over "model"
constexpr int64_t kD = 6;
constexpr int64_t kC = 5;

TEST(Partition, ElementwiseAndBroadcastStayLocal) {
  const Tensor x = input({kB, kH});
  const Tensor bias = input({kH});
  const Tensor row = input({kB, 1});
  const Case c = trace({gelu(x + bias) * 2.0 - row, where(gt(x, 0.0), x, bias)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    EXPECT_EQ(r.total(), 0);
  }
}

TEST(Partition, MatmulWithBatchAndFreeDimsSplitIsLocal) {
  const Tensor x = input({kB, kD});
  const Tensor w = input({kD, kH});
  const Tensor w_t = input({kH, kD});
  const Case c = trace({matmul(x, w), linear(x, w_t)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    EXPECT_EQ(r.total(), 0);
  }
}

TEST(Partition, MatmulOverASplitContractingDimAllReduces) {
  const Tensor x = input({kB, kH});
  const Tensor w = input({kH, kD});
  const Tensor batched = input({2, kB, kH});
  const Case c = trace({matmul(x, w), matmul(batched, w)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    EXPECT_EQ(r.count(Op::kAllReduce), m.model > 1 ? 2 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
    // A ring all_reduce brings each device 2 (g - 1) / g of the buffer.
    const int64_t product_bytes = kB / m.data * kD * 4;
    EXPECT_EQ(r.partitioned.collective_bytes,
              (2 * product_bytes * (m.model - 1) / m.model) +
                  (2 * 2 * product_bytes * (m.model - 1) / m.model));
    if (m.model > 1) {
      // Over the devices that share a data coordinate only.
      for (std::size_t id = 0; id < r.partitioned.program.size(); ++id) {
        if (r.partitioned.program[id].op != Op::kAllReduce) continue;
        const auto groups = groups_of(r.partitioned.program, id, m.devices());
        EXPECT_EQ(groups.size(), static_cast<std::size_t>(m.data));
        for (const auto& g : groups) {
          for (int64_t p : g) EXPECT_EQ(p / m.model, g[0] / m.model);
        }
      }
    }
  }
}

TEST(Partition, MatmulWithASplitResultReduceScatters) {
  for (int64_t n : {1, 2, 4}) {
    SCOPED_TRACE(n);
    const Tensor a = input({kB, kH});
    const Tensor b = input({kH, kB});
    const Case c = trace({matmul(a, b)});
    // a and b split along K; the product split along its rows over the same devices.
    std::vector<ShardingSpec> s{split(2, 1, n), split(2, 0, n), split(2, 0, n)};
    const Checked r = check(c, s, n);
    EXPECT_EQ(r.count(Op::kReduceScatter), n > 1 ? 1 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kReduceScatter));
  }
}

TEST(Partition, MatmulOfOperandsSplitAlikeAlongKSumsEvenWhenGatheringMovesLess) {
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE(n);
    // A weight gradient of data parallelism: x^T [64, batch] @ g [batch, 64], the batch split.
    // Gathering both (small) operands would move fewer bytes than summing the [64, 64] partial
    // products, but every device would then compute the whole product.
    const Tensor xt = input({64, kB});
    const Tensor g = input({kB, 64});
    const Case c = trace({matmul(xt, g)});
    const Checked r = check(c, {split(2, 1, n), split(2, 0, n), {}}, n);
    EXPECT_EQ(r.count(Op::kAllReduce), 1);
    EXPECT_EQ(r.total(), 1);
  }
}

TEST(Partition, MatmulWithMismatchedOperandsReshardsTheCheaperOne) {
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE(n);
    const Tensor a = input({kB, 64});
    const Tensor b = input({64, 2});
    const Case c = trace({matmul(a, b)});
    // a split along K, b whole, the small product whole: slicing b locally and summing the
    // partial products moves far less than gathering a.
    std::vector<ShardingSpec> s{split(2, 1, n), {}, {}};
    const Checked r = check(c, s, n);
    EXPECT_EQ(r.count(Op::kAllReduce), 1);
    EXPECT_EQ(r.total(), 1);
    EXPECT_GE(r.partitioned.partition_input, 0);
    // a split along M, b split along K, the product split along M: b is gathered (small).
    const Tensor a2 = input({kB, 4});
    const Tensor b2 = input({4, 64});
    const Case c2 = trace({matmul(a2, b2)});
    std::vector<ShardingSpec> s2{split(2, 0, n), split(2, 0, n), split(2, 0, n)};
    const Checked r2 = check(c2, s2, n);
    EXPECT_EQ(r2.count(Op::kAllGather), 1);
    EXPECT_EQ(r2.total(), 1);
    // Both operands split along M and N in a way that needs the product moved: a split along
    // M, b whole, the product wanted split along N: computed split along M, then all_to_all.
    const Tensor a3 = input({kB, kD});
    const Tensor b3 = input({kD, kB});
    const Case c3 = trace({matmul(a3, b3)});
    std::vector<ShardingSpec> s3{split(2, 0, n), {}, split(2, 1, n)};
    const Checked r3 = check(c3, s3, n);
    EXPECT_LE(r3.total(), 1);
  }
}

TEST(Partition, ReductionsOverSplitDimsCombineAcrossTheirGroups) {
  const Tensor x = input({kB, kH});
  const Case c = trace({sum(x, {0}), mean(x, {0, 1}), amax(x, {1}), amin(x, {0}, true),
                        sum(x, {1}, true), mean(x, {1})});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    // sum over data, mean over both, max over model, min over data, sum and mean over model.
    const int expected = (m.data > 1 ? 2 : 0) + (m.model > 1 ? 3 : 0) + (m.devices() > 1);
    EXPECT_EQ(r.count(Op::kAllReduce), expected);
    EXPECT_EQ(r.total(), expected);
  }
}

TEST(Partition, ReshapeAndPermuteCarrySplitsThatMap) {
  const Tensor x = input({kB, kH});
  const Tensor y = input({kB, 3, 4});
  const Case c =
      trace({reshape(x, {kB, 3, 4}) + y, transpose(x, 0, 1), reshape(y, {kB * 3, 4}), flatten(x)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    // The reshapes' results split over "data" on their first dim too.
    const Checked r =
        check(c, by_size(c.program, m.mesh(), {kB, kB * 3, kB * kH}, kH), m.devices());
    // The data split carries through every reshape (it is on each group's major dim); the
    // model split does not survive [8, 12] -> [8, 3, 4] (12 becomes 3 x 4) nor the flatten:
    // both gather it first.
    EXPECT_EQ(r.count(Op::kAllGather), m.model > 1 ? 2 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllGather));
  }
}

TEST(Partition, MovingASplitBetweenDimsIsOneAllToAll) {
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE(n);
    const Tensor x = input({kB, kH});
    const Case c = trace({neg(x)});
    const Checked r = check(c, {split(2, 0, n), split(2, 1, n)}, n);
    EXPECT_EQ(r.count(Op::kAllToAll), 1);
    EXPECT_EQ(r.total(), 1);
    // Each device keeps 1/n of its shard and receives the rest.
    const int64_t shard_bytes = kB * kH / n * 4;
    EXPECT_EQ(r.partitioned.collective_bytes, shard_bytes * (n - 1) / n);
  }
}

TEST(Partition, ReshardsBetweenDeviceOrders) {
  const Tensor x = input({kB, kH});
  const Case c = trace({neg(x), exp(x)});
  ShardingSpec forward = split(2, 0, 4);
  ShardingSpec swapped = split(2, 0, 4);
  swapped.devices = {1, 0, 3, 2};
  ShardingSpec other_dim = split(2, 1, 4);
  other_dim.devices = {3, 2, 1, 0};
  // The same tiles on other devices: gathered and sliced again (never an all_to_all, whose
  // blocks would land on the wrong devices).
  const Checked r = check(c, {forward, swapped, other_dim}, 4);
  EXPECT_EQ(r.count(Op::kAllGather), 2);
  EXPECT_EQ(r.total(), 2);
}

TEST(Partition, ReplicatedToSplitSlicesAtThePartitionIndex) {
  for (int64_t n : {1, 2, 4}) {
    SCOPED_TRACE(n);
    const Tensor x = input({kB, kH});
    const Case c = trace({exp(x)});
    const Checked r = check(c, {{}, split(2, 1, n)}, n);
    EXPECT_EQ(r.total(), 0);
    EXPECT_EQ(r.partitioned.partition_input >= 0, n > 1);
    if (n > 1) {
      EXPECT_EQ(r.partitioned.program[r.partitioned.partition_input == 0 ? 0 : 0].op,
                Op::kDeviceData);
      EXPECT_EQ(r.partitioned.partition_input, c.program.num_inputs);
    }
  }
}

TEST(Partition, SoftmaxAndLayerNormAlongAWholeDimAreLocal) {
  const Tensor x = input({kB, kH});
  const Tensor gamma = input({kH});
  const Tensor beta = input({kH});
  const Case c = trace({softmax(x, 1), log_softmax(x, 1), nn::layer_norm(x, {kH}, gamma, beta)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    // Split over data only: rows are whole on every device.
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, -1), m.devices());
    EXPECT_EQ(r.total(), 0);
    // Split along the normalized dim too: softmax gathers its rows, layer norm's mean and
    // variance combine partial sums.
    const Checked r2 = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    if (m.model == 1) {
      EXPECT_EQ(r2.total(), 0);
    } else {
      EXPECT_GT(r2.total(), 0);
    }
  }
}

TEST(Partition, EmbeddingLookupConvOverBatchAndCrossEntropy) {
  const Tensor ids = input({kB}, DType::kI64, 10);
  const Tensor table = input({10, kD});
  const Tensor images = input({kB, 3, 5, 5});
  const Tensor kernel = input({4, 3, 3, 3});
  const Tensor logits = input({kB, kC});
  const Tensor target = input({kB}, DType::kI64, kC);
  const Case c =
      trace({nn::embedding(ids, table), conv2d(images, kernel), nn::cross_entropy(logits, target)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, -1), m.devices());
    // The loss's mean over the batch (the sum of losses over the count of kept targets): two
    // all_reduces over data.
    EXPECT_EQ(r.count(Op::kAllReduce), m.data > 1 ? 2 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(Partition, VocabularyParallelEmbeddingMasksAndAllReduces) {
  constexpr int64_t kVocabulary = 48;  // split over "model"
  const Tensor ids = input({kB}, DType::kI64, kVocabulary);
  const Tensor table = input({kVocabulary, 16});
  const Tensor many_ids = input({kB, 16}, DType::kI64, kVocabulary);
  const Tensor narrow_table = input({kVocabulary, 2});
  const Case c = trace({nn::embedding(ids, table), nn::embedding(many_ids, narrow_table)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kVocabulary), m.devices());
    // A few lookups in a wide table: each device looks up the rows it holds (zeros for the
    // others) and one all_reduce over "model" sums them. Many lookups in a narrow table: the
    // table is cheaper to gather than the lookups are to sum. (The many ids, flattened to
    // [128], which the rule leaves whole, are gathered over "data" too.)
    EXPECT_EQ(r.count(Op::kAllReduce), m.model > 1 ? 1 : 0);
    EXPECT_EQ(r.count(Op::kAllGather), (m.model > 1 ? 1 : 0) + (m.data > 1 ? 1 : 0));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce) + r.count(Op::kAllGather));
  }
}

TEST(Partition, VocabularyParallelSoftmaxAndCrossEntropyCombineMaxAndSum) {
  constexpr int64_t kVocabulary = 48;  // split over "model"
  const Tensor logits = input({kB, kVocabulary});
  const Tensor target = input({kB}, DType::kI64, kVocabulary);
  // A row of -inf (its logsumexp is -inf, its softmax NaN, as unpartitioned).
  const Tensor first_row = lt(arange(0, kB, 1, DType::kI64), 1.0);
  const Tensor masked = masked_fill(logits, unsqueeze(first_row, 1), -INFINITY);
  const Case c = trace({softmax(logits, 1), log_softmax(masked, 1), logsumexp(masked, {1}),
                        logsumexp(logits, {1}, true), nn::cross_entropy(logits, target)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kVocabulary), m.devices());
    // The logits are never gathered: each of the four normalizers and the loss's log_softmax
    // meets the other devices twice (max, then sum), the loss's sum over the vocabulary once,
    // and over "data" the loss's mean twice (sum and count).
    EXPECT_EQ(r.count(Op::kAllGather), 0);
    EXPECT_EQ(r.count(Op::kAllReduce), (m.model > 1 ? 11 : 0) + (m.data > 1 ? 2 : 0));
  }
}

TEST(Partition, IotaAndRandomOpsGiveTheUnpartitionedValues) {
  const Tensor a = arange(0, kH, 1, DType::kI64);
  const Tensor b = arange(1.5, 1.5 + 0.25 * kH, 0.25);
  set_rng_state(7);
  const Tensor noise = rand({kB, kH});
  const Case c = trace({a, b, noise});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    EXPECT_EQ(r.total(), 0);
  }
}

TEST(Partition, DataMovementScansSortsAndPooling) {
  const Tensor x = input({kB, kH});
  const Tensor index = input({kB, 3}, DType::kI64, kH);
  const Tensor src = input({kB, 3});
  const Tensor rows = input({kB}, DType::kI64, kB);
  const TopK top = topk(x, 3, 1);
  const Tensor images = weight({kB, kH, 4, 4});
  const Tensor pooled =
      max_pool2d(images, {.kernel_size = {2, 2}}) +
      avg_pool2d(images, {.kernel_size = {2, 2}, .stride = {2, 2}, .padding = {0, 0}});
  sum(pooled * pooled).backward();
  const Case c =
      trace({slice(x, 1, 2, 10, 2), cat({x, x}, 1), gather(x, 1, index),
             scatter_add(x, 1, index, src), top.values, top.indices, cumsum(x, 1), cumsum(x, 0),
             argmax(x, 1), logsumexp(x, {1}), index_select(x, 0, rows), pooled, images.grad()});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    if (m.devices() == 1) {
      EXPECT_EQ(r.total(), 0);
    }
    // Pooling and its gradient stay local with batch and channels split; the rest gathers the
    // dims the ops work along (and slices back), so no all_to_all or reduce_scatter appears.
    EXPECT_EQ(r.count(Op::kAllToAll), 0);
    EXPECT_EQ(r.count(Op::kReduceScatter), 0);
  }
}

TEST(Partition, AttentionSplitsOverBatchAndHeads) {
  const Tensor q = weight({kB, kH, 4, 2});
  const Tensor k = weight({kB, kH, 5, 2});
  const Tensor v = weight({kB, kH, 5, 3});
  const Tensor out = nn::scaled_dot_product_attention(q, k, v);
  sum(out).backward();
  const Case c = trace({out, q.grad(), k.grad(), v.grad()});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    // Attention and its gradient are local per (batch, head); nothing is gathered.
    EXPECT_EQ(r.count(Op::kAllGather), 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(Partition, ConvOverOutputChannelsBernoulliAndBarriers) {
  const Tensor images = input({kB, 3, 5, 5});
  const Tensor kernel = input({kH, 3, 3, 3});  // output channels split over "model"
  const Tensor p = sigmoid(input({kB, kH}));
  Tensor a = exp(input({kB, kH}));
  Tensor b = neg(input({kB, kD}));
  optimization_barrier_({a, b});
  set_rng_state(11);
  const Case c = trace({conv2d(images, kernel), bernoulli(p), a * 2.0, b});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, kH), m.devices());
    // Convolution and barriers are local; bernoulli draws whole, so its probabilities are
    // gathered first (over each split axis).
    EXPECT_EQ(r.count(Op::kAllGather), (m.data > 1 ? 1 : 0) + (m.model > 1 ? 1 : 0));
    EXPECT_EQ(r.total(), r.count(Op::kAllGather));
  }
}

// A two-layer MLP's training step (forward, backward, SGD): returns the loss and new weights.
Case mlp_step(bool gelu_activation) {
  const Tensor x = input({kB, kD});
  const Tensor target = input({kB}, DType::kI64, kC);
  const Tensor w1 = weight({kH, kD});
  const Tensor b1 = weight({kH});
  const Tensor w2 = weight({kC, kH});
  const Tensor b2 = weight({kC});
  const Tensor h = linear(x, w1, b1);
  const Tensor logits = linear(gelu_activation ? gelu(h) : relu(h), w2, b2);
  const Tensor loss = nn::cross_entropy(logits, target);
  loss.backward();
  std::vector<Tensor> outputs{loss};
  for (const Tensor& p : {w1, b1, w2, b2}) outputs.push_back(p - p.grad() * 0.1);
  return trace(outputs);
}

TEST(Partition, DataParallelTrainingStepAllReducesGradients) {
  const Case c = mlp_step(false);
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(c, by_size(c.program, m.mesh(), kB, -1), m.devices());
    // Only sums over the batch communicate, once each over "data": the loss's sum and count of
    // targets and each of the four gradients.
    EXPECT_EQ(r.count(Op::kAllReduce), m.data > 1 ? 6 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(Partition, MegatronMlpSplitsWeightsByColumnThenRow) {
  const Tensor x = input({kB, kD});
  const Tensor w1 = input({kH, kD});
  const Tensor b1 = input({kH});
  const Tensor w2 = input({kC, kH});
  const Tensor b2 = input({kC});
  const Case forward = trace({linear(gelu(linear(x, w1, b1)), w2, b2)});
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(forward, by_size(forward.program, m.mesh(), kB, kH), m.devices());
    // Column-parallel first layer, row-parallel second: one all_reduce over "model".
    EXPECT_EQ(r.count(Op::kAllReduce), m.model > 1 ? 1 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
  const Case step = mlp_step(true);
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Checked r = check(step, by_size(step.program, m.mesh(), kB, kH), m.devices());
    // The forward's all_reduce over "model"; the gradients' sums over "data" as in data
    // parallelism. No weight is ever gathered: weights and their gradients stay split over
    // "model" (the backward of the row-parallel layer is local).
    EXPECT_EQ(r.count(Op::kAllReduce), (m.model > 1 ? 1 : 0) + (m.data > 1 ? 6 : 0));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

// The whole compiler path an SPMD step takes: annotations (mark_sharding on the weights and on
// the batch) -> sharding propagation -> partitioner, checked against the global values.
TEST(Partition, AnnotatedMegatronMlpPropagatesAndPartitionsToOneAllReduce) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Mesh mesh = m.mesh();
    const Tensor x = input({kB, kD});
    const Tensor w1 = input({kH, kD});
    const Tensor b1 = input({kH});
    const Tensor w2 = input({kC, kH});
    const Tensor b2 = input({kC});
    spmd::mark_sharding(x, mesh, {"data", std::nullopt});
    spmd::mark_sharding(w1, mesh, {"model", std::nullopt});  // column-parallel
    spmd::mark_sharding(b1, mesh, {"model"});
    spmd::mark_sharding(w2, mesh, {std::nullopt, "model"});  // row-parallel
    Tensor hidden = gelu(linear(x, w1, b1));
    spmd::mark_sharding(hidden, mesh, {"data", "model"});
    const Case c = trace({linear(hidden, w2, b2)});
    const std::vector<ShardingSpec> shardings =
        propagate_shardings(c.program, input_shardings(c.program));
    const Checked r = check(c, shardings, m.devices());
    EXPECT_EQ(r.count(Op::kAllReduce), m.model > 1 ? 1 : 0) << r.partitioned.program.to_text();
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce)) << r.partitioned.program.to_text();
  }
}

TEST(Partition, RejectsCollectivesInTheGlobalProgram) {
  const Tensor x = input({kB, kH});
  const Case c = trace({all_reduce(ReduceType::kSum, x)});
  try {
    (void)partition(c.program, std::vector<ShardingSpec>(c.program.size()), 2);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
  }
}

TEST(Partition, RejectsShardingsThatDoNotFit) {
  const Tensor x = input({kB, kH});
  const Case c = trace({neg(x)});
  EXPECT_THROW((void)partition(c.program, {}, 2), std::invalid_argument);
  ShardingSpec bad = split(2, 1, 5);
  EXPECT_THROW((void)partition(c.program, std::vector<ShardingSpec>{bad, {}}, 5), std::exception);
  ShardingSpec too_many = split(2, 0, 4);
  try {
    (void)partition(c.program, std::vector<ShardingSpec>{too_many, {}}, 2);
    ADD_FAILURE() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("instruction %0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace axle
