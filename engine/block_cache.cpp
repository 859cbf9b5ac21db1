// engine: the per-thread block cache.
#include "engine/block_cache.h"

#include <array>
#include <cstdint>
#include <new>
#include <vector>

namespace axle {
namespace {

constexpr std::size_t kGrain = 64;
constexpr std::size_t kMaxBlocksPerSize = std::size_t{1} << 16;

// Blocks can outlive the cache — an object in static storage dies after the main thread's
// thread_locals — so its state is a trivially destructible flag that stays readable after the
// cache is gone.
enum class CacheState : uint8_t { kUnborn, kAlive, kDead };
thread_local constinit CacheState tls_state = CacheState::kUnborn;

struct BlockCache {
  std::array<std::vector<void*>, kMaxCachedBlockBytes / kGrain> free;  // by size / kGrain - 1
  BlockCache() { tls_state = CacheState::kAlive; }
  ~BlockCache() {
    tls_state = CacheState::kDead;
    for (auto& blocks : free) {
      for (void* b : blocks) ::operator delete(b);
    }
  }
};
thread_local BlockCache tls_cache;

bool cached_size(std::size_t bytes) noexcept {
  return bytes != 0 && bytes <= kMaxCachedBlockBytes && bytes % kGrain == 0;
}

}  // namespace

void* allocate_block(std::size_t bytes) {
  if (cached_size(bytes) && tls_state != CacheState::kDead) {
    std::vector<void*>& blocks = tls_cache.free[bytes / kGrain - 1];  // constructs on first use
    if (!blocks.empty()) {
      void* block = blocks.back();
      blocks.pop_back();
      return block;
    }
  }
  return ::operator new(bytes);
}

void free_block(void* block, std::size_t bytes) noexcept {
  if (cached_size(bytes) && tls_state == CacheState::kAlive) {
    std::vector<void*>& blocks = tls_cache.free[bytes / kGrain - 1];
    if (blocks.size() < kMaxBlocksPerSize) {
      try {
        blocks.push_back(block);
        return;
      } catch (...) {
        // no room to remember it: give it back below
      }
    }
  }
  ::operator delete(block);
}

}  // namespace axle
