// graph: trace contexts and the tensor bookkeeping they do.
#include "graph/trace_context.h"

#include "engine/config.h"

namespace axle {
namespace {

std::atomic<TraceObserver*> g_observer{nullptr};

uint64_t default_seed() {
  // PyTorch/XLA's default seed is 101 on every device.
  return 101;
}

}  // namespace

TraceContext& TraceContext::current() {
  thread_local IntrusivePtr<TraceContext> context = make_intrusive<TraceContext>();
  return *context;
}

void TraceContext::set_observer(TraceObserver* observer) noexcept {
  g_observer.store(observer, std::memory_order_release);
}

TraceObserver* TraceContext::observer() noexcept {
  return g_observer.load(std::memory_order_acquire);
}

void TraceContext::track(TensorImpl* impl) {
  std::lock_guard lock(mutex_);
  impl->prev_ = tail_;
  impl->next_ = nullptr;
  if (tail_)
    tail_->next_ = impl;
  else
    head_ = impl;
  tail_ = impl;
  ++pending_;
}

void TraceContext::untrack(TensorImpl* impl) {
  std::lock_guard lock(mutex_);
  if (impl->prev_)
    impl->prev_->next_ = impl->next_;
  else
    head_ = impl->next_;
  if (impl->next_)
    impl->next_->prev_ = impl->prev_;
  else
    tail_ = impl->prev_;
  impl->prev_ = impl->next_ = nullptr;
  --pending_;
}

std::vector<Tensor> TraceContext::pending_tensors(const Device* device) {
  std::vector<Tensor> out;
  std::lock_guard lock(mutex_);
  out.reserve(pending_);
  // Oldest first, so graphs list their outputs in creation order.
  for (TensorImpl* t = head_; t; t = t->next_) {
    if (device && !(t->device() == *device)) continue;
    // A tensor whose last handle is going away on another thread is skipped: its destructor is
    // waiting on this lock to leave the list.
    if (t->try_add_ref()) out.emplace_back(IntrusivePtr<TensorImpl>::adopt(t));
  }
  return out;
}

std::size_t TraceContext::pending_count() {
  std::lock_guard lock(mutex_);
  return pending_;
}

RngState TraceContext::draw_random(Device device, uint64_t count) {
  auto [it, inserted] = rng_.try_emplace(device.ordinal, RngState{default_seed(), 0});
  RngState state = it->second;
  it->second.offset += count;
  return state;
}

void TraceContext::set_rng_state(Device device, uint64_t seed) {
  rng_[device.ordinal] = RngState{seed, 0};
}

RngState TraceContext::rng_state(Device device) {
  auto [it, inserted] = rng_.try_emplace(device.ordinal, RngState{default_seed(), 0});
  return it->second;
}

}  // namespace axle
