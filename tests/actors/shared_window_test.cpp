// Tests actors/runtime/shared_window.h on memory of this process standing for a host's shared
// window: a message written by one process is read in place by another, its room comes back once
// the reader lets go, and a note pointing outside the sender's part is refused.
#include "axle/actors/runtime/shared_window.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace axle {
namespace {

struct TwoProcesses {
  static constexpr std::size_t kPart = 4096;
  alignas(64) std::byte parts[2][kPart];
  SharedWindow process[2];
  TwoProcesses() {
    allow_borrowed_releases(true);  // as the transport does once the window is made
    process[0].attach(parts[0], kPart, {{nullptr, 0}, {parts[1], kPart}});
    process[1].attach(parts[1], kPart, {{parts[0], kPart}, {nullptr, 0}});
  }
};

TEST(SharedWindow, ReaderSeesTheMessageInPlaceAndItsRoomComesBack) {
  TwoProcesses job;
  EXPECT_TRUE(job.process[0].reaches(1));
  EXPECT_FALSE(job.process[0].reaches(0));
  EXPECT_FALSE(job.process[0].reaches(2));

  std::vector<std::byte> block(1000, std::byte{7});
  const std::vector<std::byte> rest(500, std::byte{1});
  const ProcessMessage note =
      job.process[0].write(1500, rest, {MessageBlock{200, std::span(block)}});
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(job.process[0].messages(), 1u);
  EXPECT_GE(job.process[0].in_use(), 1500 + kSharedHeader);
  {
    const std::shared_ptr<MessageBytes> read = job.process[1].read(0, *note);
    ASSERT_EQ(read->size(), 1500u);
    EXPECT_EQ(read->data(), job.parts[0] + kSharedHeader);  // in place, no copy
    EXPECT_EQ(read->data()[199], std::byte{1});
    EXPECT_EQ(read->data()[200], std::byte{7});
    EXPECT_EQ(read->data()[1199], std::byte{7});
    EXPECT_EQ(read->data()[1200], std::byte{1});
    // No room for a second message of this size until the reader lets go of the first.
    EXPECT_EQ(job.process[0].write(3000, std::vector<std::byte>(3000), {}), nullptr);
  }
  EXPECT_EQ(job.process[0].in_use(), 0u);
  EXPECT_NE(job.process[0].write(3000, std::vector<std::byte>(3000), {}), nullptr);
}

TEST(SharedWindow, RefusesANoteOutsideTheSendersPart) {
  TwoProcesses job;
  const uint64_t outside[2] = {4000, 1000};
  std::vector<std::byte> bytes(sizeof outside);
  std::memcpy(bytes.data(), outside, sizeof outside);
  EXPECT_THROW((void)job.process[1].read(0, *MessageBytes::of(bytes)), std::runtime_error);
  EXPECT_THROW((void)job.process[1].read(1, *MessageBytes::of(bytes)), std::runtime_error);
  EXPECT_THROW((void)job.process[1].read(0, *MessageBytes::of(std::vector<std::byte>(3))),
               std::runtime_error);
}

}  // namespace
}  // namespace axle
