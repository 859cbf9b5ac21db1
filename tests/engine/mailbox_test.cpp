#include "axle/engine/mailbox.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "axle/engine/mailbox_impl.h"

namespace axle {
namespace {

class MailboxTest : public ::testing::TestWithParam<MailboxKind> {};

TEST_P(MailboxTest, PopsInPushOrderFromOneThread) {
  auto box = make_mailbox<int>(GetParam());
  for (int i = 0; i < 1000; ++i) box->push(int{i});
  std::vector<int> out(64);
  int expected = 0;
  while (std::size_t n = box->pop_bulk(out.data(), out.size())) {
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], expected++);
  }
  EXPECT_EQ(expected, 1000);
  EXPECT_TRUE(box->empty());
}

TEST_P(MailboxTest, PreservesPerSenderOrderWithConcurrentSenders) {
  auto box = make_mailbox<std::pair<int, int>>(GetParam());
  constexpr int kSenders = 4;
  constexpr int kEach = 20000;
  std::vector<std::thread> senders;
  for (int s = 0; s < kSenders; ++s) {
    senders.emplace_back([&, s] {
      for (int i = 0; i < kEach; ++i) box->push({s, i});
    });
  }
  std::vector<int> next(kSenders, 0);
  int received = 0;
  std::vector<std::pair<int, int>> out(32);
  while (received < kSenders * kEach) {
    std::size_t n = box->pop_bulk(out.data(), out.size());
    for (std::size_t i = 0; i < n; ++i) {
      auto [sender, seq] = out[i];
      ASSERT_EQ(seq, next[sender]) << "sender " << sender;
      ++next[sender];
    }
    received += static_cast<int>(n);
  }
  for (auto& t : senders) t.join();
  EXPECT_TRUE(box->empty());
}

TEST_P(MailboxTest, EmptyReflectsContents) {
  auto box = make_mailbox<int>(GetParam());
  EXPECT_TRUE(box->empty());
  box->push(1);
  EXPECT_FALSE(box->empty());
  int out;
  EXPECT_EQ(box->pop_bulk(&out, 1), 1u);
  EXPECT_TRUE(box->empty());
}

INSTANTIATE_TEST_SUITE_P(Kinds, MailboxTest,
                         ::testing::Values(MailboxKind::kLockFree, MailboxKind::kLocked),
                         [](const auto& info) {
                           return std::string(mailbox_kind_name(info.param));
                         });

}  // namespace
}  // namespace axle
