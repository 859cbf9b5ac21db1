// graph/autocast.h across replicas: the autocast state is part of each replica thread's trace
// context, so a region on one replica (or on the thread that calls spawn) changes nothing on the
// others, even while both trace at the same time.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

class AutocastReplicas : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
};

TEST_F(AutocastReplicas, EachReplicaHasItsOwnState) {
  struct Seen {
    bool enabled = false;
    DType product = DType::kBool;
    std::vector<float> values;
  };
  std::array<Seen, 2> seen;
  const std::vector<float> a{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  autocast outer;  // the spawning thread's region reaches no replica
  spawn([&](int ordinal) {
    std::optional<autocast> region;
    if (ordinal == 0) region.emplace(Device{});
    // Both replicas trace with replica 0's region open.
    (void)rendezvous("regions open");
    const Tensor x = tensor(a, Shape{2, 3});
    const Tensor product = matmul(x, transpose(x, 0, 1));
    seen[ordinal].enabled = is_autocast_enabled();
    seen[ordinal].product = product.dtype();
    (void)rendezvous("traced");
    mark_step();
    seen[ordinal].values = cast(product, DType::kFloat32).to_vector<float>();
  });
  EXPECT_TRUE(seen[0].enabled);
  EXPECT_FALSE(seen[1].enabled);
  EXPECT_EQ(seen[0].product, DType::kBFloat16);
  EXPECT_EQ(seen[1].product, DType::kFloat32);
  // x·xᵀ in f32 on replica 1; its bf16 rounding on replica 0 (0.14 is not a bf16 number).
  EXPECT_FLOAT_EQ(seen[1].values[0], 0.14f);
  EXPECT_NE(seen[0].values[0], seen[1].values[0]);
  EXPECT_NEAR(seen[0].values[0], 0.14f, 0.14f / 128);
  EXPECT_TRUE(is_autocast_enabled());
}

}  // namespace
}  // namespace axle
