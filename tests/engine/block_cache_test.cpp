// engine/block_cache.h: the per-thread cache of small blocks. This executable replaces the global
// operator new and delete to see which allocations reach them.
#include "axle/engine/block_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

namespace {

// Counted on the thread that turned counting on, so other threads' allocations do not count.
thread_local constinit bool tls_counting = false;
thread_local constinit int64_t tls_news = 0;
thread_local constinit int64_t tls_deletes = 0;
thread_local constinit std::size_t tls_last_new_bytes = 0;
// Deletes of one watched address, from any thread.
std::atomic<void*> g_watched{nullptr};
std::atomic<int64_t> g_watched_deletes{0};

void note_delete(void* p) noexcept {
  if (p == nullptr) return;
  if (tls_counting) ++tls_deletes;
  if (p == g_watched.load(std::memory_order_relaxed)) ++g_watched_deletes;
}

}  // namespace

void* operator new(std::size_t bytes) {
  if (tls_counting) {
    ++tls_news;
    tls_last_new_bytes = bytes;
  }
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  note_delete(p);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  note_delete(p);
  std::free(p);
}

namespace axle {
namespace {

// Counts operator new and delete calls on this thread for its lifetime.
struct Counting {
  Counting() {
    tls_news = tls_deletes = 0;
    tls_counting = true;
  }
  ~Counting() { tls_counting = false; }
  [[nodiscard]] int64_t news() const { return tls_news; }
  [[nodiscard]] int64_t deletes() const { return tls_deletes; }
};

TEST(BlockCache, AFreedBlockIsReusedByTheSameThreadsNextAllocationOfItsSize) {
  void* block = allocate_block(256);
  free_block(block, 256);
  Counting counting;
  void* again = allocate_block(256);
  EXPECT_EQ(again, block);
  EXPECT_EQ(counting.news(), 0);
  free_block(again, 256);
  EXPECT_EQ(counting.deletes(), 0);  // kept, not given back
}

TEST(BlockCache, SizesAreCachedApart) {
  void* small = allocate_block(128);
  free_block(small, 128);
  Counting counting;
  void* large = allocate_block(192);
  EXPECT_NE(large, small);  // the 128-byte block is still in the cache, so cannot be this one
  void* small_again = allocate_block(128);
  EXPECT_EQ(small_again, small);
  EXPECT_LE(counting.news(), 1);  // the 192-byte block, unless one was cached
  free_block(large, 192);
  free_block(small_again, 128);
}

TEST(BlockCache, EveryCachedSizeIsReused) {
  for (std::size_t bytes = 64; bytes <= kMaxCachedBlockBytes; bytes += 64) {
    void* block = allocate_block(bytes);
    free_block(block, bytes);
    Counting counting;
    void* again = allocate_block(bytes);
    EXPECT_EQ(again, block) << bytes << " bytes";
    EXPECT_EQ(counting.news(), 0) << bytes << " bytes";
    free_block(again, bytes);
    EXPECT_EQ(counting.deletes(), 0) << bytes << " bytes";
  }
}

// Blocks are freed on another thread than made them, e.g. IR nodes made by a replica and dropped
// by the device actor that ran their step.
TEST(BlockCache, ABlockFreedOnAnotherThreadIsKeptByThatThread) {
  void* block = allocate_block(320);
  void* reused_there = nullptr;
  std::thread other([&] {
    free_block(allocate_block(64), 64);  // this thread has used its cache before
    free_block(block, 320);
    Counting counting;
    reused_there = allocate_block(320);
    EXPECT_EQ(counting.news(), 0);  // from this thread's cache
    free_block(reused_there, 320);
  });
  other.join();
  EXPECT_EQ(reused_there, block);
}

TEST(BlockCache, AThreadThatNeverAllocatedKeepsTheBlocksItFrees) {
  void* block = allocate_block(320);
  std::thread other([&] {
    Counting counting;
    free_block(block, 320);  // this thread's first use of the cache
    EXPECT_EQ(counting.deletes(), 0) << "the block went to operator delete";
    void* again = allocate_block(320);
    EXPECT_EQ(again, block);
    free_block(again, 320);
  });
  other.join();
}

TEST(BlockCache, TheFreeingThreadsCacheHoldsTheBlockNotTheAllocatingOnes) {
  void* block = allocate_block(448);
  std::atomic<bool> freed{false};
  std::atomic<bool> done{false};
  void* mine = nullptr;
  std::thread other([&] {
    free_block(block, 448);
    freed = true;
    while (!done) std::this_thread::yield();  // keeps its cache (and the block) alive
  });
  while (!freed) std::this_thread::yield();
  mine = allocate_block(448);
  EXPECT_NE(mine, block);  // still in the other thread's cache
  done = true;
  other.join();
  free_block(mine, 448);
}

TEST(BlockCache, SizesNotCachedGoStraightToOperatorNewAndDelete) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{100}, std::size_t{65},
                            kMaxCachedBlockBytes + 64, std::size_t{4096}}) {
    Counting counting;
    void* block = allocate_block(bytes);
    EXPECT_EQ(counting.news(), 1) << bytes << " bytes";
    EXPECT_EQ(tls_last_new_bytes, bytes);
    free_block(block, bytes);
    EXPECT_EQ(counting.deletes(), 1) << bytes << " bytes";
    void* again = allocate_block(bytes);
    EXPECT_EQ(counting.news(), 2) << bytes << " bytes: not taken from a cache";
    free_block(again, bytes);
    EXPECT_EQ(counting.deletes(), 2) << bytes << " bytes";
  }
}

