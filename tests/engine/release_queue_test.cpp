// engine/release_queue.h: deferred, iterative release of reference-counted chains.
#include "axle/engine/release_queue.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <latch>
#include <thread>
#include <vector>

namespace axle {
namespace {

// A link of a chain: holds the next link and, optionally, an object every link shares. Its
// destructor defers what it holds to a ReleaseScope, as IR nodes do with their operands.
class Link final : public RefCounted {
 public:
  Link(int id, std::vector<uint8_t>& deaths) : id_(id), deaths_(deaths) {}
  ~Link() override {
    ++deaths_[static_cast<std::size_t>(id_)];
    ReleaseScope scope;
    scope.defer(std::move(next));
    scope.defer(std::move(shared));
  }
  IntrusivePtr<Link> next;
  IntrusivePtr<Link> shared;

 private:
  int id_;
  std::vector<uint8_t>& deaths_;
};

// A chain of `length` links (ids 0 .. length - 1, the tip first), built in a loop.
IntrusivePtr<Link> chain(int length, std::vector<uint8_t>& deaths) {
  IntrusivePtr<Link> tip;
  for (int id = length - 1; id >= 0; --id) {
    auto link = make_intrusive<Link>(id, deaths);
    link->next = std::move(tip);
    tip = std::move(link);
  }
  return tip;
}

// Runs `fn` on a thread with a stack of `bytes`, so that a release recursing once per link
// overflows it for certain.
void run_on_small_stack(std::size_t bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, bytes), 0);
  pthread_t thread;
  auto body = [](void* arg) -> void* {
    (*static_cast<std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, body, &fn), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

TEST(ReleaseScope, AMillionLinkChainIsReleasedWithoutOverflowingTheStack) {
  constexpr int kLinks = 1'000'000;
  std::vector<uint8_t> deaths(kLinks, 0);
  IntrusivePtr<Link> tip = chain(kLinks, deaths);
  // 256 KiB of stack: a recursive release needs far more than that for a million frames.
  run_on_small_stack(std::size_t{256} << 10, [&] { tip = nullptr; });
  EXPECT_EQ(std::count(deaths.begin(), deaths.end(), 1), kLinks);  // each exactly once
}

TEST(ReleaseScope, AnObjectManyLinksShareDiesOnceWhenTheLastOfThemIsReleased) {
  constexpr int kLinks = 10'000;
  std::vector<uint8_t> deaths(kLinks + 1, 0);
  auto shared = make_intrusive<Link>(kLinks, deaths);
  IntrusivePtr<Link> tip = chain(kLinks, deaths);
  for (Link* link = tip.get(); link; link = link->next.get()) link->shared = shared;
  EXPECT_EQ(shared->use_count(), kLinks + 1);
  Link* raw = shared.get();
  shared = nullptr;
  EXPECT_EQ(raw->use_count(), kLinks);
  tip = nullptr;
  EXPECT_EQ(std::count(deaths.begin(), deaths.end(), 1), kLinks + 1);
}

// Counts its own deaths.
struct Probe final : RefCounted {
  explicit Probe(std::atomic<int>& deaths) : deaths(deaths) {}
  ~Probe() override { ++deaths; }
  std::atomic<int>& deaths;
};

TEST(ReleaseScope, DeferTakesOverTheCallersReferenceAndTheScopeEndReleasesIt) {
  std::atomic<int> deaths{0};
  auto probe = make_intrusive<Probe>(deaths);
  const Probe* raw = probe.get();
  {
    ReleaseScope scope;
    scope.defer(std::move(probe));
    EXPECT_FALSE(probe);                 // the reference moved into the scope
    EXPECT_EQ(raw->use_count(), 1);      // and is still held there
    scope.defer(IntrusivePtr<Probe>());  // null: nothing to release
    scope.defer(nullptr);
    EXPECT_EQ(deaths, 0);
  }
  EXPECT_EQ(deaths, 1);
}

TEST(ReleaseScope, OnlyTheOutermostScopeReleases) {
  std::atomic<int> deaths{0};
  {
    ReleaseScope outer;
    {
      ReleaseScope inner;
      inner.defer(make_intrusive<Probe>(deaths));
      inner.drain();  // not the outermost: does nothing
      EXPECT_EQ(deaths, 0);
      {
        ReleaseScope innermost;
        innermost.defer(make_intrusive<Probe>(deaths));
      }
      EXPECT_EQ(deaths, 0);
    }
    EXPECT_EQ(deaths, 0);  // both wait in the outer scope's queue
    outer.drain();
    EXPECT_EQ(deaths, 2);
    outer.defer(make_intrusive<Probe>(deaths));
    EXPECT_EQ(deaths, 2);
  }
  EXPECT_EQ(deaths, 3);
}

TEST(ReleaseScope, ReleasesThatDeferMoreAreDrainedBeforeTheScopeEnds) {
  std::vector<uint8_t> deaths(3, 0);
  IntrusivePtr<Link> tip = chain(3, deaths);
  {
    ReleaseScope scope;
    scope.defer(std::move(tip));
    scope.drain();  // link 0 dies and defers link 1 here, which defers link 2
    EXPECT_EQ(deaths, (std::vector<uint8_t>{1, 1, 1}));
  }
  EXPECT_EQ(deaths, (std::vector<uint8_t>{1, 1, 1}));
}

TEST(ReleaseScope, EachThreadHasItsOwnQueue) {
  std::atomic<int> main_deaths{0};
  std::atomic<int> other_deaths{0};
  {
    ReleaseScope outer;  // the main thread's outermost scope stays open meanwhile
    outer.defer(make_intrusive<Probe>(main_deaths));
    std::thread other([&] {
      {
        ReleaseScope scope;  // the outermost on its thread, though the main thread has one open
        scope.defer(make_intrusive<Probe>(other_deaths));
      }
      EXPECT_EQ(other_deaths, 1);
    });
    other.join();
    EXPECT_EQ(other_deaths, 1);
    EXPECT_EQ(main_deaths, 0);
  }
  EXPECT_EQ(main_deaths, 1);
}

TEST(ReleaseScope, ChainsReleasedOnManyThreadsAtOnceEachDieOnce) {
  constexpr int kThreads = 4;
  constexpr int kLinks = 100'000;
  std::vector<std::vector<uint8_t>> deaths(kThreads, std::vector<uint8_t>(kLinks, 0));
  std::vector<IntrusivePtr<Link>> tips;
  for (int t = 0; t < kThreads; ++t) tips.push_back(chain(kLinks, deaths[t]));
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      tips[static_cast<std::size_t>(t)] = nullptr;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(std::count(deaths[t].begin(), deaths[t].end(), 1), kLinks) << "chain " << t;
  }
}

}  // namespace
}  // namespace axle
