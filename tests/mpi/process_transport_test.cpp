// The transport between the job's processes (under mpirun by CTest: 3 processes, each sending to
// the next): messages whose large blocks are sent from where they lie arrive whole, in order with
// the sender's other messages, whether the sender posts them itself or hands them to the
// transport's thread, and a thread that polls for itself is given them on its own thread; the
// transport's thread rests while nothing here expects a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/process_transport.h"

namespace axle {
namespace {

constexpr int kMessages = 24;  // each test's

// Message `k` from process `from`: its bytes tell both, byte by byte.
std::vector<std::byte> content(int from, int k) {
  const std::size_t size = k % 2 == 0 ? 40 + static_cast<std::size_t>(k)
                                      : (std::size_t{300} << 10) + 16 * static_cast<std::size_t>(k);
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(k) * 7 +
                                       static_cast<std::size_t>(from) * 29) % 251);
  }
  return bytes;
}

struct Received {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<int, std::vector<std::byte>>> messages;
  std::vector<std::thread::id> delivered_on;  // by message
};

// Messages `first` on; odd ones go in blocks: two large ones where they lie, the bytes around
// them copied.
void send_all(ProcessTransport& transport, int me, int to, int first) {
  for (int k = first; k < first + kMessages; ++k) {
    auto bytes = std::make_shared<const std::vector<std::byte>>(content(me, k));
    if (k % 2 == 0) {
      transport.send(to, MessageBytes::of(*bytes));
      continue;
    }
    const std::size_t size = bytes->size();
    const std::size_t first = 48, second = size / 2 + 16;
    std::vector<MessageBlock> blocks{{first, {bytes->data() + first, size / 2 - first}},
                                     {second, {bytes->data() + second, size - second - 32}}};
    std::vector<std::byte> rest(bytes->begin(), bytes->begin() + first);
    rest.insert(rest.end(), bytes->begin() + size / 2, bytes->begin() + second);
    rest.insert(rest.end(), bytes->end() - 32, bytes->end());
    transport.send(to, size, rest, std::move(blocks), bytes);
  }
}

// Messages `first` on, as `from` sent them; later ones may have come too (the sender may be in
// its next test already).
void expect_all(const Received& received, int from, int first) {
  ASSERT_GE(received.messages.size(), static_cast<std::size_t>(first + kMessages));
  for (int k = first; k < first + kMessages; ++k) {
    const auto& [sender, bytes] = received.messages[static_cast<std::size_t>(k)];
    EXPECT_EQ(sender, from) << "message " << k;
    EXPECT_TRUE(bytes == content(from, k)) << "message " << k << " of " << bytes.size() << " bytes";
  }
}

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = ProcessTransport::get();
    ASSERT_NE(transport_, nullptr) << "run this test under mpirun";
    placement_ = ProcessTransport::placement();
    ASSERT_GE(placement_.count, 2) << "run this test under mpirun with 2 processes or more";
    // One receiver for every test: a process may send the next test's messages before the
    // one it sends to has finished this test.
    static const bool receiving = [&] {
      transport_->set_receiver([received = received_](int from, ProcessMessage message) {
        std::lock_guard lock(received->mutex);
        received->messages.emplace_back(
            from, std::vector<std::byte>(message->bytes().begin(), message->bytes().end()));
        received->delivered_on.push_back(std::this_thread::get_id());
        received->arrived.notify_all();
      });
      return true;
    }();
    ASSERT_TRUE(receiving);
  }
  [[nodiscard]] int next() const { return (placement_.index + 1) % placement_.count; }
  [[nodiscard]] int previous() const {
    return (placement_.index + placement_.count - 1) % placement_.count;
  }
  [[nodiscard]] bool arrived(std::size_t count) {
    std::lock_guard lock(received_->mutex);
    return received_->messages.size() >= count;
  }

  ProcessTransport* transport_ = nullptr;
  ProcessPlacement placement_;
  static inline const std::shared_ptr<Received> received_ = std::make_shared<Received>();
};

