// Messages between processes as bytes (actors/runtime/wire.h): what a writer puts, a reader takes
// back in order, blocks aligned for use in place; a message cut short or garbled is an error naming
// what was being read, never a read past its end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/actors/runtime/wire.h"

namespace axle {
namespace {

TEST(Wire, ValuesStringsAndBlocksComeBackInOrderWithBlocksAligned) {
  WireWriter out;
  out.put<uint8_t>(7);
  out.put<int32_t>(-3);
  out.put_string("all_reduce");
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  out.put_block(values.data(), values.size() * sizeof(float));
  out.put<uint64_t>(42);
  const std::vector<std::byte> bytes = std::move(out).take();

  WireReader in(bytes);
  EXPECT_EQ(in.get<uint8_t>("a"), 7);
  EXPECT_EQ(in.get<int32_t>("b"), -3);
  EXPECT_EQ(in.get_string("c"), "all_reduce");
  const std::span<const std::byte> block = in.get_block("d");
  ASSERT_EQ(block.size(), values.size() * sizeof(float));
  EXPECT_EQ((block.data() - bytes.data()) % 16, 0);
  EXPECT_EQ(reinterpret_cast<const float*>(block.data())[2], 3.25f);
  EXPECT_EQ(in.get<uint64_t>("e"), 42u);
  EXPECT_TRUE(in.done());
}

TEST(Wire, LargeBlocksAmongSmallOnesComeBackWholeAndAlignedInEitherTaking) {
  WireWriter out;
  out.put<uint8_t>(1);
  std::vector<float> large(10'001);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i) * 0.5f;
  const std::vector<int32_t> small = {4, 5, 6};
  out.put_block(large.data(), large.size() * sizeof(float));
  out.put<uint8_t>(2);
  out.put_block(small.data(), small.size() * sizeof(int32_t));
  out.put_block(large.data() + 1, (large.size() - 1) * sizeof(float));
  out.put_string("end");
  std::vector<std::byte> copied(out.size());
  out.copy_to(copied.data());
  const std::vector<std::byte> taken = std::move(out).take();
  ASSERT_EQ(copied, taken);

  WireReader in(taken);
  EXPECT_EQ(in.get<uint8_t>("a"), 1);
  const std::span<const std::byte> first = in.get_block("b");
  ASSERT_EQ(first.size(), large.size() * sizeof(float));
  EXPECT_EQ((first.data() - taken.data()) % 16, 0);
  EXPECT_EQ(std::memcmp(first.data(), large.data(), first.size()), 0);
  EXPECT_EQ(in.get<uint8_t>("c"), 2);
  const std::span<const std::byte> second = in.get_block("d");
  ASSERT_EQ(second.size(), small.size() * sizeof(int32_t));
  EXPECT_EQ((second.data() - taken.data()) % 16, 0);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(second.data())[2], 6);
  const std::span<const std::byte> third = in.get_block("e");
  ASSERT_EQ(third.size(), (large.size() - 1) * sizeof(float));
  EXPECT_EQ((third.data() - taken.data()) % 16, 0);
  EXPECT_EQ(reinterpret_cast<const float*>(third.data())[0], 0.5f);
  EXPECT_EQ(reinterpret_cast<const float*>(third.data())[9'999], 5'000.0f);
  EXPECT_EQ(in.get_string("f"), "end");
  EXPECT_TRUE(in.done());
}

TEST(Wire, EveryCutOfAMessageIsAnErrorNamingWhatWasRead) {
  WireWriter out;
  out.put<uint64_t>(1);
  out.put_string("tag");
  const std::vector<int32_t> values(10, 5);
  out.put_block(values.data(), values.size() * sizeof(int32_t));
  const std::vector<std::byte> whole = std::move(out).take();
  for (std::size_t cut = 0; cut < whole.size(); ++cut) {
    const std::vector<std::byte> part(whole.begin(),
                                      whole.begin() + static_cast<std::ptrdiff_t>(cut));
    WireReader in(part);
    try {
      (void)in.get<uint64_t>("the kind");
      (void)in.get_string("the tag");
      (void)in.get_block("the operand");
      FAIL() << "a message cut at byte " << cut << " was read whole";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cut short: reading the"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Wire, AGarbledLengthIsAnErrorNotAHugeRead) {
  WireWriter out;
  out.put<uint64_t>(~uint64_t{0} - 3);  // a string length no message holds
  const std::vector<std::byte> bytes = std::move(out).take();
  WireReader in(bytes);
  EXPECT_THROW((void)in.get_string("a tag"), std::runtime_error);
  WireReader again(bytes);
  EXPECT_THROW((void)again.get_block("an operand"), std::runtime_error);
}

}  // namespace
}  // namespace axle
