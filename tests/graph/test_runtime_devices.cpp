// Test support: graph-level tests on this process's devices (axle::actors).
#include "axle/actors/host/api.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/engine/metrics.h"
#include "tests/graph/test_runtime.h"

namespace axle::testing {

void fresh_runtime(int devices) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = devices});
  clear_all();
}

void sync_step() { mark_step(); }

void wait_all() { wait_device_ops(); }

const char* runtime_name() { return "devices"; }

}  // namespace axle::testing
