// MeetingPoints (actors/runtime/meeting_points.h) called directly from many threads, as devices
// call it: every point gives each member the values of its own point, by ordinal, whoever arrives
// last; deadlines come from the caller's clock. Run under ThreadSanitizer too.
#include "axle/actors/runtime/meeting_points.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace axle {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kGroup = 3;

Arrive arrival(int ordinal, std::string tag, std::vector<int> members, int value,
               std::chrono::nanoseconds timeout = 60s) {
  return Arrive{"all_reduce",
                kGroup,
                ordinal,
                std::move(tag),
                std::move(members),
                std::make_shared<const int>(value),
                &typeid(int),
                timeout,
                Channel::kDevice};
}

int at(const Gathered& all, std::size_t i) { return *static_cast<const int*>((*all)[i].get()); }

TEST(MeetingPoints, ThreadsArrivingDirectlyMeetRoundByRoundWithEveryValueByOrdinal) {
  constexpr int kMembers = 4;
  constexpr int kRounds = 2000;
  MeetingPoints points;
  points.open(OpenGroup{kGroup, kMembers});
  std::vector<std::string> errors(kMembers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kMembers; ++r) {
    threads.emplace_back([&, r] {
      for (int round = 0; round < kRounds && errors[r].empty(); ++round) {
        // Half the rounds among everyone, the others among the pairs {0, 1} and {2, 3}, so
        // member sets interleave their points.
        const bool pairs = round % 2 == 1;
        std::vector<int> members =
            pairs ? std::vector<int>{r & ~1, (r & ~1) + 1} : std::vector<int>{0, 1, 2, 3};
        Future<Gathered> met =
            points.arrive(arrival(r, std::to_string(round), members, round * 10 + r));
        const Gathered all = met.get(60s);
        for (std::size_t i = 0; i < members.size(); ++i) {
          if (at(all, i) != round * 10 + members[i]) {
            errors[r] = "round " + std::to_string(round) + ": member " +
                        std::to_string(members[i]) + " brought " + std::to_string(at(all, i));
            break;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kMembers; ++r) EXPECT_EQ(errors[r], "") << "replica " << r;
}

TEST(MeetingPoints, APointPastItsDeadlineFailsItsWaitersNamingTheMissingMembers) {
  MeetingPoints points;
  points.open(OpenGroup{kGroup, 3});
  Future<Gathered> waiting = points.arrive(arrival(1, "slow", {0, 1, 2}, 0, 1s));
  points.expire(std::chrono::steady_clock::now());  // before the deadline: nothing happens
  EXPECT_FALSE(waiting.ready());
  points.expire(std::chrono::steady_clock::now() + 2s);
  ASSERT_TRUE(waiting.ready());
  try {
    (void)waiting.get();
    FAIL() << "the point did not fail";
  } catch (const CollectiveTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("replicas {0, 2} never arrived"), std::string::npos)
        << e.what();
  }
}

TEST(MeetingPoints, TheLastArrivalAnswersAWaiterOnAnotherThread) {
  MeetingPoints points;
  points.open(OpenGroup{kGroup, 2});
  Future<Gathered> first = points.arrive(arrival(0, "t", {0, 1}, 5));
  EXPECT_FALSE(first.ready());
  std::thread last([&] {
    Future<Gathered> mine = points.arrive(arrival(1, "t", {0, 1}, 7));
    EXPECT_TRUE(mine.ready());  // it completed the point itself
  });
  const Gathered all = first.get(10s);
  last.join();
  EXPECT_EQ(at(all, 0), 5);
  EXPECT_EQ(at(all, 1), 7);
}

}  // namespace
}  // namespace axle
