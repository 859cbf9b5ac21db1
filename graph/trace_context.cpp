// graph: trace contexts and the tensor bookkeeping they do.
#include "graph/trace_context.h"

#include <memory>

namespace axle {
namespace {

// Ids start at 1: 0 is "no context" (a graph walk on a thread that has none).
std::atomic<uint32_t> g_next_id{1};

// PyTorch/XLA's default seed is 101 on every device.
constexpr uint64_t kDefaultSeed = 101;

}  // namespace

TraceContext::TraceContext() : id_(g_next_id.fetch_add(1, std::memory_order_relaxed)) {}

TraceContext::~TraceContext() = default;

TraceContext& TraceContext::make_current() {
  // The binding holds a reference of its own, which the thread drops as it exits (first
  // unbinding, so nothing on the way out finds a context being destroyed).
  auto* context = new TraceContext();
  context->add_ref();
  ThisThread<TraceContext>::bind(context);
  keep_until_thread_exit(std::shared_ptr<void>(context, [](void* p) {
    auto* dying = static_cast<TraceContext*>(p);
    if (ThisThread<TraceContext>::get() == dying) ThisThread<TraceContext>::bind(nullptr);
    dying->release();
  }));
  return *context;
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
  auto [it, inserted] = rng_.try_emplace(device.ordinal, RngState{kDefaultSeed, 0});
  RngState state = it->second;
  it->second.offset += count;
  return state;
}

void TraceContext::set_rng_state(Device device, uint64_t seed) {
  rng_[device.ordinal] = RngState{seed, 0};
}

RngState TraceContext::rng_state(Device device) {
  auto [it, inserted] = rng_.try_emplace(device.ordinal, RngState{kDefaultSeed, 0});
  return it->second;
}

// --- graph/device.h: the calling thread's replica, as `Device{}` sees it ---

int default_device_ordinal() noexcept {
  const TraceContext* context = TraceContext::current_if_any();
  return context ? context->default_device_ordinal() : 0;
}

int replica_world_size() noexcept {
  const TraceContext* context = TraceContext::current_if_any();
  return context ? context->world_size() : 1;
}

DefaultDeviceScope::DefaultDeviceScope(Device device)
    : previous_(TraceContext::current().default_device_ordinal()) {
  TraceContext::current().set_default_device_ordinal(device.ordinal);
}

DefaultDeviceScope::~DefaultDeviceScope() {
  TraceContext::current().set_default_device_ordinal(previous_);
}

ReplicaScope::ReplicaScope(Device device, int world_size)
    : default_device_(device), previous_world_size_(TraceContext::current().world_size()) {
  TraceContext::current().set_world_size(world_size);
}

ReplicaScope::~ReplicaScope() { TraceContext::current().set_world_size(previous_world_size_); }

}  // namespace axle
