#include "axle/engine/actor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "axle/engine/log.h"
#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"

namespace axle {
namespace {

struct Add {
  int n;
};
struct Get {
  using Reply = int;
};
struct Fail {
  using Reply = int;
};
struct NotAccepted {};

class Counter : public Actor<Counter, Add, Get, Fail> {
 public:
  void handle(Add& m) { total_ += m.n; }
  int handle(Get&) { return total_; }
  int handle(Fail&) { throw std::runtime_error("counter refuses"); }

 private:
  int total_ = 0;
};

static_assert(Accepts<Counter, Add>);
static_assert(!Accepts<Counter, NotAccepted>, "a message the actor does not list must not compile");

TEST(Actor, TellThenAskSeesEarlierMessages) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto counter = spawn<Counter>(rt);
  for (int i = 1; i <= 100; ++i) counter.tell(Add{i});
  EXPECT_EQ(counter.ask(Get{}).get(), 5050);
}

TEST(Actor, HandlerExceptionFailsTheMatchingAskAndIsReported) {
  Runtime rt(RuntimeOptions{.threads = 1});
  std::atomic<int> reported{0};
  rt.on_failure([&](const ActorFailure& f) {
    EXPECT_EQ(f.what, "counter refuses");
    EXPECT_NE(f.message_type.find("Fail"), std::string::npos);
    ++reported;
  });
  auto counter = spawn<Counter>(rt);
  auto failing = counter.ask(Fail{});
  counter.tell(Add{3});
  EXPECT_THROW(
      {
        try {
          failing.get();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "counter refuses");
          throw;
        }
      },
      std::runtime_error);
  // The actor survives its failure and keeps serving.
  EXPECT_EQ(counter.ask(Get{}).get(), 3);
  EXPECT_EQ(reported.load(), 1);
  ASSERT_EQ(rt.failures().size(), 1u);
  EXPECT_EQ(rt.failures()[0].actor, counter.name());
}

struct Slow {
  using Reply = int;
};
struct Release {};

// Replies to Slow only when Release arrives: a deferred reply through a kept promise.
class Gate : public Actor<Gate, Slow, Release> {
 public:
  void handle(Slow&, Promise<int>&& reply) { waiting_.push_back(std::move(reply)); }
  void handle(Release&) {
    for (auto& p : waiting_) p.set_value(static_cast<int>(waiting_.size()));
    waiting_.clear();
  }

 private:
  std::vector<Promise<int>> waiting_;
};

TEST(Actor, DeferredReplyArrivesWhenPromiseIsFulfilled) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto gate = spawn<Gate>(rt);
  auto a = gate.ask(Slow{});
  auto b = gate.ask(Slow{});
  EXPECT_FALSE(a.wait_for(std::chrono::milliseconds(20)));
  gate.tell(Release{});
  EXPECT_EQ(a.get(), 2);
  EXPECT_EQ(b.get(), 2);
}

struct Forget {
  using Reply = int;
};
class Forgetful : public Actor<Forgetful, Forget> {
 public:
  void handle(Forget&, Promise<int>&&) {}  // drops the promise
};

TEST(Actor, DroppedReplyFailsTheAskInsteadOfHanging) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto actor = spawn<Forgetful>(rt);
  EXPECT_THROW(actor.ask(Forget{}).get(), BrokenPromise);
}

struct Enter {};
class Exclusive : public Actor<Exclusive, Enter, Get> {
 public:
  void handle(Enter&) {
    // A plain (non-atomic) flag: ThreadSanitizer flags it if two handlers ever overlap.
    EXPECT_FALSE(inside_);
    inside_ = true;
    ++count_;
    inside_ = false;
  }
  int handle(Get&) { return count_; }

 private:
  bool inside_ = false;
  int count_ = 0;
};

TEST(Actor, HandlerNeverRunsConcurrentlyWithItself) {
  Runtime rt(RuntimeOptions{.threads = 4});
  auto actor = spawn<Exclusive>(rt);
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) actor.tell(Enter{});
    });
  }
  for (auto& t : senders) t.join();
  // Order holds per sender only, so this thread's Get may overtake other threads' Enters.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int count = 0;
  while ((count = actor.ask(Get{}).get()) < 80000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(count, 80000);
}

