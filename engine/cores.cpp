// engine: usable_cores from the process's CPU affinity.
#include "engine/cores.h"

#include <sched.h>

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

}  // namespace axle
