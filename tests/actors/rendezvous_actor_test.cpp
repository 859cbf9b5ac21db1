// The RendezvousActor (actors/runtime/rendezvous_actor.h) on its own: points complete when their
// last member arrives, and a failed point, a deadline, a departed member or a cancelled group
// answer every waiting and late replica with an error.
#include "axle/actors/runtime/rendezvous_actor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

class RendezvousActorTest : public ::testing::Test {
 protected:
  void SetUp() override { actor_.ask(OpenGroup{kGroup, 3}).get(); }

  Future<Gathered> arrive(int ordinal, std::string tag, std::vector<int> members = {0, 1, 2},
                          int value = 0, std::chrono::nanoseconds timeout = 60s) {
    return actor_.ask(Arrive{"rendezvous", kGroup, ordinal, std::move(tag), std::move(members),
                             std::make_shared<const int>(value), &typeid(int), timeout});
  }
  template <class Error>
  static std::string error_of(Future<Gathered> future) {
    try {
      (void)future.get(10s);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  static int at(const Gathered& all, std::size_t i) {
    return *static_cast<const int*>((*all)[i].get());
  }

  static constexpr uint64_t kGroup = 7;
  Runtime runtime_{RuntimeOptions{.threads = 1}};
  ActorRef<RendezvousActor> actor_ = spawn<RendezvousActor>(runtime_);
};

TEST_F(RendezvousActorTest, AnswersEveryMemberWhenTheLastArrivesWithValuesByOrdinal) {
  Future<Gathered> a = arrive(2, "t", {0, 1, 2}, 20);
  Future<Gathered> b = arrive(0, "t", {0, 1, 2}, 0);
  EXPECT_FALSE(a.wait_for(20ms));
  Future<Gathered> c = arrive(1, "t", {0, 1, 2}, 10);
  for (Future<Gathered>* f : {&a, &b, &c}) {
    const Gathered all = f->get(10s);
    ASSERT_EQ(all->size(), 3u);
    EXPECT_EQ(at(all, 0), 0);
    EXPECT_EQ(at(all, 1), 10);
    EXPECT_EQ(at(all, 2), 20);
  }
}

TEST_F(RendezvousActorTest, MemberSetsMeetSeparatelyAndInOrder) {
  Future<Gathered> first = arrive(0, "pair", {0, 2}, 1);
  Future<Gathered> second = arrive(0, "pair again", {0, 2}, 2);
  Future<Gathered> all = arrive(1, "everyone", {0, 1, 2});
  Future<Gathered> first2 = arrive(2, "pair", {0, 2}, 3);
  EXPECT_EQ(at(first.get(10s), 1), 3);
  EXPECT_EQ(at(first2.get(10s), 0), 1);
  EXPECT_FALSE(second.ready());
  EXPECT_FALSE(all.ready());
}

TEST_F(RendezvousActorTest, ALateArrivalAtAMismatchedPointGetsTheSameError) {
  Future<Gathered> a = arrive(0, "alpha");
  Future<Gathered> b = arrive(1, "beta");
  const std::string error = error_of<CollectiveError>(std::move(a));
  EXPECT_NE(error.find("'alpha'"), std::string::npos) << error;
  EXPECT_NE(error.find("'beta'"), std::string::npos) << error;
  EXPECT_EQ(error_of<CollectiveError>(std::move(b)), error);
  EXPECT_EQ(error_of<CollectiveError>(arrive(2, "alpha")), error);
  // Once every member passed it, the next point starts afresh.
  Future<Gathered> next[] = {arrive(0, "gamma"), arrive(1, "gamma"), arrive(2, "gamma")};
  for (Future<Gathered>& f : next) EXPECT_EQ(f.get(10s)->size(), 3u);
}

TEST_F(RendezvousActorTest, ADeadlineNamesTheMissingMembers) {
  Future<Gathered> a = arrive(1, "slow", {0, 1, 2}, 0, 50ms);
  const std::string error = error_of<CollectiveTimeout>(std::move(a));
  EXPECT_NE(error.find("'slow'"), std::string::npos) << error;
  EXPECT_NE(error.find("replicas {0, 2} never arrived"), std::string::npos) << error;
}

TEST_F(RendezvousActorTest, AMemberThatLeftFailsItsPointsNowAndLater) {
  Future<Gathered> waiting = arrive(0, "before");
  actor_.ask(LeaveGroup{kGroup, 2}).get();
  const std::string error = error_of<CollectiveError>(std::move(waiting));
  EXPECT_NE(error.find("replica 2 returned from its function"), std::string::npos) << error;
  EXPECT_NE(error_of<CollectiveError>(arrive(1, "later", {1, 2})).find("replica 2"),
            std::string::npos);
  Future<Gathered> without[] = {arrive(0, "pair", {0, 1}), arrive(1, "pair", {0, 1})};
  for (Future<Gathered>& f : without) EXPECT_EQ(f.get(10s)->size(), 2u);
}

TEST_F(RendezvousActorTest, ACancelledGroupFailsEveryWaitNowAndLater) {
  Future<Gathered> waiting = arrive(0, "t");
  actor_.ask(CancelGroup{kGroup, 1, "out of memory"}).get();
  try {
    (void)waiting.get(10s);
    FAIL() << "the wait was not cancelled";
  } catch (const ReplicaCancelled& e) {
    EXPECT_EQ(e.failed_replica(), 1);
    EXPECT_NE(std::string(e.what()).find("replica 1 failed: out of memory"), std::string::npos);
  }
  EXPECT_NE(error_of<ReplicaCancelled>(arrive(2, "u")).find("'u' cancelled"), std::string::npos);
}

TEST_F(RendezvousActorTest, AnArrivalOutsideAnOpenGroupIsAnError) {
  actor_.ask(CloseGroup{kGroup}).get();
  EXPECT_NE(error_of<CollectiveError>(arrive(0, "t")).find("not a member of a running spawn"),
            std::string::npos);
}

}  // namespace
}  // namespace axle
