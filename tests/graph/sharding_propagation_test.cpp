// graph/passes/sharding_propagation.cpp: the sharding each op's output gets from its operands
// (forward) and each operand from its output (backward), where candidates meet, whole MLPs
// (data-parallel and Megatron), and a long chain settling in a bounded number of sweeps.
#include <gtest/gtest.h>

#include <numeric>

#include "axle/graph/autograd.h"
#include "axle/graph/collectives.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/nn/loss.h"
#include "axle/graph/ops.h"
#include "axle/graph/passes/passes.h"
#include "axle/graph/spmd.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

using spmd::mark_sharding;
constexpr auto None = std::nullopt;

const Mesh kLine({0, 1}, {2}, {"x"});
const Mesh kSquare({0, 1, 2, 3}, {2, 2}, {"data", "model"});

Tensor input(const Shape& shape, DType dtype = DType::kFloat32) {
  return Tensor(
      make_intrusive<TensorImpl>(dtype, make_intrusive<DeviceData>(Device{}, dtype, shape)));
}

// A leaf carrying `spec` on `mesh`.
Tensor sharded(const Shape& shape, const Mesh& mesh, const PartitionSpec& spec,
               DType dtype = DType::kFloat32) {
  Tensor t = input(shape, dtype);
  mark_sharding(t, mesh, spec);
  return t;
}

struct Propagated {
  Program program;
  std::vector<ShardingSpec> shardings;
  // The sharding of output k.
  [[nodiscard]] const ShardingSpec& of(std::size_t k) const {
    return shardings.at(static_cast<std::size_t>(program.outputs.at(k)));
  }
  // The sharding of the n-th instruction computing `op`.
  [[nodiscard]] const ShardingSpec& of(Op op, int n = 0) const {
    for (std::size_t id = 0; id < program.size(); ++id) {
      if (program[id].op == op && n-- == 0) return shardings[id];
    }
    throw std::out_of_range("no such op: " + std::string(op_name(op)));
  }
};

Propagated propagate(const std::vector<Tensor>& outputs) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : outputs) roots.push_back(t.impl()->value_node({}));
  Propagated p;
  p.program = Program::from(build_step_graph(roots));
  const std::vector<ShardingSpec> inputs = input_shardings(p.program);
  p.shardings = propagate_shardings(p.program, inputs);
  EXPECT_EQ(p.shardings.size(), p.program.size());
  return p;
}

}  // namespace

void PrintTo(const ShardingSpec& sharding, std::ostream* os) { *os << to_string(sharding); }

namespace {

ShardingSpec spec(const Mesh& mesh, const PartitionSpec& partition) {
  return mesh.sharding(partition, static_cast<int>(partition.size()));
}

TEST(ShardingPropagation, ElementwiseOutputTakesTheShardedOperands) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Tensor b = input({8, 4});
  const Propagated p =
      propagate({a + b, exp(a), cast(a, DType::kBFloat16), where(gt(b, 0.0), a, b)});
  for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(p.of(k), spec(kLine, {"x", None})) << k;
}

TEST(ShardingPropagation, BroadcastDimsAreReplicated) {
  // A bias [4] added to a batch-sharded [8, 4]: the output is batch-sharded; the bias's own
  // sharding (on its one dim) carries to the output's last dim.
  const Tensor x = sharded({8, 4}, kLine, {"x", None});
  const Tensor bias = input({4});
  const Tensor column = sharded({4}, kLine, {"x"});
  const Propagated p =
      propagate({x + bias, input({8, 4}) + exp(column), expand(exp(column), {3, 4})});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(1), spec(kLine, {None, "x"}));
  EXPECT_EQ(p.of(2), spec(kLine, {None, "x"}));
  // Backward: the expand's operand (exp of a [1, 4] leaf) is asked for its last dim only.
  const Tensor row = input({1, 4});
  Tensor wide = expand(exp(row), {8, 4});
  mark_sharding(wide, kSquare, {"data", "model"});
  const Propagated q = propagate({wide});
  EXPECT_EQ(q.of(Op::kExp), spec(kSquare, {None, "model"}));
}

