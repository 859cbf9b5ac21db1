// graph/trace_context.h: one trace context per replica thread — its pending tensors, creation log,
// random streams, grad mode and default device — and the device scopes of graph/device.h. Links
// the graph layer only: nothing here executes.
#include "axle/graph/trace_context.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <latch>
#include <thread>
#include <vector>

#include "axle/graph/autograd.h"
#include "axle/graph/device.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

// Runs `fn` on a new thread and waits for it.
void on_another_thread(const std::function<void()>& fn) {
  std::thread t(fn);
  t.join();
}

bool holds(const std::vector<Tensor>& tensors, const Tensor& t) {
  return std::ranges::any_of(tensors, [&](const Tensor& each) { return each.impl() == t.impl(); });
}

TEST(TraceContext, EachThreadHasItsOwn) {
  TraceContext* main_context = &TraceContext::current();
  EXPECT_EQ(&TraceContext::current(), main_context);  // made once, then the same
  TraceContext* other = nullptr;
  uint32_t other_id = 0;
  on_another_thread([&] {
    EXPECT_EQ(TraceContext::current_if_any(), nullptr);  // nothing traced there yet
    other = &TraceContext::current();
    other_id = other->id();
    EXPECT_EQ(TraceContext::current_if_any(), other);
  });
  EXPECT_NE(other, main_context);
  EXPECT_NE(other_id, main_context->id());
  EXPECT_NE(other_id, 0u);
}

TEST(TraceContext, PendingTensorsAreTrackedByTheThreadThatTracedThem) {
  const Tensor here = zeros({2}) + 1.5;
  EXPECT_TRUE(holds(TraceContext::current().pending_tensors(), here));
  const std::size_t pending_here = TraceContext::current().pending_count();
  on_another_thread([&] {
    TraceContext& context = TraceContext::current();
    EXPECT_EQ(context.pending_count(), 0u);
    const Tensor there = here * 2.0;  // built on this thread's tensor, pending on this one
    const Tensor second = there - 1.0;
    const std::vector<Tensor> pending = context.pending_tensors();
    ASSERT_EQ(pending.size(), 2u);
    EXPECT_EQ(pending[0].impl(), there.impl());  // oldest first
    EXPECT_EQ(pending[1].impl(), second.impl());
    EXPECT_FALSE(holds(pending, here));
  });
  // The other thread's tensors died with it; none joined this thread's list.
  EXPECT_EQ(TraceContext::current().pending_count(), pending_here);
}

TEST(TraceContext, PendingTensorsCanBeListedForOneDevice) {
  TraceContext& context = TraceContext::current();
  const Tensor on_0 = zeros({2}, DType::kFloat32, Device{0}) + 3.0;
  const Tensor on_1 = zeros({2}, DType::kFloat32, Device{1}) + 3.0;
  const Device zero{0};
  const Device one{1};
  EXPECT_TRUE(holds(context.pending_tensors(&zero), on_0));
  EXPECT_FALSE(holds(context.pending_tensors(&zero), on_1));
  EXPECT_TRUE(holds(context.pending_tensors(&one), on_1));
  EXPECT_TRUE(holds(context.pending_tensors(), on_0));
  EXPECT_TRUE(holds(context.pending_tensors(), on_1));
}

TEST(TraceContext, EachThreadLogsTheOpNodesItCreates) {
  CreationLog& log = TraceContext::current().creation_log();
  log.clear();
  const Tensor x = zeros({3});
  const std::size_t before = log.nodes().size();
  const Tensor y = x * 2.0 + 1.0;
  EXPECT_EQ(log.nodes().size(), before + 2);
  EXPECT_EQ(log.nodes().back(), y.impl()->ir().get());
  on_another_thread([&] {
    CreationLog& theirs = TraceContext::current().creation_log();
    EXPECT_NE(&theirs, &log);
    const Tensor z = exp(y);
    ASSERT_EQ(theirs.nodes().size(), 1u);
    EXPECT_EQ(theirs.nodes()[0], z.impl()->ir().get());
    EXPECT_EQ(z.impl()->ir()->creator_id(), TraceContext::current().id());
  });
  EXPECT_EQ(log.nodes().size(), before + 2);  // the other thread's exp is not in this log
  EXPECT_EQ(y.impl()->ir()->creator_id(), TraceContext::current().id());
}

TEST(TraceContext, EachThreadHasItsOwnRandomStreams) {
  set_rng_state(7);
  const RngState before = TraceContext::current().rng_state(Device{});
  (void)rand({8});
  EXPECT_EQ(TraceContext::current().rng_state(Device{}).offset, before.offset + 8);
  on_another_thread([] {
    EXPECT_EQ(get_rng_state(), 101u);  // the default seed, not the main thread's 7
    EXPECT_EQ(TraceContext::current().rng_state(Device{}).offset, 0u);
    (void)rand({4});
    set_rng_state(99);
    (void)randn({12});
    EXPECT_EQ(TraceContext::current().rng_state(Device{}).offset, 12u);
  });
  EXPECT_EQ(get_rng_state(), 7u);
  EXPECT_EQ(TraceContext::current().rng_state(Device{}).offset, before.offset + 8);
}

