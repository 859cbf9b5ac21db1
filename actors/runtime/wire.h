// actors: messages between processes as bytes — a writer that appends plain values, strings and
// blocks, and a reader that takes them back in the same order, checking every length, so a short
// or garbled message is an error that says what was being read, never a read past its end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace axle {

class WireWriter {
 public:
  // Room for a typical message's head (a share at a meeting: about 200 bytes, in pieces around
  // its blocks), so that writing one does not grow its vectors put by put.
  WireWriter() {
    inline_.reserve(256);
    pieces_.reserve(8);
  }

  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put(const T& value) { append(reinterpret_cast<const std::byte*>(&value), sizeof(T)); }
  void put_string(std::string_view text) {
    put<uint64_t>(text.size());
    append(reinterpret_cast<const std::byte*>(text.data()), text.size());
  }
  /// A block of bytes, starting at a multiple of 16 from the message's start, so a reader can
  /// use it in place as an array of any element type. A large block is not copied here but when
  /// the message is taken (take or copy_to), once, into the message's own buffer: its bytes must
  /// stay as they are until then.
  void put_block(const void* data, std::size_t size) {
    put<uint64_t>(size);
    static constexpr std::byte kZeros[16] = {};
    append(kZeros, (size_ + 15) / 16 * 16 - size_);
    const auto* p = static_cast<const std::byte*>(data);
    if (size < kBlockByReference) return append(p, size);
    pieces_.push_back({p, size});
    size_ += size;
  }

  /// The message's size in bytes.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Writes the message's `size()` bytes to `out`.
  void copy_to(std::byte* out) const {
    const std::byte* next_inline = inline_.data();
    for (const Piece& piece : pieces_) {
      const std::byte* from = piece.data ? piece.data : next_inline;
      if (!piece.data) next_inline += piece.size;
      if (piece.size > 0) std::memcpy(out, from, piece.size);
      out += piece.size;
    }
  }
  /// Each run of the message's bytes, in order: `f(data, size, by_reference)`; a block put by
  /// reference comes whole, as one run.
  template <class F>
  void for_each_piece(F&& f) const {
    const std::byte* next_inline = inline_.data();
    for (const Piece& piece : pieces_) {
      if (piece.data) {
        f(piece.data, piece.size, true);
      } else {
        f(next_inline, piece.size, false);
        next_inline += piece.size;
      }
    }
  }
  [[nodiscard]] std::vector<std::byte> take() && {
    std::vector<std::byte> bytes(size_);
    copy_to(bytes.data());
    return bytes;
  }

 private:
  // From this size a block is copied only once, when the message is taken: an operand of a
  // collective goes straight from its tensor into the buffer MPI sends from.
  static constexpr std::size_t kBlockByReference = 4096;
  // A run of the message's bytes: a referenced block, or (data null) the next `size` of inline_.
  struct Piece {
    const std::byte* data;
    std::size_t size;
  };

  void append(const std::byte* p, std::size_t n) {
    inline_.insert(inline_.end(), p, p + n);
    if (pieces_.empty() || pieces_.back().data) pieces_.push_back({nullptr, 0});
    pieces_.back().size += n;
    size_ += n;
  }

  std::vector<std::byte> inline_;
  std::vector<Piece> pieces_;
  std::size_t size_ = 0;
};

class WireReader {
 public:
  explicit WireReader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  template <class T>
  requires std::is_trivially_copyable_v<T>
  [[nodiscard]] T get(std::string_view what) {
    T value;
    std::memcpy(&value, take(sizeof(T), what).data(), sizeof(T));
    return value;
  }
  [[nodiscard]] std::string get_string(std::string_view what) {
    return std::string(get_string_view(what));
  }
  /// A string put by put_string, in place: valid as long as the message's bytes are.
  [[nodiscard]] std::string_view get_string_view(std::string_view what) {
    const auto size = get<uint64_t>(what);
    const std::span<const std::byte> text = take(size, what);
    return {reinterpret_cast<const char*>(text.data()), text.size()};
  }
  /// A block put by put_block, in place.
  [[nodiscard]] std::span<const std::byte> get_block(std::string_view what) {
    const auto size = get<uint64_t>(what);
    const std::size_t aligned = (at_ + 15) / 16 * 16;
    if (aligned > bytes_.size()) fail(what, size);
    at_ = aligned;
    return take(size, what);
  }
  [[nodiscard]] bool done() const noexcept { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> take(std::size_t size, std::string_view what) {
    if (size > bytes_.size() - at_) fail(what, size);
    const std::span<const std::byte> part = bytes_.subspan(at_, size);
    at_ += size;
    return part;
  }
  [[noreturn]] void fail(std::string_view what, std::size_t size) const {
    throw std::runtime_error("a message of " + std::to_string(bytes_.size()) +
                             " bytes from another process is cut short: reading " +
                             std::string(what) + " (" + std::to_string(size) + " bytes) at byte " +
                             std::to_string(at_));
  }

  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

}  // namespace axle
