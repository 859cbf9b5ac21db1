// engine: the store-load fence of the runtime's wake-up handshakes (a sender publishes a message
// then reads a flag; the receiver clears the flag then reads the queue).
#pragma once

#include <atomic>

namespace axle::detail {

/// A full fence. ThreadSanitizer does not model std::atomic_thread_fence, so under it the fence is
/// a locked read-modify-write of a thread-local (a full barrier on x86, and no false
/// synchronisation between threads for the sanitizer to believe in).
inline void store_load_fence() noexcept {
#if defined(AXLE_TSAN)
  thread_local std::atomic<int> barrier{0};
  barrier.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace axle::detail
