// engine: usable_cores from the process's CPU affinity.
#include "axle/engine/cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace axle {

int usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int process_share_of_cores(int host_processes) noexcept {
  const int cores = usable_cores();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (host_processes <= 1 || online <= 0 || cores < online) return cores;
  return std::max(1, cores / host_processes);
}

}  // namespace axle
