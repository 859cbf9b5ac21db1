// Tests actors/runtime/message_bytes.h: a message sent with blocks travels as a head and its
// blocks; the head put back together gives the message as sent, and a damaged head is refused.
#include "axle/actors/runtime/message_bytes.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace axle {
namespace {

std::vector<std::byte> counting(std::size_t n, int from) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>((from + i) & 0xff);
  return bytes;
}

TEST(MessageHead, DecodesToTheMessageWithItsBlocksWhereTheyGo) {
  // A 100-byte message: 10 bytes, a 30-byte block, 20 bytes, a 25-byte block, 15 bytes.
  const std::vector<std::byte> whole = counting(100, 3);
  const std::vector<MessageBlock> blocks = {{10, std::span(whole).subspan(10, 30)},
                                            {60, std::span(whole).subspan(60, 25)}};
  std::vector<std::byte> rest;
  rest.insert(rest.end(), whole.begin(), whole.begin() + 10);
  rest.insert(rest.end(), whole.begin() + 40, whole.begin() + 60);
  rest.insert(rest.end(), whole.begin() + 85, whole.end());

  const ProcessMessage head = encode_head(whole.size(), rest, blocks);
  DecodedHead decoded = decode_head(*head);
  ASSERT_EQ(decoded.blocks.size(), 2u);
  EXPECT_EQ(decoded.blocks[0], (std::pair<std::size_t, std::size_t>{10, 30}));
  EXPECT_EQ(decoded.blocks[1], (std::pair<std::size_t, std::size_t>{60, 25}));
  ASSERT_EQ(decoded.whole->size(), whole.size());
  // The blocks arrive apart: put them where the head says, then the message is whole.
  for (const MessageBlock& block : blocks) {
    std::memcpy(decoded.whole->data() + block.offset, block.bytes.data(), block.bytes.size());
  }
  EXPECT_EQ(std::memcmp(decoded.whole->data(), whole.data(), whole.size()), 0);

  std::vector<std::byte> written(whole.size());
  write_whole(written.data(), rest, blocks);
  EXPECT_EQ(written, whole);
}

TEST(MessageHead, RefusesAHeadCutShortOrWithBlocksOutsideTheMessage) {
  const std::vector<std::byte> whole = counting(64, 0);
  const std::vector<MessageBlock> blocks = {{8, std::span(whole).subspan(8, 16)}};
  std::vector<std::byte> rest(whole.begin(), whole.begin() + 8);
  rest.insert(rest.end(), whole.begin() + 24, whole.end());
  const ProcessMessage head = encode_head(whole.size(), rest, blocks);

  const ProcessMessage cut =
      MessageBytes::of(std::vector<std::byte>(head->data(), head->data() + 20));
  EXPECT_THROW((void)decode_head(*cut), std::runtime_error);

  // The block's offset moved past the message's end.
  std::vector<std::byte> bad(head->data(), head->data() + head->size());
  const uint64_t far = 60;
  std::memcpy(bad.data() + 16, &far, sizeof far);
  EXPECT_THROW((void)decode_head(*MessageBytes::of(bad)), std::runtime_error);
}

TEST(MessageBytes, LargeBuffersAreReusedAfterTheirLastHolderLetsGo) {
  const std::byte* first = nullptr;
  {
    std::shared_ptr<MessageBytes> message = MessageBytes::make(std::size_t{1} << 20);
    first = message->data();
  }
  std::shared_ptr<MessageBytes> again = MessageBytes::make(std::size_t{1} << 20);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(again->size(), std::size_t{1} << 20);
}

}  // namespace
}  // namespace axle