TEST(BlockCache, ACachedSizeMissingFromTheCacheComesFromOperatorNew) {
  std::thread fresh([] {  // a thread whose cache is empty
    Counting counting;
    void* block = allocate_block(512);
    EXPECT_EQ(counting.news(), 1);
    EXPECT_EQ(tls_last_new_bytes, 512u);
    free_block(block, 512);
    EXPECT_EQ(counting.deletes(), 0);
  });
  fresh.join();
}

TEST(BlockCache, BlocksAreAlignedAsOperatorNewAligns) {
  constexpr std::size_t kAlign = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t bytes = 1; bytes <= 2 * kMaxCachedBlockBytes; bytes += 7) {
    for (int i = 0; i < 3; ++i) blocks.emplace_back(allocate_block(bytes), bytes);
  }
  for (std::size_t bytes = 64; bytes <= kMaxCachedBlockBytes; bytes += 64) {
    blocks.emplace_back(allocate_block(bytes), bytes);
  }
  for (auto [block, bytes] : blocks) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % kAlign, 0u) << bytes << " bytes";
  }
  for (auto [block, bytes] : blocks) free_block(block, bytes);
  // Blocks handed out again from the cache are aligned too.
  for (std::size_t bytes = 64; bytes <= kMaxCachedBlockBytes; bytes += 64) {
    void* block = allocate_block(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % kAlign, 0u) << bytes << " bytes";
    free_block(block, bytes);
  }
}

TEST(BlockCache, EachSizeKeepsBoundedlyManyBlocks) {
  std::thread fresh([] {
    constexpr int kBlocks = 1 << 18;  // far more than a thread should keep of one size
    std::vector<void*> blocks;
    blocks.reserve(kBlocks);
    for (int i = 0; i < kBlocks; ++i) blocks.push_back(allocate_block(64));
    Counting counting;
    for (void* block : blocks) free_block(block, 64);
    // Most went back to operator delete (the cache's own bookkeeping frees a few dozen at most),
    // and some were kept.
    EXPECT_GT(counting.deletes(), 1000);
    EXPECT_LT(counting.deletes(), kBlocks);
  });
  fresh.join();
}

TEST(BlockCache, AThreadsCachedBlocksGoBackWhenItExits) {
  g_watched_deletes = 0;
  std::thread t([] {
    void* block = allocate_block(384);
    g_watched = block;
    free_block(block, 384);
    EXPECT_EQ(g_watched_deletes, 0);  // cached
  });
  t.join();
  EXPECT_EQ(g_watched_deletes, 1);
  g_watched = nullptr;
}

}  // namespace
}  // namespace axle