TEST(TraceContext, EachThreadHasItsOwnGradMode) {
  const Tensor w = zeros({2});
  w.requires_grad_();
  NoGradGuard no_grad;
  EXPECT_FALSE(GradMode::is_enabled());
  EXPECT_FALSE((w * 2.0).requires_grad());
  on_another_thread([&] {
    EXPECT_TRUE(GradMode::is_enabled());  // on by default, whatever the main thread set
    EXPECT_TRUE((w * 2.0).requires_grad());
    GradMode::set_enabled(false);
    EXPECT_FALSE((w * 3.0).requires_grad());
  });
  EXPECT_FALSE(GradMode::is_enabled());
  {
    AutoGradMode grad(true);
    EXPECT_TRUE((w * 2.0).requires_grad());
  }
  EXPECT_FALSE(GradMode::is_enabled());
}

TEST(TraceContext, GradModeIsOnForAThreadWithoutAContext) {
  on_another_thread([] {
    EXPECT_TRUE(GradMode::is_enabled());
    EXPECT_EQ(TraceContext::current_if_any(), nullptr);  // asking made none
  });
}

TEST(TraceContext, EachThreadHasItsOwnDefaultDevice) {
  DefaultDeviceScope on_two(Device{2});
  EXPECT_EQ(Device{}.ordinal, 2);
  EXPECT_EQ(zeros({1}).device().ordinal, 2);
  on_another_thread([] {
    EXPECT_EQ(Device{}.ordinal, 0);
    EXPECT_EQ(zeros({1}).device().ordinal, 0);
    DefaultDeviceScope on_three(Device{3});
    EXPECT_EQ(ones({1}).device().ordinal, 3);
  });
  EXPECT_EQ(Device{}.ordinal, 2);
}

// A pending tensor holds its thread's pending list (not the whole TraceContext, which goes with
// the thread): mark_step on another thread can still find and execute it.
TEST(TraceContext, PendingListOutlivesItsThreadWhileAPendingTensorHoldsIt) {
  Tensor survivor;
  PendingTensors* theirs = nullptr;
  on_another_thread([&] {
    survivor = zeros({4}) + 2.0;
    theirs = &PendingTensors::current();
    EXPECT_EQ(theirs->count(), TraceContext::current().pending_count());
  });
  // The thread and its binding are gone; its list still holds the tensor it traced.
  ASSERT_TRUE(survivor.impl()->pending_ir());
  EXPECT_EQ(theirs->count(), 1u);
  const std::vector<Tensor> pending = theirs->tensors();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].impl(), survivor.impl());
  // Building on it from here tracks the new tensor here, not there.
  const Tensor next = survivor * 3.0;
  EXPECT_TRUE(holds(TraceContext::current().pending_tensors(), next));
  EXPECT_EQ(theirs->count(), 1u);
  survivor = Tensor();  // the last reference to the dead thread's list goes with it
}

TEST(DefaultDeviceScope, RestoresThePreviousDefaultWhenNested) {
  on_another_thread([] {
    EXPECT_EQ(default_device_ordinal(), 0);
    {
      DefaultDeviceScope outer(Device{1});
      EXPECT_EQ(default_device_ordinal(), 1);
      {
        DefaultDeviceScope inner(Device{4});
        EXPECT_EQ(Device{}.ordinal, 4);
      }
      EXPECT_EQ(Device{}.ordinal, 1);
    }
    EXPECT_EQ(Device{}.ordinal, 0);
  });
}

TEST(ReplicaScope, SetsAndRestoresTheDefaultDeviceAndWorldSize) {
  on_another_thread([] {
    EXPECT_EQ(replica_world_size(), 1);
    {
      ReplicaScope replica(Device{2}, 4);
      EXPECT_EQ(Device{}.ordinal, 2);
      EXPECT_EQ(replica_world_size(), 4);
      EXPECT_EQ(TraceContext::current().world_size(), 4);
      {
        ReplicaScope sub(Device{1}, 2);
        EXPECT_EQ(Device{}.ordinal, 1);
        EXPECT_EQ(replica_world_size(), 2);
      }
      EXPECT_EQ(Device{}.ordinal, 2);
      EXPECT_EQ(replica_world_size(), 4);
      {
        DefaultDeviceScope device_only(Device{3});
        EXPECT_EQ(replica_world_size(), 4);  // a device scope leaves the world size alone
      }
    }
    EXPECT_EQ(Device{}.ordinal, 0);
    EXPECT_EQ(replica_world_size(), 1);
  });
}

TEST(ReplicaScope, OneThreadsScopeLeavesTheOthersAlone) {
  std::latch entered(1);
  std::latch checked(1);
  std::thread replica([&] {
    ReplicaScope scope(Device{3}, 8);
    entered.count_down();
    checked.wait();
    EXPECT_EQ(Device{}.ordinal, 3);
    EXPECT_EQ(replica_world_size(), 8);
  });
  entered.wait();
  EXPECT_EQ(Device{}.ordinal, 0);
  EXPECT_EQ(replica_world_size(), 1);
  checked.count_down();
  replica.join();
}

}  // namespace
}  // namespace axle
