// actors: message buffers, their pool, and the heads of messages sent in blocks.
#include "axle/actors/runtime/message_bytes.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <utility>

namespace axle {
namespace {

// Large received buffers, kept for the next messages of their size.
constexpr std::size_t kPooledBytes = std::size_t{64} << 10;
// Enough for every message of an all-reduce by stretches among a few processes to be in flight at
// once (each process sends and receives one per other process at each of its two meetings).
constexpr std::size_t kPoolBuffers = 16;
constexpr std::size_t kPoolBytes = std::size_t{512} << 20;
struct BufferPool {
  std::mutex mutex;
  std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> free;  // buffer, capacity
  std::size_t bytes = 0;  // the free buffers' capacities
};
BufferPool& buffer_pool() {
  static auto* pool = new BufferPool;  // never destroyed: buffers may come back at exit
  return *pool;
}

}  // namespace

std::shared_ptr<MessageBytes> MessageBytes::make(std::size_t size) {
  auto message = std::make_shared<MessageBytes>();
  if (size >= kPooledBytes) {
    BufferPool& pool = buffer_pool();
    std::lock_guard lock(pool.mutex);
    // A buffer at least this large, but not wastefully so.
    auto fits = std::ranges::find_if(pool.free, [&](const auto& entry) {
      return entry.second >= size && entry.second <= 2 * size;
    });
    if (fits != pool.free.end()) {
      message->raw_ = std::move(fits->first);
      message->capacity_ = fits->second;
      pool.bytes -= fits->second;
      pool.free.erase(fits);
    }
  }
  if (!message->raw_) {
    message->raw_ = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(size, 1));
    message->capacity_ = size;
  }
  message->data_ = message->raw_.get();
  message->size_ = size;
  return message;
}

std::shared_ptr<const MessageBytes> MessageBytes::of(std::vector<std::byte> bytes) {
  auto message = std::make_shared<MessageBytes>();
  message->owned_ = std::move(bytes);
  message->data_ = message->owned_.data();
  message->size_ = message->owned_.size();
  return message;
}

namespace {

// Borrowed messages mark their memory released under a shared lock, which the transport takes
// whole before the shared memory goes at exit: a message dropped later marks nothing. Never
// destroyed, as messages may go during the process's exit.
struct SharedMemoryGate {
  std::shared_mutex lock;
  bool open = false;  // under lock
};
SharedMemoryGate& shared_memory_gate() {
  static auto* gate = new SharedMemoryGate;
  return *gate;
}

}  // namespace

void allow_borrowed_releases(bool allow) {
  SharedMemoryGate& gate = shared_memory_gate();
  const std::unique_lock lock(gate.lock);
  gate.open = allow;
}

std::shared_ptr<MessageBytes> MessageBytes::borrowed(std::byte* data, std::size_t size,
                                                     uint32_t* released) {
  auto message = std::make_shared<MessageBytes>();
  message->data_ = data;
  message->size_ = size;
  message->released_ = released;
  return message;
}

MessageBytes::~MessageBytes() {
  if (released_) {
    SharedMemoryGate& gate = shared_memory_gate();
    const std::shared_lock lock(gate.lock);
    if (gate.open) std::atomic_ref<uint32_t>(*released_).store(1, std::memory_order_release);
    return;
  }
  if (!raw_ || capacity_ < kPooledBytes) return;
  BufferPool& pool = buffer_pool();
  std::lock_guard lock(pool.mutex);
  if (pool.free.size() < kPoolBuffers && pool.bytes + capacity_ <= kPoolBytes) {
    pool.bytes += capacity_;
    pool.free.emplace_back(std::move(raw_), capacity_);
  }
}

// A head: the message's size, its block count, each block's offset and size, then the other bytes.
ProcessMessage encode_head(std::size_t size, std::span<const std::byte> rest,
                           const std::vector<MessageBlock>& blocks) {
  const auto put = [](std::byte*& at, uint64_t value) {
    std::memcpy(at, &value, sizeof value);
    at += sizeof value;
  };
  auto head = MessageBytes::make(16 * (1 + blocks.size()) + rest.size());
  std::byte* at = head->data();
  put(at, size);
  put(at, blocks.size());
  for (const MessageBlock& block : blocks) {
    put(at, block.offset);
    put(at, block.bytes.size());
  }
  std::memcpy(at, rest.data(), rest.size());
  return head;
}

DecodedHead decode_head(const MessageBytes& head) {
  const std::byte* at = head.data();
  std::size_t left = head.size();
  const auto take = [&](std::size_t size) {
    if (size > left) throw std::runtime_error("its head is cut short");
    const std::byte* p = at;
    at += size;
    left -= size;
    return p;
  };
  const auto number = [&] {
    uint64_t value;
    std::memcpy(&value, take(sizeof value), sizeof value);
    return static_cast<std::size_t>(value);
  };
  const std::size_t size = number();
  const std::size_t count = number();
  if (count > left / 16) throw std::runtime_error("its head is cut short");
  DecodedHead decoded;
  decoded.blocks.resize(count);
  std::size_t block_bytes = 0;
  for (auto& [offset, bytes] : decoded.blocks) {
    offset = number();
    bytes = number();
    block_bytes += bytes;
  }
  if (block_bytes + left != size) throw std::runtime_error("its blocks do not fit its size");
  decoded.whole = MessageBytes::make(size);
  std::size_t written = 0;  // of the whole message
  for (auto [offset, bytes] : decoded.blocks) {
    if (offset < written || offset + bytes > size) {
      throw std::runtime_error("its blocks do not fit its size");
    }
    const std::size_t before = offset - written;
    std::memcpy(decoded.whole->data() + written, take(before), before);
    written = offset + bytes;
  }
  std::memcpy(decoded.whole->data() + written, take(size - written), size - written);
  return decoded;
}

void write_whole(std::byte* out, std::span<const std::byte> rest,
                 const std::vector<MessageBlock>& blocks) {
  std::size_t written = 0;
  for (const MessageBlock& block : blocks) {
    const std::size_t before = block.offset - written;
    std::memcpy(out + written, rest.data(), before);
    rest = rest.subspan(before);
    std::memcpy(out + block.offset, block.bytes.data(), block.bytes.size());
    written = block.offset + block.bytes.size();
  }
  std::memcpy(out + written, rest.data(), rest.size());
}

}  // namespace axle
