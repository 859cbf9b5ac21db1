// engine: the calling thread's queue of deferred releases.
#include "engine/release_queue.h"

namespace axle {
namespace {

// The queue lives in the outermost scope's frame; trivially destructible, so objects dying during
// thread exit still find it (null: no scope is open).
thread_local constinit std::vector<const RefCounted*>* tls_queue = nullptr;

}  // namespace

ReleaseScope::ReleaseScope() noexcept : outermost_(tls_queue == nullptr) {
  if (outermost_) tls_queue = &queue_;
}

ReleaseScope::~ReleaseScope() {
  if (!outermost_) return;
  drain();
  tls_queue = nullptr;
}

void ReleaseScope::defer(const RefCounted* object) noexcept {
  if (!object) return;
  try {
    tls_queue->push_back(object);
  } catch (...) {
    object->release();  // no room to queue it: released here, recursively
  }
}

void ReleaseScope::drain() noexcept {
  if (!outermost_) return;
  while (!queue_.empty()) {
    const RefCounted* next = queue_.back();
    queue_.pop_back();
    next->release();  // may run a destructor that defers more here
  }
}

}  // namespace axle
