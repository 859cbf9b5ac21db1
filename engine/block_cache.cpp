// engine: the per-thread block cache's slow paths and its end with the thread.
#include "axle/engine/block_cache.h"

#include <new>

namespace axle::block_cache_internal {
namespace {

thread_local constinit bool t_reaped = false;  // the reaper has run: the thread is exiting

// Gives the thread's cached blocks back when it exits; made on the thread's first slow
// allocation. After it, `t_alive` is false and frees go straight to the allocator (objects in
// static storage die after the main thread's thread_locals).
struct Reaper {
  Reaper() noexcept { t_alive = true; }
  ~Reaper() {
    t_alive = false;
    t_reaped = true;
    for (FreeList& list : t_lists) {
      while (void* block = list.head) {
        list.head = *static_cast<void**>(block);
        ::operator delete(block);
      }
      list.count = 0;
    }
  }
};
thread_local Reaper t_reaper;

}  // namespace

void* allocate_slow(std::size_t bytes) {
  if (cached_size(bytes) && !t_alive && !t_reaped) {
    // Constructs the reaper: from now on the thread keeps freed blocks.
    (void)&t_reaper;
  }
  return ::operator new(bytes);
}

void free_slow(void* block, std::size_t bytes) noexcept {
  // A thread that never allocated keeps what it frees too, once it has a reaper.
  if (cached_size(bytes) && !t_alive && !t_reaped) {
    try {
      (void)&t_reaper;
    } catch (...) {
      // no reaper: the block goes back below
    }
    if (t_alive) {
      FreeList& list = t_lists[bytes / kGrain - 1];
      *static_cast<void**>(block) = list.head;
      list.head = block;
      ++list.count;
      return;
    }
  }
  ::operator delete(block);
}

}  // namespace axle::block_cache_internal