struct AskPeer {
  using Reply = int;
  ActorRef<Counter> peer;
};
struct Blocking {
  using Reply = bool;
  ActorRef<Counter> peer;
};

// Asks another actor and receives the reply as a continuation on its own thread.
class Asker : public Actor<Asker, AskPeer, Blocking> {
 public:
  void handle(AskPeer& m, Promise<int>&& reply) {
    m.peer.ask(Get{}).then([this, reply = std::move(reply)](Result<int> r) mutable {
      ++continuations_;  // actor state, touched only on the actor's thread
      reply.set_value(r.value() * 10 + continuations_);
    });
  }
  bool handle(Blocking& m) {
    try {
      m.peer.ask(Get{}).get();
    } catch (const BlockingInActor&) {
      return true;
    }
    return false;
  }

 private:
  int continuations_ = 0;
};

TEST(Actor, ThenDeliversTheReplyToTheAskingActor) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto counter = spawn<Counter>(rt);
  auto asker = spawn<Asker>(rt);
  counter.tell(Add{4});
  ASSERT_EQ(counter.ask(Get{}).get(), 4);  // the Add is in before the asker's Get
  EXPECT_EQ(asker.ask(AskPeer{counter}).get(), 41);
  EXPECT_EQ(asker.ask(AskPeer{counter}).get(), 42);
}

TEST(Actor, BlockingGetInsideAHandlerIsRefused) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto counter = spawn<Counter>(rt);
  auto asker = spawn<Asker>(rt);
  EXPECT_TRUE(asker.ask(Blocking{counter}).get());
}

struct WhereAmI {
  using Reply = std::thread::id;
};
class Locator : public Actor<Locator, WhereAmI> {
 public:
  std::thread::id handle(WhereAmI&) { return std::this_thread::get_id(); }
};

TEST(Actor, DedicatedActorHasAThreadOfItsOwn) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto pooled_a = spawn<Locator>(rt);
  auto pooled_b = spawn<Locator>(rt);
  auto dedicated = spawn<Locator>(rt, SpawnOptions{.name = "device", .dedicated_thread = true});
  auto pool_thread = pooled_a.ask(WhereAmI{}).get();
  EXPECT_EQ(pooled_b.ask(WhereAmI{}).get(), pool_thread);
  auto own = dedicated.ask(WhereAmI{}).get();
  EXPECT_NE(own, pool_thread);
  EXPECT_NE(own, std::this_thread::get_id());
  EXPECT_EQ(dedicated.name(), "device#3");
}

struct Note {};
struct Hold {
  const std::atomic<bool>* release;
  std::atomic<bool>* entered;
};
struct Notes {
  struct Seen {
    std::thread::id thread;
    bool on_senders_thread;
  };
  using Reply = std::vector<Seen>;
};
struct Relay {
  using Reply = bool;
  ActorRef<class Noter> to;
};
// Notes where each message ran; Hold keeps its worker until released.
class Noter : public Actor<Noter, Note, Hold, Notes, Relay> {
 public:
  void handle(Note&) { seen_.push_back({std::this_thread::get_id(), on_senders_thread()}); }
  void handle(Hold& m) {
    m.entered->store(true);
    while (!m.release->load()) std::this_thread::yield();
    seen_.push_back({std::this_thread::get_id(), on_senders_thread()});
  }
  std::vector<Notes::Seen> handle(Notes&) { return seen_; }
  bool handle(Relay& m) { return m.to.tell_here(Note{}); }

 private:
  std::vector<Notes::Seen> seen_;
};

