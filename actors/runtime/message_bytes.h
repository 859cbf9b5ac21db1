// actors: messages between processes as bytes — the buffers they arrive in (pooled when large),
// views of messages another process of this host wrote into memory the two share, and the head
// that stands for a message whose large blocks travel apart (ProcessTransport::send with blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace axle {

/// The bytes of one message between processes. A buffer made to receive into is left
/// uninitialised, and a large one goes back to a small pool when its last holder lets go, so a
/// step's messages of the same sizes reuse the memory of the last step's (no page faults).
class MessageBytes {
 public:
  /// `size` bytes, uninitialised.
  [[nodiscard]] static std::shared_ptr<MessageBytes> make(std::size_t size);
  /// `bytes`, as they are.
  [[nodiscard]] static std::shared_ptr<const MessageBytes> of(std::vector<std::byte> bytes);
  /// `size` bytes at `data`, in memory another process of this host shares with this one, read
  /// in place: when the last holder lets go, `*released` becomes 1 (atomically), and the sender
  /// may write there again.
  [[nodiscard]] static std::shared_ptr<MessageBytes> borrowed(std::byte* data, std::size_t size,
                                                              uint32_t* released);

  [[nodiscard]] std::byte* data() noexcept { return data_; }
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

  MessageBytes() = default;
  ~MessageBytes();
  MessageBytes(const MessageBytes&) = delete;
  MessageBytes& operator=(const MessageBytes&) = delete;

 private:
  std::vector<std::byte> owned_;      // or
  std::unique_ptr<std::byte[]> raw_;  // with room for
  std::size_t capacity_ = 0;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  uint32_t* released_ = nullptr;  // borrowed
};

/// One message between processes.
using ProcessMessage = std::shared_ptr<const MessageBytes>;

/// A large block of a message sent from where it lies instead of copied into the message: its
/// offset in the message and its bytes.
struct MessageBlock {
  std::size_t offset;
  std::span<const std::byte> bytes;
};

/// Whether a borrowed message (MessageBytes::borrowed) that its last holder lets go of marks its
/// memory released: true while the memory the processes share is there. The transport closes
/// it before that memory goes at exit, so a message dropped later writes nothing.
void allow_borrowed_releases(bool allow);

/// A message whose large blocks travel apart: its head holds the message's size, the blocks'
/// offsets and sizes, and the message's other bytes; the blocks follow, in order.
[[nodiscard]] ProcessMessage encode_head(std::size_t size, std::span<const std::byte> rest,
                                         const std::vector<MessageBlock>& blocks);

/// What a head says: the whole message, its other bytes in place, and where each block goes in
/// it (offset, size), to be received there.
struct DecodedHead {
  std::shared_ptr<MessageBytes> whole;
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
};
/// Throws std::runtime_error saying what does not fit when `head` is not a head.
[[nodiscard]] DecodedHead decode_head(const MessageBytes& head);

/// Writes a message of `rest` and `blocks` (as send with blocks takes them) whole at `out`.
void write_whole(std::byte* out, std::span<const std::byte> rest,
                 const std::vector<MessageBlock>& blocks);

}  // namespace axle
