// backends: what every backend shares.
#include "axle/backends/backend.h"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace axle {

const KernelCall* ProgramRun::waiting() noexcept {
  static const KernelCall kWaiting{};
  return &kWaiting;
}

void ProgramRun::when_resumable(UniqueFunction resume) { resume(); }

std::vector<IntrusivePtr<DeviceMemory>> Backend::execute(
    int device, const Executable& program, std::vector<IntrusivePtr<DeviceMemory>> inputs) {
  std::unique_ptr<ProgramRun> run = start(device, program, std::move(inputs));
  while (const KernelCall* call = run->advance()) {
    if (call != ProgramRun::waiting()) {
      throw std::logic_error(fmt::format(
          "{} needs the other replicas: a program with collectives runs on a device actor",
          kernel_name(call->kernel)));
    }
    // Waits here: execute() is the blocking form, for callers outside actors.
    std::mutex mutex;
    std::condition_variable resumed;
    bool go = false;
    run->when_resumable([&] {
      std::lock_guard lock(mutex);
      go = true;
      resumed.notify_all();
    });
    std::unique_lock lock(mutex);
    resumed.wait(lock, [&] { return go; });
  }
  return run->take_outputs();
}

}  // namespace axle