TEST(Actor, TellHereRunsAnIdleActorOnTheSendersThread) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto noter = spawn<Noter>(rt, SpawnOptions{.name = "device", .dedicated_thread = true});
  ASSERT_TRUE(noter.ask(Notes{}).get().empty());  // started
  // Its worker lets go of it just after replying: until then a Note goes to the worker.
  std::vector<bool> here;
  for (int attempt = 0; attempt < 1000 && (here.empty() || !here.back()); ++attempt) {
    here.push_back(noter.tell_here(Note{}));
    if (!here.back()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  noter.tell(Note{});
  const std::vector<Notes::Seen> seen = noter.ask(Notes{}).get();
  ASSERT_EQ(seen.size(), here.size() + 1);
  ASSERT_TRUE(here.back());
  for (std::size_t i = 0; i < here.size(); ++i) {
    EXPECT_EQ(seen[i].thread == std::this_thread::get_id(), here[i]) << "note " << i;
    EXPECT_EQ(seen[i].on_senders_thread, here[i]) << "note " << i;
  }
  EXPECT_NE(seen.back().thread, std::this_thread::get_id());
  EXPECT_FALSE(seen.back().on_senders_thread);
}

TEST(Actor, TellHereLeavesABusyActorToItsWorkerInOrder) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto noter = spawn<Noter>(rt, SpawnOptions{.name = "device", .dedicated_thread = true});
  std::atomic<bool> release{false}, entered{false};
  noter.tell(Hold{&release, &entered});
  while (!entered.load()) std::this_thread::yield();
  EXPECT_FALSE(noter.tell_here(Note{}));  // the worker holds the actor
  release.store(true);
  const std::vector<Notes::Seen> seen = noter.ask(Notes{}).get();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[1].thread, seen[0].thread);  // the Note after the Hold, on the worker
  EXPECT_NE(seen[1].thread, std::this_thread::get_id());
  EXPECT_FALSE(seen[1].on_senders_thread);
}

TEST(Actor, TellHereFromAnActorIsATell) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto relay = spawn<Noter>(rt);
  auto noter = spawn<Noter>(rt, SpawnOptions{.name = "device", .dedicated_thread = true});
  EXPECT_FALSE(relay.ask(Relay{noter}).get());
  // The relay's Note and this thread's Notes come from two senders: either may come first.
  std::vector<Notes::Seen> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (seen.empty() && std::chrono::steady_clock::now() < deadline)
    seen = noter.ask(Notes{}).get();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_FALSE(seen[0].on_senders_thread);
}

struct Spin {};
struct Stop {};
// Keeps itself busy forever by messaging itself, until stopped.
class Busy : public Actor<Busy, Spin, Stop, Get> {
 public:
  void handle(Spin&) {
    ++spins_;
    if (!stopped_) self().tell(Spin{});
  }
  void handle(Stop&) { stopped_ = true; }
  int handle(Get&) { return spins_; }

 private:
  bool stopped_ = false;
  int spins_ = 0;
};

TEST(Actor, ABusyActorDoesNotStarveOthersOnItsWorker) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto busy = spawn<Busy>(rt);
  auto counter = spawn<Counter>(rt);
  busy.tell(Spin{});
  counter.tell(Add{1});
  // Only one worker: the counter answers only if the busy actor yields between batches.
  EXPECT_EQ(counter.ask(Get{}).get(std::chrono::seconds(10)), 1);
  busy.tell(Stop{});
  EXPECT_GT(busy.ask(Get{}).get(std::chrono::seconds(10)), 0);
}

class Starter : public Actor<Starter, Get> {
 public:
  void on_start() override { started_on_ = std::this_thread::get_id(); }
  int handle(Get&) { return started_on_ == std::this_thread::get_id() ? 1 : 0; }

 private:
  std::thread::id started_on_;
};

TEST(Actor, OnStartRunsOnTheActorsThreadBeforeItsFirstMessage) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto actor = spawn<Starter>(rt, SpawnOptions{.dedicated_thread = true});
  EXPECT_EQ(actor.ask(Get{}).get(), 1);
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

TEST(Actor, IdleRuntimeParksItsThreads) {
  Runtime rt(RuntimeOptions{.threads = 2});
  auto counter = spawn<Counter>(rt, SpawnOptions{.dedicated_thread = true});
  counter.tell(Add{1});
  EXPECT_EQ(counter.ask(Get{}).get(), 1);
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double used = process_cpu_seconds() - before;
  // Three spinning threads would use ~1.5 s of CPU here; parked ones use almost none.
  EXPECT_LT(used, 0.15) << "idle workers burned " << used << " s of CPU in 0.5 s";
  EXPECT_EQ(counter.ask(Get{}).get(), 1);  // and they wake again
}

}  // namespace
}  // namespace axle
