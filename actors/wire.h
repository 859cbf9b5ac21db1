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
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_string(std::string_view text) {
    put<uint64_t>(text.size());
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    bytes_.insert(bytes_.end(), p, p + text.size());
  }
  /// A block of bytes, starting at a multiple of 16 from the message's start, so a reader can
  /// use it in place as an array of any element type.
  void put_block(const void* data, std::size_t size) {
    put<uint64_t>(size);
    bytes_.resize((bytes_.size() + 15) / 16 * 16);
    const auto* p = static_cast<const std::byte*>(data);
    bytes_.insert(bytes_.end(), p, p + size);
  }
  [[nodiscard]] std::vector<std::byte> take() && { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
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
