// The transport between the job's processes (under mpirun by CTest: 3 processes, each sending to
// the next): messages whose large blocks are sent from where they lie arrive whole, in order with
// the sender's other messages, whether the sender posts them itself or hands them to the
// transport's thread.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
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

void expect_all(const Received& received, int from, int first) {
  ASSERT_EQ(received.messages.size(), static_cast<std::size_t>(first + kMessages));
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

}  // namespace
}  // namespace axle