TEST(ShardingPropagation, BackwardFromAnAnnotationReachesOperands) {
  const Tensor x = input({8, 4});
  Tensor y = exp(x) * 2.0;
  mark_sharding(y, kLine, {None, "x"});
  const Propagated p = propagate({y});
  EXPECT_EQ(p.of(0), spec(kLine, {None, "x"}));
  EXPECT_EQ(p.of(Op::kMul), spec(kLine, {None, "x"}));
  EXPECT_EQ(p.of(Op::kExp), spec(kLine, {None, "x"}));
  EXPECT_TRUE(p.of(Op::kDeviceData).is_replicated());  // leaves keep their input sharding
}

TEST(ShardingPropagation, MatmulKeepsBatchAndFreeDims) {
  const Tensor rows = sharded({8, 4}, kSquare, {"data", None});
  const Tensor columns = sharded({4, 6}, kSquare, {None, "model"});
  const Propagated p = propagate(
      {matmul(rows, input({4, 6})), matmul(input({8, 4}), columns), matmul(rows, columns)});
  EXPECT_EQ(p.of(0), spec(kSquare, {"data", None}));
  EXPECT_EQ(p.of(1), spec(kSquare, {None, "model"}));
  EXPECT_EQ(p.of(2), spec(kSquare, {"data", "model"}));
  // Batched: [2, 8, 4] sharded on the batch.
  const Tensor batch = sharded({2, 8, 4}, kLine, {"x", None, None});
  EXPECT_EQ(propagate({matmul(batch, input({4, 6}))}).of(0), spec(kLine, {"x", None, None}));
}

TEST(ShardingPropagation, ContractingShardedMatmulHasTheFreeDimsSharding) {
  // K sharded on both sides: partial sums (the partitioner all-reduces them); the output is
  // replicated over the K tiles, and keeps a's row sharding on the 2x2 mesh.
  const Tensor a = sharded({8, 4}, kLine, {None, "x"});
  const Tensor b = sharded({4, 6}, kLine, {"x", None});
  EXPECT_TRUE(propagate({matmul(a, b)}).of(0).is_replicated());
  const Tensor a2 = sharded({8, 4}, kSquare, {"data", "model"});
  const Tensor b2 = sharded({4, 6}, kSquare, {"model", None});
  EXPECT_EQ(propagate({matmul(a2, b2)}).of(0), spec(kSquare, {"data", None}));
}

TEST(ShardingPropagation, ReductionsDropReducedDims) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Propagated p = propagate({sum(a, {1}), sum(a, {1}, true), sum(a, {0}), mean(a, {0}, true)});
  EXPECT_EQ(p.of(0), spec(kLine, {"x"}));
  EXPECT_EQ(p.of(1), spec(kLine, {"x", None}));
  EXPECT_TRUE(p.of(2).is_replicated());
  EXPECT_TRUE(p.of(3).is_replicated());
}

TEST(ShardingPropagation, ReshapeMapsOneToOneAndTheLeadingDimOfASplitOrMerge) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Tensor flat = sharded({32}, kLine, {"x"});
  const Tensor inner = sharded({8, 4}, kLine, {None, "x"});
  const Tensor three = sharded({2, 3, 4}, kLine, {None, None, "x"});
  const Propagated p = propagate({reshape(a, {32}), reshape(flat, {8, 4}), reshape(inner, {32}),
                                  reshape(three, {6, 4}), reshape(a, {8, 2, 2})});
  EXPECT_EQ(p.of(0), spec(kLine, {"x"}));
  EXPECT_EQ(p.of(1), spec(kLine, {"x", None}));
  EXPECT_TRUE(p.of(2).is_replicated());  // a trailing sharded dim does not survive a merge
  EXPECT_EQ(p.of(3), spec(kLine, {None, "x"}));
  EXPECT_EQ(p.of(4), spec(kLine, {"x", None, None}));
}

TEST(ShardingPropagation, PermuteMovesTiles) {
  const Tensor a = sharded({8, 4, 6}, kSquare, {"data", None, "model"});
  const Propagated p = propagate({permute(a, {2, 0, 1}), transpose(a, 0, 1)});
  EXPECT_EQ(p.of(0), spec(kSquare, {"model", "data", None}));
  EXPECT_EQ(p.of(1), spec(kSquare, {None, "data", "model"}));
}

