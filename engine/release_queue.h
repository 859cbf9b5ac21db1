// engine: freeing long chains of reference-counted objects without recursion. Dropping the last
// reference to the tip of a chain (an IR graph a million nodes deep, the backward functions
// recorded for it) would run one nested destructor per link and overflow the stack. A destructor
// that holds references opens a ReleaseScope and defers them to it; only the outermost scope on
// the thread releases, in a loop, and releases that run more destructors add to its queue.
#pragma once

#include <vector>

#include "engine/intrusive_ptr.h"

namespace axle {

class ReleaseScope {
 public:
  ReleaseScope() noexcept;
  ~ReleaseScope();
  ReleaseScope(const ReleaseScope&) = delete;
  ReleaseScope& operator=(const ReleaseScope&) = delete;

  /// Takes over one reference to `object` (the caller's), dropped when the outermost scope
  /// drains.
  void defer(const RefCounted* object) noexcept;
  template <class T>
  void defer(IntrusivePtr<T>&& object) noexcept {
    if (object) defer(static_cast<const RefCounted*>(object.detach()));
  }
  /// In the outermost scope, releases everything deferred so far (and whatever those releases
  /// defer); elsewhere nothing.
  void drain() noexcept;

 private:
  bool outermost_;
  std::vector<const RefCounted*> queue_;  // the outermost scope's: the thread's queue
};

}  // namespace axle
