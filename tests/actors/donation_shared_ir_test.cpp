// Buffer donation once another thread has built on this thread's pending IR: whether that
// thread's nodes die with a step is not this thread's to know, so no step donates from then on.
// (Its own binary: the condition is process-wide and sticky.)
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"

namespace axle {
namespace {

int64_t count(const char* name) { return counter_value(name).value_or(0); }

TEST(DonationWithSharedIr, StopsOnceAnotherThreadBuildsOnThisThreadsGraph) {
  LazySystem::restart();
  clear_all();
  const std::vector<float> values = {1, 2, 3, 4};
  Tensor w = tensor(values, {4});
  w = w * 2.0;
  mark_step();
  EXPECT_EQ(count("DonatedInputs"), 1);  // donation works in this process

  // Another thread builds on this thread's pending w * 2, and keeps what it built.
  w = w * 2.0;
  Tensor kept;
  std::thread([&] { kept = w + 1.0; }).join();
  EXPECT_TRUE(Node::ir_shared_across_threads());
  w = w * 2.0;
  mark_step();
  EXPECT_EQ(count("DonatedInputs"), 1);
  // The other thread's graph still reads the data the step would have donated.
  const std::vector<float> got = kept.to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], values[i] * 4 + 1) << i;
  EXPECT_EQ(w.to_vector<float>()[3], values[3] * 8);
}

}  // namespace
}  // namespace axle
