#include <gtest/gtest.h>

#include <thread>

#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"

namespace axle {
namespace {

struct Work {
  std::shared_ptr<std::atomic<int>> done;
};
struct Relay {
  int remaining;
  std::shared_ptr<std::atomic<int>> done;
};

class Sink : public Actor<Sink, Work, Relay> {
 public:
  explicit Sink(ActorRef<Sink>* peer = nullptr) : peer_(peer) {}
  void handle(Work& m) {
    // Slow enough that the mailbox is still full when shutdown starts.
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    m.done->fetch_add(1);
  }
  void handle(Relay& m) {
    m.done->fetch_add(1);
    if (m.remaining > 0 && peer_) peer_->tell(Relay{m.remaining - 1, m.done});
  }

 private:
  ActorRef<Sink>* peer_;
};

TEST(Shutdown, DeliversEveryMessageAlreadySent) {
  auto done = std::make_shared<std::atomic<int>>(0);
  constexpr int kMessages = 5000;
  {
    Runtime rt(RuntimeOptions{.threads = 2});
    std::vector<ActorRef<Sink>> workers;
    for (int i = 0; i < 4; ++i) workers.push_back(spawn<Sink>(rt));
    for (int i = 0; i < kMessages; ++i) workers[i % 4].tell(Work{done});
    rt.shutdown();
    EXPECT_EQ(done->load(), kMessages);
  }
  EXPECT_EQ(done->load(), kMessages);
}

TEST(Shutdown, DeliversMessagesSentWhileDraining) {
  auto done = std::make_shared<std::atomic<int>>(0);
  Runtime rt(RuntimeOptions{.threads = 2});
  ActorRef<Sink> b;
  ActorRef<Sink> a = spawn<Sink>(rt, SpawnOptions{}, &b);
  b = spawn<Sink>(rt, SpawnOptions{}, &a);
  a.tell(Relay{1000, done});
  rt.shutdown();
  EXPECT_EQ(done->load(), 1001);
}

TEST(Shutdown, AskAfterShutdownFailsWithRuntimeStopped) {
  Runtime rt(RuntimeOptions{.threads = 1});
  struct Ping {
    using Reply = int;
  };
  class Echo : public Actor<Echo, Ping> {
   public:
    int handle(Ping&) { return 1; }
  };
  auto echo = spawn<Echo>(rt);
  EXPECT_EQ(echo.ask(Ping{}).get(), 1);
  rt.shutdown();
  EXPECT_THROW(echo.ask(Ping{}).get(), RuntimeStopped);
  EXPECT_THROW(spawn<Echo>(rt), RuntimeStopped);
}

struct Bounce {};
class Bouncer : public Actor<Bouncer, Bounce> {
 public:
  explicit Bouncer(ActorRef<Bouncer>* peer) : peer_(peer) {}
  void handle(Bounce&) { peer_->tell(Bounce{}); }

 private:
  ActorRef<Bouncer>* peer_;
};

TEST(Shutdown, EndlessTrafficCannotHangShutdown) {
  Runtime rt(RuntimeOptions{.threads = 2, .shutdown_timeout = std::chrono::milliseconds(100)});
  ActorRef<Bouncer> b;
  ActorRef<Bouncer> a = spawn<Bouncer>(rt, SpawnOptions{}, &b);
  b = spawn<Bouncer>(rt, SpawnOptions{}, &a);
  a.tell(Bounce{});
  const auto start = std::chrono::steady_clock::now();
  rt.shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(rt.stopped());
}

struct Hold {
  using Reply = int;
};
class Holder : public Actor<Holder, Hold> {
 public:
  void handle(Hold&, Promise<int>&& reply) { kept_.push_back(std::move(reply)); }

 private:
  std::vector<Promise<int>> kept_;
};

TEST(Shutdown, PromisesHeldByActorsFailInsteadOfHanging) {
  Future<int> pending;
  {
    Runtime rt(RuntimeOptions{.threads = 1});
    auto holder = spawn<Holder>(rt);
    pending = holder.ask(Hold{});
  }
  EXPECT_THROW(pending.get(std::chrono::seconds(10)), BrokenPromise);
}

TEST(Shutdown, IsIdempotent) {
  Runtime rt(RuntimeOptions{.threads = 1});
  rt.shutdown();
  rt.shutdown();
  EXPECT_TRUE(rt.stopped());
}

}  // namespace
}  // namespace axle
