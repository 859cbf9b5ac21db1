// actors: graph's runtime interface on this process's devices. Every traced op is seen by the
// tracing replica's host (eager mode, runaway graphs); syncs go through that host to the
// compiler and the devices; reads, uploads and device checks are messages to the device's actor.
#pragma once

namespace axle {

/// Makes tensors run on this process's devices whenever no other runtime is installed. The user
/// API header calls it, so every program that includes axle.h runs on its devices without a
/// call of its own; returns true so that it can initialise a constant.
bool use_devices_by_default() noexcept;

}  // namespace axle
