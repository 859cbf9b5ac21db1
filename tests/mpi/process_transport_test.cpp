// The transport between the job's processes (under mpirun by CTest: 3 processes, each sending to
// the next; run with the host's shared memory, with little of it, and without): messages whose
// large blocks are sent from where they lie arrive whole, in order with the sender's other
// messages, whether the sender posts them itself or hands them to the transport's thread, whether
// they go through MPI's sends or shared memory, and a thread that polls for itself is given them
// on its own thread; messages in shared memory stay whole while their receiver holds them, and
// their space is reused once it lets go; the transport's thread rests while nothing here expects
// a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "axle/actors/runtime/process_transport.h"
#include "axle/actors/runtime/transport_settings.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

constexpr int kMessages = 24;  // each test's
// The messages of LargeMessagesToAProcessOfThisHost... its receiver holds, and the first of them
// (after those of the tests before it).
constexpr int kHeld = 12;
constexpr std::size_t kFirstHeld = 6 * kMessages;

// Message `k` from process `from`: its bytes tell both, byte by byte.
std::vector<std::byte> content(int from, int k) {
  const std::size_t size = k % 2 == 0 ? 40 + static_cast<std::size_t>(k)
                                      : (std::size_t{300} << 10) + 16 * static_cast<std::size_t>(k);
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::byte>(
        (i * 131 + static_cast<std::size_t>(k) * 7 + static_cast<std::size_t>(from) * 29) % 251);
  }
  return bytes;
}

