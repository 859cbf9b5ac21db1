// IR nodes held by tensors in static storage die after the thread's own thread_locals (the node
// block cache among them); that must not crash at exit.
#include <gtest/gtest.h>

#include <thread>

#include "axle/graph/ops.h"

namespace axle {
namespace {

Tensor g_held_past_main;  // destroyed after main returns

TEST(NodeLifetime, TensorsInStaticStorageMayOutliveTheMainThreadsCache) {
  Tensor x = zeros({4});
  for (int i = 0; i < 100; ++i) x = x + 1.0;
  g_held_past_main = x;
  EXPECT_EQ(x.shape(), (Shape{4}));
}

TEST(NodeLifetime, NodesMadeOnAnotherThreadMayDieOnThisOne) {
  Tensor made_elsewhere;
  std::thread t([&] {
    Tensor y = ones({2});
    for (int i = 0; i < 100; ++i) y = y * 3.0;
    made_elsewhere = y;
  });
  t.join();
  EXPECT_TRUE(made_elsewhere.impl()->pending_ir());
  made_elsewhere = Tensor();  // the other thread's nodes are freed here
  g_held_past_main = ones({3}) - 1.0;
}

}  // namespace
}  // namespace axle
