// engine: a per-thread cache of small fixed-size memory blocks. Objects made and freed by the
// million (IR nodes) come from it: freed blocks are kept for the thread's next allocation of
// that size instead of going back to the general allocator (and to fresh pages it would fault
// in and give back).
#pragma once

#include <cstddef>

namespace axle {

/// Blocks of these sizes are cached (multiples of 64 bytes up to this); others come straight
/// from operator new.
inline constexpr std::size_t kMaxCachedBlockBytes = 512;

/// A block of `bytes` bytes, aligned as operator new aligns.
[[nodiscard]] void* allocate_block(std::size_t bytes);
/// Returns a block from allocate_block(bytes) (on any thread: the freeing thread keeps it, up to
/// a bound per size).
void free_block(void* block, std::size_t bytes) noexcept;

}  // namespace axle