TEST_F(TransportTest, MessagesInBlocksArriveWholeAndInOrderWithTheOthers) {
  send_all(*transport_, placement_.index, next(), 0);
  std::unique_lock lock(received_->mutex);
  ASSERT_TRUE(received_->arrived.wait_for(lock, std::chrono::seconds(60), [&] {
    return received_->messages.size() >= kMessages;
  }));
  expect_all(*received_, previous(), 0);
}

TEST_F(TransportTest, SmallCollectivesFitOpenMpisSharedMemoryEagerSends) {
  // CTest's mpirun does not set it: axle's default is in force.
  const char* limit = std::getenv("OMPI_MCA_btl_vader_eager_limit");
  ASSERT_NE(limit, nullptr);
  EXPECT_STREQ(limit, "8192");
}

TEST_F(TransportTest, AThreadPollingForItselfIsGivenMessagesOnItsOwnThread) {
  // After the first test's messages: every process has them before it sends these. Rounds of
  // them, since the transport's thread still looks in now and then and, with more threads than
  // cores, may find a whole round there before the polling thread runs again.
  constexpr int kRounds = 5;
  const auto poll_until = [&](auto done, std::chrono::steady_clock::time_point deadline) {
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      if (!transport_->progress()) std::this_thread::yield();
    }
  };
  transport_->begin_polling();
  for (int round = 1; round <= kRounds; ++round) {
    // Polling a while first, so that the transport's thread is resting when the messages come.
    poll_until([] { return false; },
               std::chrono::steady_clock::now() + std::chrono::milliseconds(2));
    send_all(*transport_, placement_.index, next(), round * kMessages);
    poll_until([&] { return arrived(static_cast<std::size_t>((round + 1) * kMessages)); },
               std::chrono::steady_clock::now() + std::chrono::seconds(60));
  }
  transport_->end_polling(/*wake=*/false);
  std::lock_guard lock(received_->mutex);
  ASSERT_EQ(received_->messages.size(), static_cast<std::size_t>((kRounds + 1) * kMessages));
  for (int round = 1; round <= kRounds; ++round) {
    SCOPED_TRACE(::testing::Message() << "round " << round);
    Received part;
    part.messages.assign(received_->messages.begin(),
                         received_->messages.begin() + (round + 1) * kMessages);
    expect_all(part, previous(), round * kMessages);
  }
  const auto here = std::ranges::count(received_->delivered_on.begin() + kMessages,
                                       received_->delivered_on.end(), std::this_thread::get_id());
  EXPECT_GT(here, 0) << "no message was delivered on the polling thread";
}

TEST_F(TransportTest, ItsThreadRestsWhileNothingHereWaitsAndWatchesForAWaiter) {
  const auto within = [](std::chrono::seconds limit, auto done) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };
  // Once whatever the earlier tests sent has gone, nothing here expects a message.
  ASSERT_TRUE(within(std::chrono::seconds(30), [&] { return transport_->resting(); }))
      << "the transport's thread never rested";
  // Resting, it looks in about once a millisecond; watching, every 50 µs or more often (a
  // loaded machine only makes either rarer).
  const uint64_t before = transport_->looks();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_LE(transport_->looks() - before, 400u)
      << "the transport's thread looked in more than twice a millisecond with nothing expected";
  // A thread that waits for another process without polling wakes it, and it watches for as
  // long as the thread waits.
  transport_->begin_waiting();
  EXPECT_TRUE(within(std::chrono::seconds(30), [&] { return !transport_->resting(); }))
      << "a waiter did not wake the transport's thread";
  for (int look = 0; look < 20; ++look) {
    EXPECT_FALSE(transport_->resting()) << "the transport's thread rested while a thread waited";
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  transport_->end_waiting();
  EXPECT_TRUE(within(std::chrono::seconds(30), [&] { return transport_->resting(); }))
      << "the transport's thread did not rest again after the waiter left";
}

}  // namespace
}  // namespace axle
