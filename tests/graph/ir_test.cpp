// Tests graph/ir.h through traced ops: what node hashes cover (so what recompiles), how scalars
// become parameters or constants, destruction of very long chains, and the per-op counters.
#include "axle/graph/ir.h"
#include "axle/graph/trace_context.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "axle/engine/config.h"
#include "axle/engine/metrics.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

uint64_t hash_of(const Tensor& x) { return x.impl()->ir()->hash(); }

// A small training-step-like program over an input of `shape` and `dtype`.
Tensor program(const Shape& shape, DType dtype = DType::kFloat32, int64_t softmax_dim = 1) {
  const Tensor x = zeros(shape, dtype);
  const Tensor w = full({shape[1], 4}, 0.25, dtype);
  const Tensor h = relu(matmul(x, w) * 0.5 + 1.0);
  return sum(softmax(h, softmax_dim), {0});
}

Tensor device_data_tensor(const Shape& shape, DType dtype = DType::kFloat32) {
  return Tensor(
      make_intrusive<TensorImpl>(dtype, make_intrusive<DeviceData>(Device{}, dtype, shape)));
}

TEST(NodeHash, EqualForTheSameProgramBuiltTwice) {
  EXPECT_EQ(hash_of(program({2, 3})), hash_of(program({2, 3})));
}

TEST(NodeHash, DiffersWhenAShapeDiffers) {
  EXPECT_NE(hash_of(program({2, 3})), hash_of(program({5, 3})));
}

TEST(NodeHash, DiffersWhenADtypeDiffers) {
  EXPECT_NE(hash_of(program({2, 3})), hash_of(program({2, 3}, DType::kFloat64)));
}

TEST(NodeHash, DiffersWhenAnAttributeDiffers) {
  EXPECT_NE(hash_of(program({4, 4}, DType::kFloat32, 0)),
            hash_of(program({4, 4}, DType::kFloat32, 1)));
  const Tensor x = zeros({3, 3});
  EXPECT_NE(hash_of(sum(x, {0})), hash_of(sum(x, {1})));
  EXPECT_NE(hash_of(transpose(x, 0, 1)), hash_of(permute(x, {0, 1})));
}

TEST(NodeHash, IgnoresTheValueOfANonSpecialScalar) {
  const Tensor x = zeros({2, 3});
  EXPECT_EQ(hash_of(x * 0.5), hash_of(x * 0.25));
  EXPECT_EQ(hash_of(full({2}, 3.0)), hash_of(full({2}, -7.5)));
  EXPECT_EQ(x.impl()->ir()->operands()[0]->op(), Op::kConstant);  // zeros fills with constant 0
  EXPECT_EQ((x * 0.5).impl()->ir()->operands()[1]->op(), Op::kParameter);
}

TEST(NodeHash, DistinguishesTheConstantsZeroAndOne) {
  const Tensor x = zeros({2, 3});
  EXPECT_NE(hash_of(x * 0), hash_of(x * 1));
  EXPECT_NE(hash_of(x * 0), hash_of(x * 0.5));
  EXPECT_EQ(hash_of(x * 1), hash_of(x * 1));
}

TEST(NodeHash, IgnoresTheDataOfDeviceDataLeaves) {
  const Tensor a = device_data_tensor({2, 3});
  const Tensor b = device_data_tensor({2, 3});
  EXPECT_EQ(hash_of(a + 1.0), hash_of(b + 1.0));
  EXPECT_NE(hash_of(a + 1.0), hash_of(device_data_tensor({3, 2}) + 1.0));
}

TEST(NodeHash, IgnoresTheRandomStreamPosition) {
  const Tensor first = rand({3});
  const Tensor second = rand({3});
  EXPECT_NE(first.impl()->ir()->operands()[1]->value(),
            second.impl()->ir()->operands()[1]->value());
  EXPECT_EQ(hash_of(first), hash_of(second));
}

// Turns XLA_NO_SPECIAL_SCALARS on for one test and restores the default after it.
class NoSpecialScalars : public ::testing::Test {
 protected:
  void SetUp() override {
    config::set("XLA_NO_SPECIAL_SCALARS", "1");
    ops::reload_dtype_config();
  }
  void TearDown() override {
    config::unset("XLA_NO_SPECIAL_SCALARS");
    ops::reload_dtype_config();
  }
};

