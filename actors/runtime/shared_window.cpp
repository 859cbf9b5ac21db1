// actors: the memory a host's processes share, as this process writes and reads messages in it.
#include "axle/actors/runtime/shared_window.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

namespace axle {

void SharedWindow::attach(std::byte* base, std::size_t bytes,
                          std::vector<std::pair<std::byte*, std::size_t>> peers) {
  base_ = base;
  bytes_ = bytes;
  first_ = (kSharedHeader - reinterpret_cast<uintptr_t>(base) % kSharedHeader) % kSharedHeader;
  peers_ = std::move(peers);
}

bool SharedWindow::reaches(int to) const noexcept {
  return to >= 0 && static_cast<std::size_t>(to) < peers_.size() &&
         peers_[static_cast<std::size_t>(to)].first != nullptr && bytes_ > 0;
}

std::size_t SharedWindow::in_use() {
  const std::lock_guard lock(mutex_);
  reclaim();
  std::size_t in_use = 0;
  for (const auto& [offset, bytes] : live_) in_use += bytes;
  return in_use;
}

ProcessMessage SharedWindow::write(std::size_t size, std::span<const std::byte> rest,
                                   const std::vector<MessageBlock>& blocks) {
  const std::optional<std::size_t> offset = reserve(size);
  if (!offset) return nullptr;
  write_whole(base_ + *offset + kSharedHeader, rest, blocks);
  std::atomic_thread_fence(std::memory_order_release);
  auto note = MessageBytes::make(2 * sizeof(uint64_t));
  const uint64_t where[2] = {*offset, size};
  std::memcpy(note->data(), where, sizeof where);
  return note;
}

void SharedWindow::reclaim() {
  std::erase_if(live_, [&](const auto& entry) {
    return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + entry.first))
               .load(std::memory_order_acquire) == 1;
  });
}

std::optional<std::size_t> SharedWindow::reserve(std::size_t size) {
  const std::size_t need =
      (kSharedHeader + size + kSharedHeader - 1) / kSharedHeader * kSharedHeader;
  const std::lock_guard lock(mutex_);
  reclaim();
  std::size_t at = first_;
  for (const auto& [offset, bytes] : live_) {
    if (offset - at >= need) break;
    at = offset + bytes;
  }
  if (at + need > bytes_) return std::nullopt;
  live_.emplace(at, need);
  std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + at))
      .store(0, std::memory_order_relaxed);
  messages_.fetch_add(1, std::memory_order_relaxed);
  return at;
}

std::shared_ptr<MessageBytes> SharedWindow::read(int from, const MessageBytes& note) const {
  if (note.size() != 2 * sizeof(uint64_t)) {
    throw std::runtime_error(fmt::format("its note of shared memory has {} bytes", note.size()));
  }
  uint64_t offset = 0;
  uint64_t size = 0;
  std::memcpy(&offset, note.data(), sizeof offset);
  std::memcpy(&size, note.data() + sizeof offset, sizeof size);
  const auto [part, part_bytes] = from >= 0 && static_cast<std::size_t>(from) < peers_.size()
                                      ? peers_[static_cast<std::size_t>(from)]
                                      : std::pair<std::byte*, std::size_t>{nullptr, 0};
  if (!part || offset > part_bytes || kSharedHeader + size > part_bytes - offset ||
      reinterpret_cast<uintptr_t>(part + offset) % alignof(uint32_t) != 0) {
    throw std::runtime_error(
        fmt::format("its note points at {} bytes from byte {}, outside the {} bytes it shares",
                    size, offset, part ? part_bytes : 0));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return MessageBytes::borrowed(part + offset + kSharedHeader, size,
                                reinterpret_cast<uint32_t*>(part + offset));
}

}  // namespace axle
