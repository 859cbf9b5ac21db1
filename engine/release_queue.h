// engine: freeing long chains of reference-counted objects without recursion. Dropping the last
// reference to the tip of a chain (an IR graph a million nodes deep, the backward functions
// recorded for it) would run one nested destructor per link and overflow the stack. A destructor
// that holds references opens a ReleaseScope and defers them to it; only the outermost scope on
// the thread releases, in a loop, and releases that run more destructors add to its queue. Inline:
// every IR node's destructor opens one.
#pragma once

#include <vector>

#include "axle/engine/intrusive_ptr.h"

namespace axle {

namespace release_queue_internal {
// The outermost scope's queue (null: no scope is open). Trivially destructible, so objects dying
// during thread exit still find it.
inline thread_local constinit std::vector<const RefCounted*>* t_queue = nullptr;
}  // namespace release_queue_internal

class ReleaseScope {
 public:
  ReleaseScope() noexcept : outermost_(release_queue_internal::t_queue == nullptr) {
    if (outermost_) release_queue_internal::t_queue = &queue_;
  }
  ~ReleaseScope() {
    if (!outermost_) return;
    drain();
    release_queue_internal::t_queue = nullptr;
  }
  ReleaseScope(const ReleaseScope&) = delete;
  ReleaseScope& operator=(const ReleaseScope&) = delete;

  /// Takes over one reference to `object` (the caller's), dropped when the outermost scope
  /// drains.
  void defer(const RefCounted* object) noexcept {
    if (!object) return;
    try {
      release_queue_internal::t_queue->push_back(object);
    } catch (...) {
      object->release();  // no room to queue it: released here, recursively
    }
  }
  template <class T>
  void defer(IntrusivePtr<T>&& object) noexcept {
    if (object) defer(static_cast<const RefCounted*>(object.detach()));
  }
  /// In the outermost scope, releases everything deferred so far (and whatever those releases
  /// defer); elsewhere nothing.
  void drain() noexcept {
    if (!outermost_) return;
    while (!queue_.empty()) {
      const RefCounted* next = queue_.back();
      queue_.pop_back();
      next->release();  // may run a destructor that defers more here
    }
  }

 private:
  bool outermost_;
  std::vector<const RefCounted*> queue_;  // the outermost scope's: the thread's queue
};

}  // namespace axle
