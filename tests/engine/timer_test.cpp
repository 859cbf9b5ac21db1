#include <gtest/gtest.h>

#include <thread>

#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"

namespace axle {
namespace {

using Clock = std::chrono::steady_clock;

struct Tick {};
struct Arm {
  std::chrono::milliseconds delay;
  bool periodic;
};
struct Disarm {};
struct Ticks {
  using Reply = int;
};
struct FirstTickAfter {
  using Reply = std::chrono::nanoseconds;
};

class Ticker : public Actor<Ticker, Tick, Arm, Disarm, Ticks, FirstTickAfter> {
 public:
  void handle(Tick&) {
    if (ticks_++ == 0) first_ = Clock::now() - armed_at_;
  }
  void handle(Arm& m) {
    armed_at_ = Clock::now();
    timer_ = m.periodic ? send_every(m.delay, Tick{}) : send_after(m.delay, Tick{});
  }
  void handle(Disarm&) { timer_.cancel(); }
  int handle(Ticks&) { return ticks_; }
  std::chrono::nanoseconds handle(FirstTickAfter&) { return first_; }

 private:
  TimerHandle timer_;
  Clock::time_point armed_at_;
  std::chrono::nanoseconds first_{0};
  int ticks_ = 0;
};

int wait_for_ticks(const ActorRef<Ticker>& t, int at_least, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int n = 0;
  while ((n = t.ask(Ticks{}).get()) < at_least && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return n;
}

TEST(Timer, SendAfterDeliversOnceNoSoonerThanTheDelay) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto ticker = spawn<Ticker>(rt);
  ticker.tell(Arm{std::chrono::milliseconds(20), false});
  ASSERT_EQ(wait_for_ticks(ticker, 1, std::chrono::seconds(10)), 1);
  EXPECT_GE(ticker.ask(FirstTickAfter{}).get(), std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(ticker.ask(Ticks{}).get(), 1);
}

TEST(Timer, SendEveryRepeatsUntilCancelled) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto ticker = spawn<Ticker>(rt);
  ticker.tell(Arm{std::chrono::milliseconds(2), true});
  ASSERT_GE(wait_for_ticks(ticker, 5, std::chrono::seconds(10)), 5);
  ticker.tell(Disarm{});
  // A tick already on its way may still land; after that the count stays put.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int settled = ticker.ask(Ticks{}).get();
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_EQ(ticker.ask(Ticks{}).get(), settled);
}

TEST(Timer, FiresOnAParkedWorker) {
  Runtime rt(RuntimeOptions{.threads = 1, .spin = std::chrono::microseconds(1)});
  auto ticker = spawn<Ticker>(rt, SpawnOptions{.dedicated_thread = true});
  ticker.tell(Arm{std::chrono::milliseconds(50), false});
  EXPECT_EQ(wait_for_ticks(ticker, 1, std::chrono::seconds(10)), 1);
}

TEST(Timer, ShutdownStopsPeriodicTimersAndReturns) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto ticker = spawn<Ticker>(rt);
  ticker.tell(Arm{std::chrono::milliseconds(1), true});
  ASSERT_GE(wait_for_ticks(ticker, 2, std::chrono::seconds(10)), 2);
  const auto start = Clock::now();
  rt.shutdown();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

struct Never {
  using Reply = int;
};
class Silent : public Actor<Silent, Never> {
 public:
  void handle(Never&, Promise<int>&& reply) { kept_ = std::move(reply); }

 private:
  Promise<int> kept_;
};

struct AskSilent {
  using Reply = std::string;
  ActorRef<Silent> peer;
};
// Asks an actor that never answers, with a deadline, and reports what the continuation saw.
class Impatient : public Actor<Impatient, AskSilent> {
 public:
  void handle(AskSilent& m, Promise<std::string>&& reply) {
    auto answer = m.peer.ask(Never{});
    fail_after(answer, std::chrono::milliseconds(20), "silent peer did not answer");
    answer.then([reply = std::move(reply)](Result<int> r) mutable {
      try {
        r.value();
        reply.set_value(std::string("answered"));
      } catch (const TimeoutError& e) {
        reply.set_value(std::string(e.what()));
      }
    });
  }
};

TEST(Timer, FailAfterTimesOutAnAskInsideAnActor) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto silent = spawn<Silent>(rt);
  auto impatient = spawn<Impatient>(rt);
  EXPECT_EQ(impatient.ask(AskSilent{silent}).get(std::chrono::seconds(10)),
            "silent peer did not answer");
}

}  // namespace
}  // namespace axle
