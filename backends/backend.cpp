// backends: what every backend shares.
#include "backends/backend.h"

#include <fmt/format.h>

#include <stdexcept>

namespace axle {

std::vector<IntrusivePtr<DeviceMemory>> Backend::execute(
    int device, const Executable& program, std::vector<IntrusivePtr<DeviceMemory>> inputs) {
  std::unique_ptr<ProgramRun> run = start(device, program, std::move(inputs));
  if (const KernelCall* collective = run->advance()) {
    throw std::logic_error(fmt::format(
        "{} needs the other replicas: a program with collectives runs on a device actor",
        kernel_name(collective->kernel)));
  }
  return run->take_outputs();
}

}  // namespace axle