TEST(ShardingPropagation, SoftmaxAndLayerNormAlongUnshardedDims) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Propagated p =
      propagate({softmax(a, 1), log_softmax(a, -1), nn::layer_norm(a, {4}), softmax(a, 0)});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(1), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(2), spec(kLine, {"x", None}));
  EXPECT_TRUE(p.of(3).is_replicated());  // along the sharded dim
}

TEST(ShardingPropagation, EmbeddingFollowsTheIndicesBatchAndTheTablesEmbeddingDim) {
  const Tensor table = sharded({10, 4}, kSquare, {None, "model"});
  const Tensor ids = sharded({8}, kSquare, {"data"}, DType::kInt64);
  const Propagated p = propagate({index_select(table, 0, ids), nn::embedding(ids, input({10, 4}))});
  EXPECT_EQ(p.of(0), spec(kSquare, {"data", "model"}));
  EXPECT_EQ(p.of(1), spec(kSquare, {"data", None}));
}

TEST(ShardingPropagation, Conv2dOverTheBatch) {
  const Tensor x = sharded({4, 3, 6, 6}, kLine, {"x", None, None, None});
  const Propagated p = propagate({conv2d(x, input({5, 3, 3, 3}))});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None, None, None}));
}

TEST(ShardingPropagation, SliceAndCatAlongUnshardedDims) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Propagated p =
      propagate({slice(a, 1, 0, 2), cat({a, a}, 1), slice(a, 0, 0, 4), cat({a, a}, 0)});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(1), spec(kLine, {"x", None}));
  EXPECT_TRUE(p.of(2).is_replicated());
  EXPECT_TRUE(p.of(3).is_replicated());
}

TEST(ShardingPropagation, AttentionOverBatchAndHeads) {
  const PartitionSpec heads = {None, "x", None, None};
  const Tensor q = sharded({2, 4, 8, 6}, kLine, heads);
  const Tensor k = sharded({2, 4, 8, 6}, kLine, heads);
  const Tensor v = sharded({2, 4, 8, 6}, kLine, heads);
  const Propagated p = propagate({nn::scaled_dot_product_attention(q, k, v)});
  EXPECT_EQ(p.of(0), spec(kLine, heads));
  EXPECT_EQ(p.of(Op::kScaledDotProductAttention), spec(kLine, heads));
}

TEST(ShardingPropagation, OpsWithoutARuleAreReplicatedAndAskForReplicatedOperands) {
  const Tensor a = sharded({8, 4}, kLine, {"x", None});
  const Propagated p = propagate({all_reduce(ReduceType::kSum, exp(a))});
  EXPECT_TRUE(p.of(0).is_replicated());
  // exp's candidates: a's sharding (forward) and replicated (its user): the merge is a's.
  EXPECT_EQ(p.of(Op::kExp), spec(kLine, {"x", None}));
}

TEST(ShardingPropagation, WhereCandidatesConflictTheFewerBytesWin) {
  // a [64, 64] sharded on rows, c [64] on its one dim (the output's columns): keeping a's
  // sharding moves 64 elements of c, taking c's moves half of a. Either operand order.
  const Tensor a = sharded({64, 64}, kLine, {"x", None});
  const Tensor c = sharded({64}, kLine, {"x"});
  const Propagated p = propagate({a + exp(c), exp(c) + a});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(1), spec(kLine, {"x", None}));
}

TEST(ShardingPropagation, EqualBytesGoToTheEarlierOperand) {
  const Tensor rows = sharded({8, 8}, kLine, {"x", None});
  const Tensor columns = sharded({8, 8}, kLine, {None, "x"});
  const Propagated p = propagate({rows + columns, columns + rows});
  EXPECT_EQ(p.of(0), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(1), spec(kLine, {None, "x"}));
}

