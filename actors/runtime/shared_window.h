// actors: the memory the processes of one host share (an MPI shared window the transport makes),
// each writing its messages to the others into its own part. The sender copies a large message
// there once and sends a short note of where it lies; the receiver reads it in place and marks
// its header once done with it, so that the sender may write there again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "axle/actors/runtime/message_bytes.h"

namespace axle {

/// The header before each message in shared memory: its first four bytes, the receiver sets to 1
/// once done with the message. A whole cache line, so the message starts aligned.
inline constexpr std::size_t kSharedHeader = 64;

class SharedWindow {
 public:
  /// This process's part (`base`, `bytes`) and each process's part by rank (null for this one
  /// and for those of other hosts). Until attached, it reaches no process.
  void attach(std::byte* base, std::size_t bytes,
              std::vector<std::pair<std::byte*, std::size_t>> peers);

  /// Whether messages to process `to` can go through it.
  [[nodiscard]] bool reaches(int to) const noexcept;
  /// This process's part (0 when not attached).
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  /// The bytes of this process's part that messages still hold (not yet released).
  [[nodiscard]] std::size_t in_use();
  /// Messages written so far.
  [[nodiscard]] uint64_t messages() const noexcept {
    return messages_.load(std::memory_order_relaxed);
  }

  /// Writes a message of `size` bytes (`rest` around `blocks`, as ProcessTransport::send takes
  /// them) into this process's part; returns the note its receiver reads it by, or null when
  /// the part has no room for it now.
  [[nodiscard]] ProcessMessage write(std::size_t size, std::span<const std::byte> rest,
                                     const std::vector<MessageBlock>& blocks);
  /// The message a note from process `from` points to, read in place. Throws std::runtime_error
  /// saying what is wrong with a note that points outside what `from` shares.
  [[nodiscard]] std::shared_ptr<MessageBytes> read(int from, const MessageBytes& note) const;

 private:
  // Forgets the messages their receivers have released; the caller holds mutex_.
  void reclaim();
  // Room for a message of `size` bytes and its header at the lowest offset free (what was
  // written last is the likeliest in the caches), or none.
  std::optional<std::size_t> reserve(std::size_t size);

  std::byte* base_ = nullptr;  // this process's part
  std::size_t first_ = 0;      // the part's first offset aligned to kSharedHeader
  std::size_t bytes_ = 0;      // the part's size
  std::vector<std::pair<std::byte*, std::size_t>> peers_;  // by rank: each one's part, or null
  std::mutex mutex_;
  std::map<std::size_t, std::size_t> live_;  // under mutex_: offset -> bytes, not yet released
  std::atomic<uint64_t> messages_{0};
};

}  // namespace axle
