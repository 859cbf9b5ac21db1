#include "axle/engine/future.h"

#include <gtest/gtest.h>

#include <thread>

namespace axle {
namespace {

TEST(Future, GetReturnsValueSetFromAnotherThread) {
  auto [promise, future] = make_promise<int>();
  std::thread t([p = std::move(promise)]() mutable { p.set_value(42); });
  EXPECT_EQ(future.get(), 42);
  t.join();
}

TEST(Future, GetRethrowsTheError) {
  auto [promise, future] = make_promise<int>();
  promise.set_error(std::make_exception_ptr(std::runtime_error("boom")));
  EXPECT_THROW(
      {
        try {
          future.get();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "boom");
          throw;
        }
      },
      std::runtime_error);
}

TEST(Future, DroppedPromiseFailsWithBrokenPromise) {
  Future<int> future;
  {
    auto [promise, f] = make_promise<int>();
    future = std::move(f);
  }
  EXPECT_THROW(future.get(), BrokenPromise);
}

TEST(Future, FirstOutcomeWins) {
  auto state = make_intrusive<detail::FutureState<int>>();
  EXPECT_TRUE(state->set_value(1));
  EXPECT_FALSE(state->set_value(2));
  EXPECT_FALSE(state->set_error(std::make_exception_ptr(std::runtime_error("late"))));
  EXPECT_EQ(Future<int>(state).get(), 1);
}

TEST(Future, TimedGetThrowsTimeoutWhenNoReply) {
  auto [promise, future] = make_promise<int>();
  EXPECT_THROW(future.get(std::chrono::milliseconds(5)), TimeoutError);
  promise.set_value(7);
  EXPECT_EQ(future.get(std::chrono::seconds(5)), 7);
}

TEST(Future, VoidFutureCompletes) {
  auto [promise, future] = make_promise<void>();
  promise.set_value();
  EXPECT_TRUE(future.ready());
  future.get();
}

TEST(Future, CallbackRegisteredBeforeOrAfterValueRunsOnce) {
  for (bool value_first : {false, true}) {
    auto state = make_intrusive<detail::FutureState<int>>();
    int calls = 0;
    if (value_first) state->set_value(5);
    state->on_ready([&] { ++calls; });
    if (!value_first) state->set_value(5);
    EXPECT_EQ(calls, 1) << "value_first=" << value_first;
  }
}

TEST(Future, ManyWaitersAllWake) {
  auto [promise, future] = make_promise<int>();
  std::vector<std::thread> waiters;
  std::atomic<int> sum{0};
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, f = future]() mutable {
      f.state()->wait();
      sum += f.state()->ready() ? 1 : 0;
    });
  }
  promise.set_value(1);
  for (auto& t : waiters) t.join();
  EXPECT_EQ(sum.load(), 4);
}

}  // namespace
}  // namespace axle
