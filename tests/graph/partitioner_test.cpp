// graph/passes: the SPMD partitioner. Each case traces a global program, gives every
// instruction a sharding (by hand, or by a trivial rule: a dim of a given size is split over a
// mesh axis), partitions it for 1, 2 and 4 devices (meshes 1x1, 2x1, 1x2, 4x1, 1x4, 2x2) and
// runs the per-device program on every device in lockstep (partition_harness.h): the outputs
// must equal the global program's reference values. The collectives inserted are checked by
// kind and count.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "axle/graph/collectives.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/nn/loss.h"
#include "axle/graph/ops.h"
#include "partition_harness.h"

namespace axle {
namespace {

using namespace partition_test;  // NOLINT(google-build-using-namespace): the harness

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
    // both read x gathered over "model", gathered once.
    EXPECT_EQ(r.count(Op::kAllGather), m.model > 1 ? 1 : 0);
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
  // The same tiles on other devices: each device receives its tile (one collective_permute).
  // The tiles of another dim: gathered and sliced again (never an all_to_all, whose blocks would
  // land on the wrong devices).
  const Checked r = check(c, {forward, swapped, other_dim}, 4);
  EXPECT_EQ(r.count(Op::kCollectivePermute), 1);
  EXPECT_EQ(r.count(Op::kAllGather), 1);
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
  const Tensor ids = input({kB}, DType::kInt64, 10);
  const Tensor table = input({10, kD});
  const Tensor images = input({kB, 3, 5, 5});
  const Tensor kernel = input({4, 3, 3, 3});
  const Tensor logits = input({kB, kC});
  const Tensor target = input({kB}, DType::kInt64, kC);
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
  const Tensor ids = input({kB}, DType::kInt64, kVocabulary);
  const Tensor table = input({kVocabulary, 16});
  const Tensor many_ids = input({kB, 16}, DType::kInt64, kVocabulary);
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
  const Tensor target = input({kB}, DType::kInt64, kVocabulary);
  // A row of -inf (its logsumexp is -inf, its softmax NaN, as unpartitioned).
  const Tensor first_row = lt(arange(0, kB, 1, DType::kInt64), 1.0);
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
  const Tensor a = arange(0, kH, 1, DType::kInt64);
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
  const Tensor index = input({kB, 3}, DType::kInt64, kH);
  const Tensor src = input({kB, 3});
  const Tensor rows = input({kB}, DType::kInt64, kB);
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
    // Convolution and barriers are local; bernoulli draws each device's rows (split over
    // "data") whole, so its probabilities are gathered over "model" only.
    EXPECT_EQ(r.count(Op::kAllGather), m.model > 1 ? 1 : 0);
    EXPECT_EQ(r.total(), r.count(Op::kAllGather));
  }
}

// A two-layer MLP's training step (forward, backward, SGD): returns the loss and new weights.
Case mlp_step(bool gelu_activation) {
  const Tensor x = input({kB, kD});
  const Tensor target = input({kB}, DType::kInt64, kC);
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