struct Received {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<int, std::vector<std::byte>>> messages;
  std::vector<std::thread::id> delivered_on;  // by message
  // Messages [hold_first, hold_last) in arrival order are kept themselves too, in `held`.
  std::size_t hold_first = 0;
  std::size_t hold_last = 0;
  std::vector<ProcessMessage> held;
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
      received_->hold_first = kFirstHeld;
      received_->hold_last = kFirstHeld + kHeld;
      transport_->set_receiver([received = received_](int from, ProcessMessage message) {
        std::lock_guard lock(received->mutex);
        received->messages.emplace_back(
            from, std::vector<std::byte>(message->bytes().begin(), message->bytes().end()));
        received->delivered_on.push_back(std::this_thread::get_id());
        const std::size_t index = received->messages.size() - 1;
        if (index >= received->hold_first && index < received->hold_last) {
          received->held.push_back(std::move(message));
        }
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
  // Waits up to a minute for `count` messages in all.
  [[nodiscard]] bool wait_for(std::size_t count) {
    std::unique_lock lock(received_->mutex);
    return received_->arrived.wait_for(lock, std::chrono::seconds(60),
                                       [&] { return received_->messages.size() >= count; });
  }

  ProcessTransport* transport_ = nullptr;
  ProcessPlacement placement_;
  static inline const std::shared_ptr<Received> received_ = std::make_shared<Received>();
};

TEST_F(TransportTest, MessagesInBlocksArriveWholeAndInOrderWithTheOthers) {
  send_all(*transport_, placement_.index, next(), 0);
  std::unique_lock lock(received_->mutex);
  ASSERT_TRUE(received_->arrived.wait_for(lock, std::chrono::seconds(60),
                                          [&] { return received_->messages.size() >= kMessages; }));
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

TEST_F(TransportTest, LargeMessagesToAProcessOfThisHostGoThroughSharedMemoryUntilItIsFull) {
  // Every process runs on this host: they share memory unless AXLE_SHARED_MEMORY_MB=0.
  const std::size_t setting = config::read_transport_settings().shared_memory_bytes;
  ASSERT_EQ(transport_->shares_memory_with(next()), setting > 0);
  EXPECT_FALSE(transport_->shares_memory_with(placement_.index));
  const std::size_t part = transport_->shared_memory_bytes();
  EXPECT_LE(part, setting);
  const std::size_t first = kFirstHeld;  // after the earlier tests' messages
  // kHeld messages of about 300 KiB, all held by their receiver at once: as many as fit go
  // through shared memory (each with a header of 64 bytes, rounded up to 64), the others through
  // MPI's sends, all arriving whole and in order.
  const uint64_t through_before = transport_->messages_through_shared_memory();
  std::size_t fit = 0;
  std::size_t room = part >= 64 ? part - 64 : 0;  // the part may start unaligned
  for (int k = 0; k < kHeld; ++k) {
    const std::size_t bytes = content(placement_.index, 2 * k + 1).size();
    const std::size_t entry = (64 + bytes + 63) / 64 * 64;
    if (setting > 0 && entry <= room) {
      room -= entry;
      ++fit;
    } else {
      break;
    }
  }
  for (int k = 0; k < kHeld; ++k) {
    const std::vector<std::byte> bytes = content(placement_.index, 2 * k + 1);
    const std::size_t size = bytes.size();
    auto kept = std::make_shared<const std::vector<std::byte>>(bytes);
    std::vector<MessageBlock> blocks{{64, {kept->data() + 64, size - 128}}};
    std::vector<std::byte> rest(bytes.begin(), bytes.begin() + 64);
    rest.insert(rest.end(), bytes.end() - 64, bytes.end());
    transport_->send(next(), size, rest, std::move(blocks), kept);
  }
  ASSERT_TRUE(wait_for(first + kHeld));
  EXPECT_EQ(transport_->messages_through_shared_memory() - through_before, fit);
  if (setting >= (std::size_t{8} << 20)) {
    EXPECT_EQ(fit, static_cast<std::size_t>(kHeld));
  }
  {
    std::lock_guard lock(received_->mutex);
    ASSERT_EQ(received_->held.size(), static_cast<std::size_t>(kHeld));
    for (int k = 0; k < kHeld; ++k) {
      // Read again from the message itself, after every other one was written.
      const ProcessMessage& message = received_->held[static_cast<std::size_t>(k)];
      const std::vector<std::byte> bytes(message->bytes().begin(), message->bytes().end());
      EXPECT_TRUE(bytes == content(previous(), 2 * k + 1)) << "held message " << k;
    }
  }
  // This process's messages stay in its part while the next one holds them: it lets go only
  // once told so (after this check), then the part empties.
  EXPECT_GE(transport_->shared_memory_in_use(), fit * (std::size_t{300} << 10));
  transport_->send(next(), MessageBytes::of(std::vector<std::byte>(8, std::byte{7})));
  ASSERT_TRUE(wait_for(first + kHeld + 1));
  {
    std::lock_guard lock(received_->mutex);
    received_->held.clear();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (transport_->shared_memory_in_use() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(transport_->shared_memory_in_use(), 0u) << "the next process's releases never came";
  // With the part free again, the next messages go through it (and reuse its first bytes).
  if (fit > 0) {
    const uint64_t before = transport_->messages_through_shared_memory();
    send_all(*transport_, placement_.index, next(), 0);
    ASSERT_TRUE(wait_for(first + kHeld + 1 + kMessages));
    // The odd ones, in blocks; the receiver lets each go at once, but with little shared memory
    // some may still find it full.
    const uint64_t through = transport_->messages_through_shared_memory() - before;
    EXPECT_GT(through, 0u);
    if (setting >= (std::size_t{8} << 20)) {
      EXPECT_EQ(through, static_cast<uint64_t>(kMessages / 2));
    }
    Received part_of;
    part_of.messages.assign(received_->messages.begin() + first + kHeld + 1,
                            received_->messages.begin() + first + kHeld + 1 + kMessages);
    expect_all(part_of, previous(), 0);
  }
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
  // loaded machine only makes either rarer). Another process finishing an earlier test may
  // still wake it for a moment, so the quietest of a few 200 ms windows is what is judged.
  uint64_t fewest_looks = UINT64_MAX;
  for (int window = 0; window < 5 && fewest_looks > 400u; ++window) {
    const uint64_t before = transport_->looks();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    fewest_looks = std::min(fewest_looks, transport_->looks() - before);
  }
  EXPECT_LE(fewest_looks, 400u)
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
