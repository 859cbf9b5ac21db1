// actor_bench: the actor runtime's latency and throughput.
//   pingpong  — round trip between two actors, each on a thread of its own
//   fanin     — N sender actors flooding one receiver
//   fanout    — one sender actor spreading messages over N receivers
//   spawn10k  — spawning 10,000 actors and delivering one message to each
// Figures are JSON lines on stdout (see benchmarks/README.md); --quick is the demo's short run.
#include <CLI/CLI.hpp>
#include <chrono>
#include <thread>

#include "axle/engine/runtime.h"
#include "axle/engine/spawn.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// --- ping-pong -------------------------------------------------------------------------------

class Pinger;
struct Pong {};
struct Ping {
  ActorRef<Pinger> reply_to;
};
class Ponger : public Actor<Ponger, Ping> {
 public:
  void handle(Ping& m);  // defined below Pinger, which must be complete to be sent to
};

struct RunPingPong {
  using Reply = std::vector<double>;
  ActorRef<Ponger> peer;
  int rounds;
};

class Pinger : public Actor<Pinger, RunPingPong, Pong> {
 public:
  void handle(RunPingPong& m, Promise<std::vector<double>>&& done) {
    peer_ = m.peer;
    remaining_ = m.rounds;
    rtts_.clear();
    rtts_.reserve(m.rounds);
    done_ = std::move(done);
    sent_at_ = now_ns();
    peer_.tell(Ping{self()});
  }
  void handle(Pong&) {
    const int64_t t = now_ns();
    rtts_.push_back(static_cast<double>(t - sent_at_));
    if (--remaining_ == 0) {
      done_.set_value(std::move(rtts_));
      return;
    }
    sent_at_ = t;
    peer_.tell(Ping{self()});
  }

 private:
  ActorRef<Ponger> peer_;
  int remaining_ = 0;
  int64_t sent_at_ = 0;
  std::vector<double> rtts_;
  Promise<std::vector<double>> done_;
};

void Ponger::handle(Ping& m) { m.reply_to.tell(Pong{}); }

void pingpong(int rounds) {
  Runtime rt(RuntimeOptions{.threads = 1});
  auto ponger = spawn<Ponger>(rt, SpawnOptions{.name = "ponger", .dedicated_thread = true});
  auto pinger = spawn<Pinger>(rt, SpawnOptions{.name = "pinger", .dedicated_thread = true});
  pinger.ask(RunPingPong{ponger, rounds / 10}).get();  // warm up
  std::vector<double> rtts = pinger.ask(RunPingPong{ponger, rounds}).get();
  const std::map<std::string, Param> params{{"rounds", int64_t{rounds}}};
  emit("actor", "pingpong_rtt_median_ns", quantile(rtts, 0.5), "ns", params);
  emit("actor", "pingpong_rtt_p99_ns", quantile(rtts, 0.99), "ns", params);
}

// --- fan-in ----------------------------------------------------------------------------------

struct Item {
  int64_t payload;
};
struct Expect {
  using Reply = int64_t;
  int64_t count;
};

// Counts items; replies to Expect once that many have arrived.
class Receiver : public Actor<Receiver, Item, Expect> {
 public:
  void handle(Item& m) {
    sum_ += m.payload;
    if (++received_ == expected_) done_.set_value(sum_);
  }
  // The total is absolute: items from other senders may arrive before this message does.
  void handle(Expect& m, Promise<int64_t>&& done) {
    expected_ = m.count;
    done_ = std::move(done);
    if (received_ == expected_) done_.set_value(sum_);
  }

 private:
  int64_t received_ = 0;
  int64_t expected_ = -1;
  int64_t sum_ = 0;
  Promise<int64_t> done_;
};

struct Burst {
  int64_t remaining;
};
// Sends its quota in bursts, re-telling itself between bursts so it yields its worker.
class Sender : public Actor<Sender, Burst> {
 public:
  Sender(std::vector<ActorRef<Receiver>> targets, int burst)
      : targets_(std::move(targets)), burst_(burst) {}
  void handle(Burst& m) {
    const int64_t n = std::min<int64_t>(burst_, m.remaining);
    for (int64_t i = 0; i < n; ++i) {
      targets_[next_].tell(Item{1});
      if (++next_ == targets_.size()) next_ = 0;
    }
    if (m.remaining > n) self().tell(Burst{m.remaining - n});
  }

