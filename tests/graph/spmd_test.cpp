// graph/spmd.h on each runtime (tests/graph/test_runtime.h): HybridMesh's device order,
// mark_sharding on computed tensors (a custom_sharding node, identity when executed) and on
// device data (the leaf carries the sharding, across steps), get_sharding_spec and
// clear_sharding as torch_xla's, the dumps, and the errors.
#include "axle/graph/spmd.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "axle/graph/autograd.h"
#include "axle/graph/dump.h"
#include "axle/graph/nn/layers.h"
#include "axle/graph/ops.h"
#include "axle/graph/step_graph.h"
#include "tests/graph/test_runtime.h"

namespace axle::testing {
namespace {

using spmd::clear_sharding;
using spmd::get_sharding_spec;
using spmd::mark_sharding;
constexpr auto None = std::nullopt;

const Mesh kLine({0, 1}, {2}, {"x"});

class Spmd : public ::testing::Test {
 protected:
  void SetUp() override { fresh_runtime(); }
};

Tensor random_tensor(std::mt19937& rng, const Shape& shape) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> values(static_cast<std::size_t>(shape.numel()));
  for (float& v : values) v = u(rng);
  return tensor(values, shape);
}

TEST(HybridMesh, PutsProcessesOutermostAlongEachAxis) {
  // Two processes of four devices, processes along axis 0: each row is one process.
  const spmd::HybridMesh rows({1, 4}, {2, 1}, {"dcn", "ici"});
  EXPECT_EQ(rows.mesh_shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(rows.device_ids(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Processes along axis 1 (np.block of [[p0, p1]] with p = its devices as a 2x1 column).
  const spmd::HybridMesh columns({2, 1}, {1, 2});
  EXPECT_EQ(columns.device_ids(), (std::vector<int64_t>{0, 2, 1, 3}));
  // Both axes split: 2x2 processes of 1x2 devices; position (r, c) = process (r, c / 2),
  // local device c % 2.
  const spmd::HybridMesh both({1, 2}, {2, 2});
  std::vector<int64_t> want;
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 4; ++c) want.push_back((r * 2 + c / 2) * 2 + c % 2);
  }
  EXPECT_EQ(both.device_ids(), want);
  EXPECT_THROW(spmd::HybridMesh({1, 2}, {2}), std::invalid_argument);
}

TEST_F(Spmd, AnnotatesAComputedTensorInPlaceAndRunsAsIdentity) {
  std::mt19937 rng(1);
  const Tensor a = random_tensor(rng, {4, 6});
  Tensor y = exp(a);
  const Tensor alias = y;
  EXPECT_EQ(get_sharding_spec(y), "");
  EXPECT_EQ(&mark_sharding(y, kLine, {"x", None}), &y);
  EXPECT_EQ(get_sharding_spec(alias), "{devices=[2,1]0,1}");
  ASSERT_TRUE(y.impl()->pending_ir());
  EXPECT_EQ(y.impl()->ir()->op(), Op::kCustomSharding);
  EXPECT_NE(tensors_text({y}).find("custom_sharding(%1), sharding={devices=[2,1]0,1}"),
            std::string::npos)
      << tensors_text({y});
  // Marking again with another spec replaces the annotation instead of stacking one.
  mark_sharding(y, kLine, {None, "x"});
  EXPECT_EQ(y.impl()->ir()->operands()[0]->op(), Op::kExp);
  EXPECT_EQ(get_sharding_spec(y), "{devices=[1,2]0,1}");
  const Tensor z = y * 2.0;
  sync_step();
  const std::vector<float> in = a.to_vector<float>();
  const std::vector<float> out = y.to_vector<float>();
  const std::vector<float> twice = z.to_vector<float>();
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_FLOAT_EQ(out[i], std::exp(in[i]));
    EXPECT_FLOAT_EQ(twice[i], 2 * out[i]);
  }
  // After the step the tensor holds data and keeps its sharding.
  EXPECT_EQ(get_sharding_spec(y), "{devices=[1,2]0,1}");
}

TEST_F(Spmd, ClearShardingRemovesTheAnnotation) {
  std::mt19937 rng(2);
  Tensor y = exp(random_tensor(rng, {4, 6}));
  mark_sharding(y, kLine, {"x", None});
  clear_sharding(y);
  EXPECT_EQ(get_sharding_spec(y), "");
  EXPECT_EQ(y.impl()->ir()->op(), Op::kExp);
}

TEST_F(Spmd, DeviceDataKeepsItsShardingOnItsLeafAcrossSteps) {
  std::mt19937 rng(3);
  nn::Linear linear(6, 4);
  sync_step();  // the parameters now hold data
  const Tensor& weight = linear.weight();
  const uint64_t plain_hash = weight.impl()->value_node({})->hash();
  mark_sharding(weight, kLine, {"x", None});
  EXPECT_FALSE(weight.impl()->pending_ir());
  const NodePtr leaf = weight.impl()->value_node({});
  EXPECT_EQ(leaf->op(), Op::kDeviceData);
  EXPECT_NE(leaf->hash(), plain_hash);  // the leaf's hash covers the sharding
  EXPECT_NE(tensors_text({weight}).find("device_data, sharding={devices=[2,1]0,1}"),
            std::string::npos)
      << tensors_text({weight});
  // A step that updates the weight in place leaves it with the same sharding.
  const std::vector<float> before = weight.to_vector<float>();
  {
    NoGradGuard no_grad;
    weight.copy_(weight * 0.5);
  }
  sync_step();
  EXPECT_EQ(get_sharding_spec(weight), "{devices=[2,1]0,1}");
  EXPECT_EQ(weight.impl()->value_node({})->hash(), leaf->hash());
  const std::vector<float> after = weight.to_vector<float>();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i] * 0.5f);
  // The module runs as it did: its output against a double loop over its parameters.
  const Tensor x = random_tensor(rng, {3, 6});
  Tensor y = linear.forward(x);
  mark_sharding(y, kLine, {None, "x"});
  sync_step();
  const std::vector<float> xs = x.to_vector<float>();
  const std::vector<float> ws = weight.to_vector<float>();
  const std::vector<float> bs = linear.bias().to_vector<float>();
  const std::vector<float> ys = y.to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    for (int o = 0; o < 4; ++o) {
      double want = bs[o];
      for (int k = 0; k < 6; ++k) want += static_cast<double>(xs[i * 6 + k]) * ws[o * 6 + k];
      EXPECT_NEAR(ys[i * 4 + o], want, 1e-5) << i << "," << o;
    }
  }
  clear_sharding(weight);
  EXPECT_EQ(weight.impl()->value_node({})->hash(), plain_hash);
}

TEST_F(Spmd, ErrorsNameTheOpTheTensorTheSpecAndTheLine) {
  std::mt19937 rng(4);
  const Tensor y = exp(random_tensor(rng, {7, 4}));
  auto message = [&](const PartitionSpec& spec) -> std::string {
    try {
      mark_sharding(y, kLine, spec);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string uneven = message({"x", None});
  EXPECT_NE(uneven.find("mark_sharding"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("f32[7,4]"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("('x', None)"), std::string::npos) << uneven;
  EXPECT_NE(uneven.find("spmd_test.cpp"), std::string::npos) << uneven;
  const std::string rank = message({"x"});
  EXPECT_NE(rank.find("1 entries for a tensor of rank 2"), std::string::npos) << rank;
  const std::string axis = message({"y", None});
  EXPECT_NE(axis.find("no axis is named 'y'"), std::string::npos) << axis;
  EXPECT_EQ(get_sharding_spec(y), "");  // a failed mark leaves the tensor as it was
}

}  // namespace
}  // namespace axle::testing
