// graph: trace contexts: the per-replica trace state above the nodes and tensors it records.
#include "axle/graph/trace_context.h"

#include <memory>

#include "axle/engine/thread_binding.h"

namespace axle {
namespace {

// PyTorch/XLA's default seed is 101 on every device.
constexpr uint64_t kDefaultSeed = 101;

}  // namespace

TraceContext::TraceContext()
    : record_(&NodeRecord::current()), pending_(&PendingTensors::current()) {}

TraceContext::~TraceContext() = default;

TraceContext& TraceContext::make_current() { return bind_until_thread_exit(new TraceContext()); }

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
