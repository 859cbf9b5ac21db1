// Stress: 1,000,000 messages across 8 actors and 4 threads arrive exactly once and in per-sender
// order, including messages the actors forward to each other; also with the actors run on the
// sending threads as well as on their workers (tell_here). Runs under ThreadSanitizer too.
#include <gtest/gtest.h>

#include <thread>
#include <utility>

#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"

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
  using Reply = std::pair<int, int>;  // hops out of order from threads, and from actors
};

class Node;
using Ring = std::vector<ActorRef<Node>>;

class Node : public Actor<Node, Hop, Report, Misordered> {
 public:
  Node(int index, const Ring* ring)
      : index_(index), ring_(ring), last_seen_(kSenders, -1), next_seq_(kActors, 0) {}

  void handle(Hop& m) {
    if (m.seq <= last_seen_[m.sender]) ++(m.sender < kThreads ? misordered_[0] : misordered_[1]);
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
  std::pair<int, int> handle(Misordered&) { return {misordered_[0], misordered_[1]}; }

 private:
  int index_;
  const Ring* ring_;
  std::vector<int64_t> last_seen_;
  std::vector<int64_t> next_seq_;
  std::vector<int> finished_;
  int misordered_[2] = {0, 0};
};

// With `here`, the sending threads hand every other message over with tell_here: idle actors
// then run on the senders' threads, taking turns with their workers.
void send_a_million(bool here) {
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
        Hop hop{id, t, seq[to]++, false};
        if (here && k % 2 == 1) {
          ring[to].tell_here(std::move(hop));
        } else {
          ring[to].tell(std::move(hop));
        }
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
  for (auto& node : ring) {
    const auto [from_threads, from_actors] = node.ask(Misordered{}).get();
    EXPECT_EQ(from_threads, 0) << node.name();
    // An actor run on a sender's thread sends from that thread: ordered with that thread's
    // messages, not with its own sent from its worker.
    if (!here) {
      EXPECT_EQ(from_actors, 0) << node.name();
    }
  }
}

TEST(ActorStress, MillionMessagesArriveExactlyOnceInPerSenderOrder) { send_a_million(false); }

TEST(ActorStress, MessagesHandledOnTheSendersThreadsArriveExactlyOnceInPerSenderOrder) {
  send_a_million(true);
}

}  // namespace
}  // namespace axle
