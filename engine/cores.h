// engine: how many cores this process may run on, for the default sizes of thread pools.
#pragma once

namespace axle {

/// The CPUs the calling thread may run on (its affinity, as `taskset` or a cgroup cpuset limits
/// it), or the machine's hardware threads when that cannot be read; at least 1.
/// std::thread::hardware_concurrency counts every CPU of the machine, including ones a
/// container never gets, and pools sized by it would oversubscribe the ones it does.
[[nodiscard]] int usable_cores() noexcept;

/// The cores this process may count on when `host_processes` processes of its job run on this
/// host (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE): usable_cores() shared out among them, at least
/// one, when the affinity spans every online CPU, as it does for each of them unless the
/// launcher bound them (`mpirun --bind-to none`, or one package holding every core). A process
/// bound to a subset keeps the subset whole: a launcher that binds gives each its own cores.
[[nodiscard]] int process_share_of_cores(int host_processes) noexcept;

}  // namespace axle
