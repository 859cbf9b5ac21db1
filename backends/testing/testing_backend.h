// backends/testing: a Backend for tests. It wraps another backend (the CPU one) and can hold
// execution, count every call per device (and the threads they came from), and make a chosen
// kernel or allocation fail. A held execution waits without blocking its device actor (the run
// says it waits, see ProgramRun::waiting), so reads, transfers and queries go on meanwhile, as
// they would on a device whose work runs asynchronously.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "axle/backends/backend.h"

namespace axle {

class TestingBackend final : public Backend {
 public:
  /// Calls made for one device, by kind.
  struct Calls {
    int64_t allocate = 0;
    int64_t copy_to_device = 0;
    int64_t copy_to_host = 0;
    int64_t start = 0;
    int64_t collective = 0;
    int64_t memory_info = 0;
    /// Distinct threads the calls came from.
    int64_t threads = 0;
    /// Distinct actors whose handlers made the calls (a call from outside every actor counts
    /// as one more).
    int64_t actors = 0;
  };

  explicit TestingBackend(std::unique_ptr<Backend> inner);
  ~TestingBackend() override;

  // --- control and observation (any thread) ---

  /// Executions started from now on wait, before their first kernel, until release(). Programs
  /// already running go on.
  void hold();
  /// Lets every held execution run, and the ones after it.
  void release();
  /// Waits until `count` executions in all have reached the hold; false after `timeout`.
  [[nodiscard]] bool wait_until_held(int count = 1,
                                     std::chrono::nanoseconds timeout = std::chrono::seconds(30));
  /// Executions that have reached the hold so far.
  [[nodiscard]] int held_count() const;

  /// The next `times` programs (on any device) that call `kernel` fail at that call, after the
  /// calls before it ran, with the error a failing kernel gives: "kernel <call> failed: ...".
  void fail_kernel(Kernel kernel, int times = 1);
  /// The next `times` allocations this backend is asked for (transfers to a device, a program's
  /// scalar inputs, collective results) throw std::bad_alloc.
  void fail_allocations(int times = 1);

  /// The calls made so far for `device`.
  [[nodiscard]] Calls calls(int device) const;
  /// The collective calls made so far for `device` from `thread`.
  [[nodiscard]] int64_t collective_calls_from(int device, std::thread::id thread) const;

  // --- Backend ---

  [[nodiscard]] std::string_view hardware() const noexcept override;
  [[nodiscard]] int device_count() const noexcept override;
  IntrusivePtr<DeviceMemory> allocate(int device, std::size_t bytes) override;
  IntrusivePtr<DeviceMemory> allocate_shared(int device, std::size_t bytes) override;
  IntrusivePtr<DeviceMemory> share(int device, IntrusivePtr<DeviceMemory> shared) override;
  void copy_to_device(int device, const void* host, DeviceMemory& dst, std::size_t bytes) override;
  void copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) override;
  std::unique_ptr<ProgramRun> start(int device, const Executable& program,
                                    std::vector<IntrusivePtr<DeviceMemory>> inputs) override;
  void collective(int device, const KernelCall& call, const BufferDesc& operand,
                  const BufferDesc& result, std::span<DeviceMemory* const> operands, int position,
                  DeviceMemory& output) override;
  [[nodiscard]] MemoryInfo memory_info(int device) const override;

 private:
  class HeldRun;
  class FailingRun;
  struct Device {
    Calls calls;
    std::set<std::thread::id> threads;
    std::set<const void*> actors;
    std::map<std::thread::id, int64_t> collectives_by_thread;
  };
  // Counts a call of `kind` for `device` (and the calling thread and actor).
  void count(int device, int64_t Calls::*kind) const;
  // Counts an allocation on `device`, and fails it (std::bad_alloc) while failures are due.
  void count_allocation(int device);
  // Takes one of the pending kernel failures the program meets, if any: the call it fails at.
  [[nodiscard]] int failing_call(const Executable& program);

  std::unique_ptr<Backend> inner_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  mutable std::vector<Device> devices_;
  bool holding_ = false;
  int held_ = 0;
  uint64_t release_epoch_ = 0;  // counts releases, so a run knows its hold is over
  std::vector<std::unique_ptr<UniqueFunction>> waiting_;  // held runs' resumes
  std::vector<std::pair<Kernel, int>> kernel_failures_;
  int allocation_failures_ = 0;
};

}  // namespace axle