TEST_F(NoSpecialScalars, MakesZeroAndOneParameters) {
  const Tensor x = full({2, 3}, 2.0);
  EXPECT_EQ(hash_of(x * 0), hash_of(x * 1));
  EXPECT_EQ((x * 0).impl()->ir()->operands()[1]->op(), Op::kParameter);
  EXPECT_EQ(hash_of(zeros({2})), hash_of(ones({2})));
}

TEST(NodeLifetime, DroppingAMillionNodeChainDoesNotOverflowTheStack) {
  Tensor x = zeros({2}) + 1.0;
  const NodePtr bottom = x.impl()->ir();
  for (int i = 0; i < 1'000'000; ++i) x = x + 1.0;
  EXPECT_EQ(x.shape(), Shape{2});
  // Out of the creation log (as after a sync that did not include x), the tensor holds the only
  // reference to the tip, so dropping it releases the whole chain from the tip down.
  TraceContext::current().creation_log().clear();
  EXPECT_EQ(bottom->use_count(), 2);  // this test and the node above
  x = Tensor{};  // the last reference: every node of the chain above `bottom` goes now
  EXPECT_EQ(bottom->use_count(), 1);
}

TEST(CreationLog, HoldsTheOpNodesOfThisThreadInCreationOrder) {
  CreationLog& log = TraceContext::current().creation_log();
  log.clear();
  const Tensor a = device_data_tensor({2});
  const Tensor b = a + 2.0;
  const Tensor c = exp(b);
  ASSERT_EQ(log.nodes().size(), 2u);  // the leaves (a, the scalar 2) are not logged
  EXPECT_EQ(log.nodes()[0], b.impl()->ir().get());
  EXPECT_EQ(log.nodes()[1], c.impl()->ir().get());
  EXPECT_TRUE(log.contains(c.impl()->ir().get()));
  EXPECT_FALSE(log.contains(c.impl()->ir()->operands()[0]->operands()[1].get()));
  log.clear();
  EXPECT_TRUE(log.nodes().empty());
  EXPECT_FALSE(log.contains(c.impl()->ir().get()));
  EXPECT_EQ(c.impl()->ir()->operands()[0], b.impl()->ir());  // tensors keep their graphs
}

TEST(CreationLog, ClearingFreesWhatOnlyTheLogHeld) {
  CreationLog& log = TraceContext::current().creation_log();
  log.clear();
  auto data = make_intrusive<DeviceData>(Device{}, DType::kFloat32, Shape{4});
  { const Tensor garbage = exp(Tensor(make_intrusive<TensorImpl>(DType::kFloat32, data)) * 3.0); }
  EXPECT_GT(data->use_count(), 1);  // the dropped graph still reads it, through the log
  log.clear();
  EXPECT_EQ(data->use_count(), 1);
}

TEST(CreationLog, ThreadsThatNeverSyncKeepNoGarbage) {
  std::size_t longest = 0;
  std::thread tracer([&] {
    const Tensor a = zeros({2});
    for (int i = 0; i < 100'000; ++i) {
      const Tensor dropped = (a + 1.0) * 2.0;
      longest = std::max(longest, TraceContext::current().creation_log().nodes().size());
    }
  });
  tracer.join();
  EXPECT_LT(longest, 3 * 4096u);  // compacted as it doubles past its last live size
}

TEST(OpCounters, CountEveryTracedAdd) {
  const int64_t before = counter_value("xla::add").value_or(0);
  const Tensor a = zeros({2});
  const Tensor b = add(a, a);
  const Tensor c = b + 2.0;
  const Tensor d = 3.0 + c;
  const Tensor e = a + d;
  EXPECT_EQ(counter_value("xla::add").value_or(0), before + 4);
  (void)e;
}

TEST(OpCounters, CountAVectorDotAsOneMatmul) {
  const int64_t before = counter_value("xla::matmul").value_or(0);
  const Tensor dot = matmul(zeros({3}), zeros({3}));
  EXPECT_EQ(counter_value("xla::matmul").value_or(0), before + 1);
  (void)dot;
}

}  // namespace
}  // namespace axle