// Every instruction whose leading dim is the batch (and no other dim is) is batch-sharded.
void expect_batch_sharded(const Propagated& p, int64_t batch, const Mesh& mesh) {
  int checked = 0;
  for (std::size_t id = 0; id < p.program.size(); ++id) {
    const Shape& shape = p.program[id].shape;
    if (shape.rank() == 0 || shape[0] != batch || p.program.is_leaf(id)) continue;
    PartitionSpec partition(static_cast<std::size_t>(shape.rank()), None);
    partition[0] = "data";
    EXPECT_EQ(p.shardings[id], spec(mesh, partition))
        << "%" << id << " " << op_name(p.program[id].op) << shape.to_string();
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(ShardingPropagation, DataParallelMlpShardsEveryActivationAndReplicatesWeightGrads) {
  const Mesh mesh({0, 1, 2, 3}, {4}, {"data"});
  const Tensor x = sharded({8, 5}, mesh, {"data", None});
  const Tensor target = sharded({8}, mesh, {"data"}, DType::kInt64);
  const Tensor w1 = input({6, 5}).requires_grad_();
  const Tensor b1 = input({6}).requires_grad_();
  const Tensor w2 = input({3, 6}).requires_grad_();
  const Tensor loss = nn::cross_entropy(linear(relu(linear(x, w1, b1)), w2), target);
  loss.backward();
  Tensor w1_new;
  {
    NoGradGuard no_grad;
    w1_new = w1 - w1.grad() * 0.1;  // an optimizer step's chain
  }
  const Propagated p = propagate({loss, w1.grad(), b1.grad(), w2.grad(), w1_new});
  expect_batch_sharded(p, 8, mesh);
  for (std::size_t k = 1; k < 5; ++k) EXPECT_TRUE(p.of(k).is_replicated()) << k;
}

TEST(ShardingPropagation, MegatronMlpShardsTheHiddenActivationOnFeatures) {
  // Column-parallel w1 (its output features), row-parallel w2 (its input features).
  const Tensor x = input({8, 5}).requires_grad_();
  const Tensor w1 = sharded({6, 5}, kLine, {"x", None}).requires_grad_();
  const Tensor w2 = sharded({3, 6}, kLine, {None, "x"}).requires_grad_();
  const Tensor hidden = gelu(linear(x, w1));
  const Tensor y = linear(hidden, w2);
  sum(y * y).backward();
  const Propagated p = propagate({hidden, y, w1.grad(), w2.grad(), x.grad()});
  EXPECT_EQ(p.of(0), spec(kLine, {None, "x"}));
  EXPECT_TRUE(p.of(1).is_replicated());  // a partial sum over the hidden features
  EXPECT_EQ(p.of(2), spec(kLine, {"x", None}));
  EXPECT_EQ(p.of(3), spec(kLine, {None, "x"}));
  EXPECT_TRUE(p.of(4).is_replicated());
  EXPECT_EQ(p.of(Op::kGelu), spec(kLine, {None, "x"}));
}

TEST(ShardingPropagation, InputShardingsByPositionOverrideAndAreChecked) {
  const Tensor a = input({8, 4});
  std::vector<NodePtr> roots{exp(a).impl()->ir()};
  const Program program = Program::from(build_step_graph(roots));
  const std::vector<ShardingSpec> inputs{spec(kLine, {"x", None})};
  EXPECT_EQ(propagate_shardings(program, inputs)[1], inputs[0]);
  const std::vector<ShardingSpec> bad{spec(kLine, {"x", None, None})};
  EXPECT_THROW((void)propagate_shardings(program, bad), std::exception);
}

TEST(ShardingPropagation, AHundredThousandInstructionChainSettlesInFewSweeps) {
  Program program;
  const Shape shape{8, 4};
  int32_t last = program.append(Op::kDeviceData, DType::kFloat32, shape, {}, {}, {}, 0);
  program.num_inputs = 1;
  for (int i = 0; i < 100000; ++i) {
    const Op op = i % 2 == 0 ? Op::kExp : Op::kNeg;
    last = program.append(op, DType::kFloat32, shape, std::span<const int32_t>(&last, 1));
  }
  const std::vector<int64_t> ints = encode_sharding(spec(kLine, {None, "x"}));
  last = program.append(Op::kCustomSharding, DType::kFloat32, shape,
                        std::span<const int32_t>(&last, 1), ints);
  program.outputs = {last};
  const ShardingPropagation result = propagate_shardings_counting_sweeps(program, {});
  EXPECT_LE(result.sweeps, 2);
  for (std::size_t id = 1; id < program.size(); ++id) {
    ASSERT_EQ(result.shardings[id], spec(kLine, {None, "x"})) << id;
  }
}

}  // namespace
}  // namespace axle
