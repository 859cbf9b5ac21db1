// engine/this_thread.h: per-thread bindings, and objects kept until their thread exits.
#include "axle/engine/this_thread.h"

#include <gtest/gtest.h>

#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace axle {
namespace {

struct Replica {
  int ordinal = 0;
};
struct Loader {
  int id = 0;
};

TEST(ThisThread, AThreadStartsUnbound) {
  std::thread t([] {
    EXPECT_EQ(ThisThread<Replica>::get(), nullptr);
    EXPECT_EQ(ThisThread<Loader>::get(), nullptr);
  });
  t.join();
}

TEST(ThisThread, BindReturnsThePreviousBindingAndNullUnbinds) {
  Replica first{1};
  Replica second{2};
  EXPECT_EQ(ThisThread<Replica>::bind(&first), nullptr);
  EXPECT_EQ(ThisThread<Replica>::get(), &first);
  EXPECT_EQ(ThisThread<Replica>::bind(&second), &first);
  EXPECT_EQ(ThisThread<Replica>::get(), &second);
  EXPECT_EQ(ThisThread<Replica>::bind(nullptr), &second);
  EXPECT_EQ(ThisThread<Replica>::get(), nullptr);
}

TEST(ThisThread, EachThreadHasItsOwnBinding) {
  Replica main_replica{0};
  ThisThread<Replica>::bind(&main_replica);
  std::vector<Replica> replicas{{1}, {2}, {3}};
  std::vector<int> seen(replicas.size(), -1);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    threads.emplace_back([&, i] {
      EXPECT_EQ(ThisThread<Replica>::get(), nullptr);  // not the main thread's
      ThisThread<Replica>::bind(&replicas[i]);
      std::this_thread::yield();  // let the others bind meanwhile
      seen[i] = ThisThread<Replica>::get()->ordinal;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ThisThread<Replica>::get(), &main_replica);  // untouched by the other threads
  ThisThread<Replica>::bind(nullptr);
}

TEST(ThisThread, EachTypeHasItsOwnBinding) {
  Replica replica{7};
  Loader loader{9};
  ThisThread<Replica>::bind(&replica);
  EXPECT_EQ(ThisThread<Loader>::get(), nullptr);
  ThisThread<Loader>::bind(&loader);
  EXPECT_EQ(ThisThread<Replica>::get(), &replica);
  EXPECT_EQ(ThisThread<Loader>::get(), &loader);
  ThisThread<Replica>::bind(nullptr);
  ThisThread<Loader>::bind(nullptr);
}

// Records its name in `log` when it dies.
struct Recorder {
  Recorder(std::string name, std::vector<std::string>& log, std::mutex& mutex)
      : name(std::move(name)), log(log), mutex(mutex) {}
  ~Recorder() {
    std::lock_guard lock(mutex);
    log.push_back(name);
  }
  std::string name;
  std::vector<std::string>& log;
  std::mutex& mutex;
};

TEST(KeepUntilThreadExit, ObjectsLiveUntilTheirThreadExitsThenDieNewestFirst) {
  std::mutex mutex;
  std::vector<std::string> log;
  std::weak_ptr<Recorder> watched;
  std::latch kept(1);
  std::latch may_exit(1);
  std::thread t([&] {
    auto a = std::make_shared<Recorder>("a", log, mutex);
    watched = a;
    keep_until_thread_exit(std::move(a));
    keep_until_thread_exit(std::make_shared<Recorder>("b", log, mutex));
    keep_until_thread_exit(std::make_shared<Recorder>("c", log, mutex));
    kept.count_down();
    may_exit.wait();
  });
  kept.wait();
  // The thread still runs: its objects are alive although it holds no handle to them.
  EXPECT_FALSE(watched.expired());
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(log.empty());
  }
  may_exit.count_down();
  t.join();
  EXPECT_TRUE(watched.expired());
  EXPECT_EQ(log, (std::vector<std::string>{"c", "b", "a"}));
}

TEST(KeepUntilThreadExit, ObjectsKeptByADyingObjectDieToo) {
  std::mutex mutex;
  std::vector<std::string> log;
  // Keeps another object from its destructor, as an object released during exit may.
  struct KeepsMoreAsItDies {
    KeepsMoreAsItDies(std::vector<std::string>* log, std::mutex* mutex) : log(log), mutex(mutex) {}
    std::vector<std::string>* log;
    std::mutex* mutex;
    ~KeepsMoreAsItDies() {
      {
        std::lock_guard lock(*mutex);
        log->push_back("first");
      }
      keep_until_thread_exit(std::make_shared<Recorder>("kept while dying", *log, *mutex));
    }
  };
  std::thread t([&] {
    keep_until_thread_exit(std::make_shared<Recorder>("oldest", log, mutex));
    keep_until_thread_exit(std::make_shared<KeepsMoreAsItDies>(&log, &mutex));
  });
  t.join();
  EXPECT_EQ(log, (std::vector<std::string>{"first", "kept while dying", "oldest"}));
}

TEST(KeepUntilThreadExit, AKeptObjectStillSeesItsThreadsBindingAsItDies) {
  Replica replica{5};
  int seen = -1;
  struct ReadsBinding {
    explicit ReadsBinding(int* seen) : seen(seen) {}
    int* seen;
    ~ReadsBinding() {
      const Replica* bound = ThisThread<Replica>::get();
      *seen = bound ? bound->ordinal : -2;
    }
  };
  std::thread t([&] {
    ThisThread<Replica>::bind(&replica);
    keep_until_thread_exit(std::make_shared<ReadsBinding>(&seen));
  });
  t.join();
  EXPECT_EQ(seen, 5);
}

TEST(KeepUntilThreadExit, EachThreadKeepsOnlyItsOwnObjects) {
  std::mutex mutex;
  std::vector<std::string> log;
  std::latch second_kept(1);
  std::latch second_may_exit(1);
  std::thread second([&] {
    keep_until_thread_exit(std::make_shared<Recorder>("second's", log, mutex));
    second_kept.count_down();
    second_may_exit.wait();
  });
  second_kept.wait();
  std::thread first(
      [&] { keep_until_thread_exit(std::make_shared<Recorder>("first's", log, mutex)); });
  first.join();
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(log, (std::vector<std::string>{"first's"}));  // the second thread still runs
  }
  second_may_exit.count_down();
  second.join();
  EXPECT_EQ(log, (std::vector<std::string>{"first's", "second's"}));
}

}  // namespace
}  // namespace axle
