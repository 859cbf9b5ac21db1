// engine: a per-thread cache of small fixed-size memory blocks. Objects made and freed by the
// million (IR nodes) come from it: freed blocks are kept for the thread's next allocation of
// that size instead of going back to the general allocator (and to fresh pages it would fault
// in and give back). The fast paths are inline: a block is popped from or pushed onto the
// thread's free list of its size, which the free blocks themselves link.
#pragma once

#include <cstddef>
#include <cstdint>

namespace axle {

/// Blocks of these sizes are cached (multiples of 64 bytes up to this); others come straight
/// from operator new.
inline constexpr std::size_t kMaxCachedBlockBytes = 512;

namespace block_cache_internal {

inline constexpr std::size_t kGrain = 64;
inline constexpr std::size_t kLists = kMaxCachedBlockBytes / kGrain;
inline constexpr uint32_t kMaxBlocksPerList = uint32_t{1} << 16;

struct FreeList {
  void* head = nullptr;  // each free block's first word links the next
  uint32_t count = 0;
};
// Trivially destructible and constinit: no initialisation guard on the fast paths. The lists'
// blocks are given back when the thread exits, once a block has been allocated on it (`alive`).
inline thread_local constinit FreeList t_lists[kLists];
inline thread_local constinit bool t_alive = false;

[[nodiscard]] constexpr bool cached_size(std::size_t bytes) noexcept {
  return bytes != 0 && bytes <= kMaxCachedBlockBytes && bytes % kGrain == 0;
}
[[nodiscard]] void* allocate_slow(std::size_t bytes);
void free_slow(void* block, std::size_t bytes) noexcept;

}  // namespace block_cache_internal

/// A block of `bytes` bytes, aligned as operator new aligns.
[[nodiscard]] inline void* allocate_block(std::size_t bytes) {
  using namespace block_cache_internal;
  if (cached_size(bytes)) {
    FreeList& list = t_lists[bytes / kGrain - 1];
    if (void* block = list.head) [[likely]] {
      list.head = *static_cast<void**>(block);
      --list.count;
      return block;
    }
  }
  return allocate_slow(bytes);
}

/// Returns a block from allocate_block(bytes), on any thread: the freeing thread keeps it, up to
/// a bound per size, while it has a cache (past its exit, blocks go back to the allocator).
inline void free_block(void* block, std::size_t bytes) noexcept {
  using namespace block_cache_internal;
  if (cached_size(bytes) && t_alive) {
    FreeList& list = t_lists[bytes / kGrain - 1];
    if (list.count < kMaxBlocksPerList) [[likely]] {
      *static_cast<void**>(block) = list.head;
      list.head = block;
      ++list.count;
      return;
    }
  }
  free_slow(block, bytes);
}

}  // namespace axle