 private:
  std::vector<ActorRef<Receiver>> targets_;
  std::size_t next_ = 0;
  int burst_;
};

double fanin(int senders, int64_t total, MailboxKind mailbox, int threads) {
  Runtime rt(RuntimeOptions{.threads = threads});
  auto receiver = spawn<Receiver>(
      rt, SpawnOptions{.name = "receiver", .dedicated_thread = true, .mailbox = mailbox});
  std::vector<ActorRef<Sender>> all;
  for (int s = 0; s < senders; ++s) {
    all.push_back(spawn<Sender>(rt, SpawnOptions{.name = "sender"},
                                std::vector<ActorRef<Receiver>>{receiver}, 256));
  }
  auto done = receiver.ask(Expect{total});
  const auto start = Clock::now();
  for (auto& s : all) s.tell(Burst{total / senders});
  const int64_t sum = done.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (sum != total) throw std::runtime_error("fan-in lost messages");
  return static_cast<double>(total) / seconds;
}

double fanout(int receivers, int64_t total, int threads) {
  Runtime rt(RuntimeOptions{.threads = threads});
  std::vector<ActorRef<Receiver>> targets;
  std::vector<Future<int64_t>> done;
  for (int r = 0; r < receivers; ++r) {
    targets.push_back(spawn<Receiver>(rt, SpawnOptions{.name = "receiver"}));
    done.push_back(targets.back().ask(Expect{total / receivers}));
  }
  auto sender =
      spawn<Sender>(rt, SpawnOptions{.name = "sender", .dedicated_thread = true}, targets, 256);
  const auto start = Clock::now();
  sender.tell(Burst{total / receivers * receivers});
  for (auto& d : done) d.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(total / receivers * receivers) / seconds;
}

// --- spawn 10k -------------------------------------------------------------------------------

struct Hello {
  std::shared_ptr<std::atomic<int>> left;
  std::shared_ptr<Promise<void>> all_done;
};
class Greeter : public Actor<Greeter, Hello> {
 public:
  void handle(Hello& m) {
    if (m.left->fetch_sub(1, std::memory_order_acq_rel) == 1) m.all_done->set_value();
  }
};

double spawn_many(int count, int threads) {
  Runtime rt(RuntimeOptions{.threads = threads});
  auto left = std::make_shared<std::atomic<int>>(count);
  auto [promise, future] = make_promise<void>();
  auto all_done = std::make_shared<Promise<void>>(std::move(promise));
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    spawn<Greeter>(rt, SpawnOptions{.name = "greeter"}).tell(Hello{left, all_done});
  }
  future.get();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  CLI::App app{"actor_bench: latency and throughput of axle's actor runtime"};
  bool quick = false;
  std::vector<std::string> only;
  int threads = 2;
  app.add_flag("--quick", quick, "a short run (the demo)");
  app.add_option("--only", only, "run only these: pingpong fanin fanout spawn10k");
  app.add_option("--threads", threads, "pool threads for fan-in/fan-out/spawn");
  CLI11_PARSE(app, argc, argv);
  auto wanted = [&](const std::string& name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };

  const int rounds = quick ? 20'000 : 200'000;
  const int64_t messages = quick ? 2'000'000 : 20'000'000;
  if (wanted("pingpong")) pingpong(rounds);
  if (wanted("fanin")) {
    for (MailboxKind kind : {MailboxKind::kLockFree, MailboxKind::kLocked}) {
      for (int senders : {1, 4}) {
        // Senders share one pool thread; the receiver has its own: one core each.
        double rate = fanin(senders, messages, kind, 1);
        emit("actor", "fanin_msgs_per_s", rate, "msg/s",
             {{"senders", int64_t{senders}},
              {"mailbox", std::string(mailbox_kind_name(kind))},
              {"messages", messages},
              {"sender_threads", int64_t{1}}});
      }
    }
  }
  if (wanted("fanout")) {
    for (int receivers : {4, 64}) {
      emit("actor", "fanout_msgs_per_s", fanout(receivers, messages, threads), "msg/s",
           {{"receivers", int64_t{receivers}},
            {"messages", messages},
            {"threads", int64_t{threads}}});
    }
  }
  if (wanted("spawn10k")) {
    emit("actor", "spawn10k_total_ms", spawn_many(10'000, threads), "ms",
         {{"actors", int64_t{10'000}}, {"threads", int64_t{threads}}});
  }
  return 0;
}
