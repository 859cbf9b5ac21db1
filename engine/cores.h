// engine: how many cores this process may run on, for the default sizes of thread pools.
#pragma once

namespace axle {

/// The CPUs the calling thread may run on (its affinity, as `taskset` or a cgroup cpuset limits
/// it), or the machine's hardware threads when that cannot be read; at least 1.
/// std::thread::hardware_concurrency counts every CPU of the machine, including ones a
/// container never gets, and pools sized by it would oversubscribe the ones it does.
[[nodiscard]] int usable_cores() noexcept;

}  // namespace axle
