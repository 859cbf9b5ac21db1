// Test helper: restarts the lazy system on the testing backend (backends/testing), which the
// test then drives — holding execution, counting backend calls, failing a kernel.
#pragma once

#include <memory>

#include "axle/actors/host/lazy_system.h"
#include "axle/backends/testing/testing_backend.h"

namespace axle {

/// Restarts the system on a TestingBackend over `cpu_devices` CPU devices and returns it (the
/// system owns it: valid until the next restart).
inline TestingBackend& restart_on_testing_backend(int cpu_devices = 1,
                                                  LazySystemOptions options = {}) {
  TestingBackend* made = nullptr;
  options.backend = [&made, cpu_devices] {
    auto backend = std::make_unique<TestingBackend>(make_cpu_backend(cpu_devices));
    made = backend.get();
    return backend;
  };
  LazySystem::restart(std::move(options));
  return *made;
}

}  // namespace axle
