// The compiler at scale: no recursion on graph depth anywhere between tracing and execution.
#include <gtest/gtest.h>

#include "axle/axle.h"

namespace axle {
namespace {

TEST(CompilerAtScale, CompilesAndRunsAMillionNodeChain) {
  Tensor x = zeros({2});
  mark_step();
  constexpr int kOps = 500'000;  // each add also has its constant 1: a million nodes
  for (int i = 0; i < kOps; ++i) x = x + 1.0;
  mark_step();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{kOps, kOps}));
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0), 2);
}

}  // namespace
}  // namespace axle
