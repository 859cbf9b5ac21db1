// actors: devices and steps — the user API, on the calling replica's host and the process root.
#include "axle/actors/host/api.h"

#include <memory>
#include <stdexcept>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replica_host.h"

namespace axle {

Device device(int ordinal) {
  Device d{ordinal};
  (void)LazySystem::get().device_actor(d);  // validates
  return d;
}

Device device() { return device(Device{}.ordinal); }

std::vector<Device> devices() {
  std::vector<Device> all;
  for (int i = 0; i < device_count(); ++i) all.push_back(Device{i});
  return all;
}

int device_count() { return LazySystem::get().device_count(); }

void manual_seed(uint64_t seed) {
  for (const Device d : devices()) set_rng_state(seed, d);
  set_rng_state(seed, Device{});
}

std::string xla_device_hw(Device d) {
  LazySystem& system = LazySystem::get();
  (void)system.device_actor(d);
  return std::string(system.backend().hardware());
}

void mark_step(bool wait, std::source_location where) {
  ReplicaHost::current().step(wait, SyncReason::kMarkStep, where);
}

namespace detail {
void compiled_step(std::source_location where) {
  ReplicaHost::current().step(false, SyncReason::kCompile, where);
}
void loader_step(std::source_location where) {
  ReplicaHost::current().step(false, SyncReason::kLoaderStep, where);
}
}  // namespace detail

void add_step_closure(std::function<void()> closure, bool run_async, std::source_location where) {
  if (!closure) throw std::invalid_argument("add_step_closure: the closure is empty");
  ReplicaHost::current().add_step_closure(std::move(closure), run_async, where);
}

void wait_device_ops(const std::vector<Device>& which) {
  ReplicaHost::current().wait_device_ops(which);
}

void initialize_cache(const std::string& path, bool readonly) {
  LazySystem::initialize_persistent_cache(path, readonly);
}

void eager_mode(bool enabled) { LazySystem::get().set_eager(enabled); }
bool is_eager_mode() { return LazySystem::get().eager(); }

EagerSuspension::EagerSuspension() { ReplicaHost::current().suspend_eager(); }
EagerSuspension::~EagerSuspension() { ReplicaHost::current().resume_eager(); }

MemoryInfo get_memory_info(Device d) {
  return LazySystem::get().device_actor(d).ask(QueryMemory{}).get();
}

int64_t live_tensor_count() { return TensorImpl::live_count(); }

}  // namespace axle
