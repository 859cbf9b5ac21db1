// Stress: 1,000,000 messages across 8 actors and 4 threads arrive exactly once and in per-sender
// order, including messages the actors forward to each other. Runs under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <thread>

#include "engine/runtime.h"
#include "engine/spawn.h"

namespace axle {
namespace {

constexpr int kActors = 8;
constexpr int kThreads = 4;
constexpr int kTotal = 1'000'000;
constexpr int kPerThread = kTotal / kThreads;
// Senders are the 4 threads (ids 0..3) and the 8 actors (ids 4..11).
constexpr int kSenders = kThreads + kActors;

struct Hop {
  int id;          // unique message id in [0, kTotal)
  int sender;      // who sent this hop
  int64_t seq;     // sender's running count towards this receiver
  bool forwarded;  // second hop: do not forward again
};
struct Report {
  using Reply = std::vector<int>;  // how many times each id finished here
};
struct Misordered {
  using Reply = int;
};

class Node;
using Ring = std::vector<ActorRef<Node>>;

class Node : public Actor<Node, Hop, Report, Misordered> {
 public:
  Node(int index, const Ring* ring)
      : index_(index), ring_(ring), last_seen_(kSenders, -1), next_seq_(kActors, 0) {}

  void handle(Hop& m) {
    if (m.seq <= last_seen_[m.sender]) ++misordered_;
    last_seen_[m.sender] = m.seq;
    if (m.forwarded || m.id % 2 == 0) {
      if (finished_.empty()) finished_.assign(kTotal, 0);
      ++finished_[m.id];
      return;
    }
    // Odd ids take a second hop through the next actor, so actors send as well.
    int to = (index_ + 1) % kActors;
    (*ring_)[to].tell(Hop{m.id, kThreads + index_, next_seq_[to]++, true});
  }
  std::vector<int> handle(Report&) { return std::move(finished_); }
  int handle(Misordered&) { return misordered_; }

 private:
  int index_;
  const Ring* ring_;
  std::vector<int64_t> last_seen_;
  std::vector<int64_t> next_seq_;
  std::vector<int> finished_;
  int misordered_ = 0;
};

TEST(ActorStress, MillionMessagesArriveExactlyOnceInPerSenderOrder) {
  Runtime rt(RuntimeOptions{.threads = kThreads});
  Ring ring;
  for (int i = 0; i < kActors; ++i) ring.push_back(spawn<Node>(rt, SpawnOptions{}, i, &ring));

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> seq(kActors, 0);
      for (int k = 0; k < kPerThread; ++k) {
        int id = t * kPerThread + k;
        int to = id % kActors;
        ring[to].tell(Hop{id, t, seq[to]++, false});
      }
    });
  }
  for (auto& t : threads) t.join();

  // Mailboxes order messages per sender only, so a Report may overtake hops from other
  // senders: collect until every message is accounted for (or a generous deadline passes).
  std::vector<int> arrivals(kTotal, 0);
  int64_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (seen < kTotal && std::chrono::steady_clock::now() < deadline) {
    for (auto& node : ring) {
      std::vector<int> finished = node.ask(Report{}).get();
      for (std::size_t id = 0; id < finished.size(); ++id) {
        arrivals[id] += finished[id];
        seen += finished[id];
      }
    }
  }
  int missing = 0, duplicated = 0;
  for (int count : arrivals) {
    missing += count == 0;
    duplicated += count > 1;
  }
  EXPECT_EQ(missing, 0);
  EXPECT_EQ(duplicated, 0);
  for (auto& node : ring) EXPECT_EQ(node.ask(Misordered{}).get(), 0) << node.name();
}

}  // namespace
}  // namespace axle
