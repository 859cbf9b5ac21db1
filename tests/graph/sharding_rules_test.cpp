// graph/passes: sharding propagation and the partitioner together, op family by op family, as an
// SPMD step runs them: a few tensors are annotated (mark_sharding), propagate_shardings gives
// every instruction a sharding, and partition makes the per-device program. Each case checks the
// sharding the op's output (and its gradients') get, the collectives inserted, and the values on
// meshes of 1, 2 and 4 devices against the unpartitioned program's (partition_harness.h).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "axle/graph/autograd.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/nn/loss.h"
#include "axle/graph/ops.h"
#include "partition_harness.h"

namespace axle {

void PrintTo(const ShardingSpec& sharding, std::ostream* os) { *os << to_string(sharding); }

namespace {

using namespace partition_test;  // NOLINT(google-build-using-namespace): the harness
using spmd::mark_sharding;
constexpr auto None = std::nullopt;

constexpr int64_t kB = 8;   // batch: over "data"
constexpr int64_t kH = 12;  // features: over "model"
constexpr int64_t kD = 6;

// A traced case with every instruction's sharding from propagation.
struct Propagated {
  Case c;
  std::vector<ShardingSpec> shardings;

  [[nodiscard]] const ShardingSpec& output(std::size_t k) const {
    return shardings.at(static_cast<std::size_t>(c.program.outputs.at(k)));
  }
  [[nodiscard]] int rank(std::size_t k) const {
    return c.program[static_cast<std::size_t>(c.program.outputs.at(k))].shape.rank();
  }
  // The sharding of the n-th instruction computing `op`.
  [[nodiscard]] std::pair<const ShardingSpec*, int> of(Op op, int n = 0) const {
    for (std::size_t id = 0; id < c.program.size(); ++id) {
      if (c.program[id].op == op && n-- == 0) {
        return {&shardings[id], c.program[id].shape.rank()};
      }
    }
    throw std::out_of_range("no such op: " + std::string(op_name(op)));
  }
};

Propagated propagate(const std::vector<Tensor>& outputs) {
  Propagated p{trace(outputs), {}};
  p.shardings = propagate_shardings(p.c.program, input_shardings(p.c.program));
  return p;
}

// Whether two shardings lay a tensor of rank `rank` out alike on `devices` devices: the same tiles
// per dim, each device holding the same tile (however a mesh axis of size 1 is spelled).
::testing::AssertionResult same_layout(const ShardingSpec& got, const ShardingSpec& want, int rank,
                                       int64_t devices) {
  bool same = true;
  for (int d = 0; d < rank; ++d) same = same && got.tiles(d) == want.tiles(d);
  for (int64_t p = 0; p < devices && same; ++p) {
    same = tile(got, rank, p) == tile(want, rank, p);
  }
  if (same) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << to_string(got) << ", want " << to_string(want);
}

// The layout `spec` gives on the mesh.
ShardingSpec on(const MeshCase& m, const PartitionSpec& spec) {
  return m.mesh().sharding(spec, static_cast<int>(spec.size()));
}

// Expects output k of `p` laid out by `spec` on mesh `m`.
#define EXPECT_OUTPUT(p, k, m, ...)                                                               \
  EXPECT_TRUE(                                                                                    \
      same_layout((p).output(k), on((m), PartitionSpec __VA_ARGS__), (p).rank(k), (m).devices())) \
      << "output " << (k)

int more_than_one(int64_t n) { return n > 1 ? 1 : 0; }

TEST(ShardingRules, ElementwiseAndBroadcastAndTheirGradients) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor x = weight({kB, kH});
    const Tensor bias = weight({kH});  // no annotation: broadcast along the batch
    mark_sharding(x, m.mesh(), {"data", "model"});
    const Tensor y = gelu(x + bias) * 2.0;
    sum(y).backward();
    const Propagated p = propagate({y, x.grad(), bias.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", "model"});
    EXPECT_OUTPUT(p, 1, m, {"data", "model"});
    EXPECT_OUTPUT(p, 2, m, {"model"});  // the bias's gradient sums over the batch
    const Checked r = check(p.c, p.shardings, m.devices());
    // The bias is sliced where it is read; its gradient's sum meets the "data" devices once.
    EXPECT_EQ(r.count(Op::kAllReduce), more_than_one(m.data));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(ShardingRules, MatmulBatchContractingAndFreeDimsAndTheirGradients) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    // Column-parallel: the weight's output features (the product's free dim) over "model".
    const Tensor x = weight({kB, kD});
    const Tensor w = weight({kH, kD});
    mark_sharding(x, m.mesh(), {"data", None});
    mark_sharding(w, m.mesh(), {"model", None});
    const Tensor y = linear(x, w);
    sum(y * y).backward();
    const Propagated p = propagate({y, w.grad(), x.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", "model"});
    // w's gradient contracts the batch (an all_reduce over "data"); x's contracts the features
    // (an all_reduce over "model").
    EXPECT_OUTPUT(p, 1, m, {"model", None});
    EXPECT_OUTPUT(p, 2, m, {"data", None});
    const Checked r = check(p.c, p.shardings, m.devices());
    EXPECT_EQ(r.count(Op::kAllReduce), more_than_one(m.data) + more_than_one(m.model));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name() + ", batched");
    // A batched product, the batch over "data" on both sides: local.
    const Tensor a = weight({kB, 4, kD});
    const Tensor b = weight({kB, kD, 3});
    mark_sharding(a, m.mesh(), {"data", None, None});
    mark_sharding(b, m.mesh(), {"data", None, None});
    const Tensor y = matmul(a, b);
    sum(y * y).backward();
    const Propagated p = propagate({y, a.grad(), b.grad()});
    for (std::size_t k = 0; k < 3; ++k) EXPECT_OUTPUT(p, k, m, {"data", None, None});
    EXPECT_EQ(check(p.c, p.shardings, m.devices()).total(), 0);
  }
}

TEST(ShardingRules, ReductionsKeepTheirKeptDimsAndCombineOverReducedOnes) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor x = weight({kB, kH});
    mark_sharding(x, m.mesh(), {"data", "model"});
    const Tensor rows = sum(x, {1});
    const Tensor columns = amax(x, {0});
    const Tensor all = mean(x);
    sum(rows * rows).backward();
    const Propagated p = propagate({rows, columns, all, x.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data"});
    EXPECT_OUTPUT(p, 1, m, {"model"});
    EXPECT_TRUE(p.output(2).is_replicated());
    // The sum's gradient broadcasts back along the features: whole on each device, no gather.
    EXPECT_OUTPUT(p, 3, m, {"data", None});
    const Checked r = check(p.c, p.shardings, m.devices());
    // rows over "model", columns (max) over "data", the mean over every device.
    EXPECT_EQ(r.count(Op::kAllReduce),
              more_than_one(m.model) + more_than_one(m.data) + more_than_one(m.devices()));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(ShardingRules, ASumIntoASplitResultReduceScatters) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    // FSDP's bias: kept split over "data" with its optimizer step; its gradient sums the batch,
    // split over "data" too. Summed and split at once: no all_reduce.
    const Tensor x = weight({kB, kH});
    const Tensor bias = weight({kH});
    mark_sharding(x, m.mesh(), {"data", None});
    mark_sharding(bias, m.mesh(), {"data"});
    sum(exp(x + bias)).backward();
    Tensor stepped;
    {
      const NoGradGuard no_grad;
      stepped = bias - bias.grad() * 0.1;
    }
    Tensor averaged = mean(x * 3.0, {0});
    mark_sharding(averaged, m.mesh(), {"data"});
    const Propagated p = propagate({stepped, averaged});
    EXPECT_OUTPUT(p, 0, m, {"data"});
    const Checked r = check(p.c, p.shardings, m.devices());
    // The forward gathers the bias (as FSDP gathers a parameter before use); the gradient and
    // the mean are reduce-scattered.
    EXPECT_EQ(r.count(Op::kReduceScatter), 2 * more_than_one(m.data));
    EXPECT_EQ(r.count(Op::kAllGather), more_than_one(m.data));
    EXPECT_EQ(r.total(), 3 * more_than_one(m.data));
  }
}

TEST(ShardingRules, ReshapeTransposeAndPermuteWhereDimsMapAndTheirGradients) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor x = weight({kB, 4, kD});
    mark_sharding(x, m.mesh(), {"data", "model", None});
    const Tensor merged = reshape(x, {kB, 4 * kD});  // 4 x 6 merge: its leading dim keeps "model"
    const Tensor moved = permute(x, {2, 0, 1});
    const Tensor swapped = transpose(x, 0, 1);
    sum(merged * merged).backward();
    const Propagated p = propagate({merged, moved, swapped, x.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", "model"});
    EXPECT_OUTPUT(p, 1, m, {None, "data", "model"});
    EXPECT_OUTPUT(p, 2, m, {"model", "data", None});
    EXPECT_OUTPUT(p, 3, m, {"data", "model", None});
    EXPECT_EQ(check(p.c, p.shardings, m.devices()).total(), 0);
  }
}

TEST(ShardingRules, SoftmaxAndLayerNormAlongAWholeDimAndTheirGradients) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor x = weight({kB, 4, kH});
    const Tensor gamma = weight({kH});
    const Tensor beta = weight({kH});
    mark_sharding(x, m.mesh(), {"data", "model", None});
    const Tensor probabilities = softmax(x, 2);
    const Tensor normalized = nn::layer_norm(x, {kH}, gamma, beta);
    sum(probabilities * normalized).backward();
    const Propagated p =
        propagate({probabilities, normalized, x.grad(), gamma.grad(), beta.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", "model", None});
    EXPECT_OUTPUT(p, 1, m, {"data", "model", None});
    EXPECT_OUTPUT(p, 2, m, {"data", "model", None});
    EXPECT_TRUE(p.output(3).is_replicated());
    EXPECT_TRUE(p.output(4).is_replicated());
    const Checked r = check(p.c, p.shardings, m.devices());
    // Rows are whole on every device: only gamma's and beta's gradients, sums over the rows of
    // every device, meet (once each, over all devices).
    EXPECT_EQ(r.count(Op::kAllReduce), 2 * more_than_one(m.devices()));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(ShardingRules, EmbeddingOverTheBatchAndTheEmbeddingDimAndItsGradient) {
  constexpr int64_t kVocabulary = 10;
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor ids = input({kB}, DType::kInt64, kVocabulary);
    const Tensor table = weight({kVocabulary, kH});
    mark_sharding(ids, m.mesh(), {"data"});
    mark_sharding(table, m.mesh(), {None, "model"});
    const Tensor rows = nn::embedding(ids, table);
    sum(rows * rows).backward();
    const Propagated p = propagate({rows, table.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", "model"});
    EXPECT_OUTPUT(p, 1, m, {None, "model"});  // the batch's rows summed into the table
    const Checked r = check(p.c, p.shardings, m.devices());
    EXPECT_EQ(r.count(Op::kAllReduce), more_than_one(m.data));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

TEST(ShardingRules, ScatterAddOverSplitRowsSumsPartialsAndAddsTheBaseOnce) {
  constexpr int64_t kRows = 64;  // many rows into a small table: summing beats gathering
  constexpr int64_t kTable = 16;
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor base = input({kTable, kH});  // not zero: added once, not once per device
    const Tensor index = input({kRows, kH}, DType::kInt64, kTable);
    const Tensor src = input({kRows, kH});
    mark_sharding(index, m.mesh(), {"data", None});
    mark_sharding(src, m.mesh(), {"data", None});
    const Tensor whole = scatter_add(base, 0, index, src);
    Tensor split = scatter_add(base, 0, index, src * 2.0);
    mark_sharding(split, m.mesh(), {"data", None});
    const Propagated p = propagate({whole, split});
    EXPECT_TRUE(p.output(0).is_replicated());
    EXPECT_OUTPUT(p, 1, m, {"data", None});
    const Checked r = check(p.c, p.shardings, m.devices());
    // Each device scatters its rows; the partial tables meet once over "data": summed whole,
    // or summed and split at once (reduce_scatter) where the result is split over "data".
    EXPECT_EQ(r.count(Op::kAllReduce), more_than_one(m.data));
    EXPECT_EQ(r.count(Op::kReduceScatter), more_than_one(m.data));
    EXPECT_EQ(r.total(), 2 * more_than_one(m.data));
  }
}

TEST(ShardingRules, ArgmaxCumsumAndTopkAlongASplitDimMoveOnlyWhatTheyPick) {
  constexpr int64_t kWide = 1024;  // over "model"; wide enough that gathering it costs most
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor x = weight({kB, kWide});
    const Tensor w = input({kB, kWide});
    mark_sharding(x, m.mesh(), {"data", "model"});
    mark_sharding(w, m.mesh(), {"data", "model"});
    const Tensor scanned = cumsum(x, 1);
    sum(scanned * w).backward();  // the gradient is a reversed scan
    const TopK top = topk(x, 3, 1);
    const Propagated p = propagate({argmax(x, 1), scanned, x.grad(), top.values, top.indices});
    EXPECT_OUTPUT(p, 0, m, {"data"});
    EXPECT_OUTPUT(p, 1, m, {"data", "model"});
    EXPECT_OUTPUT(p, 2, m, {"data", "model"});
    EXPECT_OUTPUT(p, 3, m, {"data", None});
    EXPECT_OUTPUT(p, 4, m, {"data", None});
    const Checked r = check(p.c, p.shardings, m.devices());
    // Over "model": argmax gathers each device's first maximum and its position, each scan its
    // shards' totals, topk each device's top 3 and their positions; the values picked at the
    // top positions are summed from the devices holding them.
    EXPECT_EQ(r.count(Op::kAllGather), 6 * more_than_one(m.model));
    EXPECT_EQ(r.count(Op::kAllReduce), more_than_one(m.model));
    EXPECT_EQ(r.total(), 7 * more_than_one(m.model));
    // Far less than gathering x even once.
    const int64_t x_gathered = kB / m.data * kWide / m.model * 4 * (m.model - 1);
    EXPECT_LT(r.partitioned.collective_bytes, std::max<int64_t>(x_gathered / 2, 1));
  }
}

// The random ops' values are the unpartitioned program's, and a device draws only its rows.
TEST(ShardingRules, RandomOpsDrawOnlyEachDevicesRows) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    set_rng_state(3);
    Tensor uniform = rand({kB, kH});
    Tensor normal = randn({kB, 2, kD});
    Tensor ints = randint(0, 100, {kB, kH});
    Tensor coins = bernoulli(sigmoid(input({kB, kH})));
    mark_sharding(uniform, m.mesh(), {"data", "model"});
    mark_sharding(normal, m.mesh(), {"data", None, None});
    mark_sharding(ints, m.mesh(), {"data", None});
    mark_sharding(coins, m.mesh(), {"data", None});
    const Propagated p = propagate({uniform, normal, ints, coins});
    const Checked r = check(p.c, p.shardings, m.devices());
    EXPECT_EQ(r.total(), 0);
    // Each draw makes one device's rows: kB / data of them.
    int draws = 0;
    const Program& local = r.partitioned.program;
    for (std::size_t id = 0; id < local.size(); ++id) {
      const Op op = local[id].op;
      if (op != Op::kRandUniform && op != Op::kRandNormal && op != Op::kRandInt &&
          op != Op::kBernoulli) {
        continue;
      }
      EXPECT_EQ(local[id].shape[0], kB / m.data) << op_name(op);
      ++draws;
    }
    EXPECT_EQ(draws, 4);
  }
}

TEST(ShardingRules, ConvolutionOverTheBatchAndItsGradients) {
  for (const MeshCase& m : meshes()) {
    SCOPED_TRACE(m.name());
    const Tensor images = weight({kB, 3, 5, 5});
    const Tensor kernel = weight({4, 3, 3, 3});
    const Tensor bias = weight({4});
    mark_sharding(images, m.mesh(), {"data", None, None, None});
    const Tensor y = conv2d(images, kernel, bias, {.padding = {1, 1}});
    sum(y * y).backward();
    const Propagated p = propagate({y, images.grad(), kernel.grad(), bias.grad()});
    EXPECT_OUTPUT(p, 0, m, {"data", None, None, None});
    EXPECT_OUTPUT(p, 1, m, {"data", None, None, None});
    EXPECT_TRUE(p.output(2).is_replicated());
    EXPECT_TRUE(p.output(3).is_replicated());
    const Checked r = check(p.c, p.shardings, m.devices());
    // The kernel's and the bias's gradients sum over the batch: one all_reduce each over "data".
    EXPECT_EQ(r.count(Op::kAllReduce), 2 * more_than_one(m.data));
    EXPECT_EQ(r.total(), r.count(Op::kAllReduce));
  }
}

}  // namespace
}  // namespace axle
