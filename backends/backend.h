// backends: what a device can do — allocate memory, move data in and out, run an Executable.
// The CPU backend implements it on Eigen; tests wrap it to hold execution at will.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "axle/backends/executable.h"
#include "axle/engine/device_memory.h"
#include "axle/engine/unique_function.h"

namespace axle {

/// A program part-way through its run on one device.
class ProgramRun {
 public:
  virtual ~ProgramRun() = default;
  /// Runs kernel calls in order until the program ends (returns null), reaches a collective
  /// call, which it returns without running (the caller completes it with the other members and
  /// hands over its result with finish_collective(), then advances again), or has to wait for
  /// something outside the caller's control (returns waiting(); the caller advances again once
  /// the function given to when_resumable() has run). Throws (with the kernel's name and shapes)
  /// when a kernel fails.
  virtual const KernelCall* advance() = 0;
  /// What advance() returns when the run waits (a backend whose work completes asynchronously,
  /// or the testing backend holding execution). Never a real call.
  [[nodiscard]] static const KernelCall* waiting() noexcept;
  /// After advance() returned waiting(): runs `resume` (on any thread) once advancing can go on.
  /// A run that never waits need not override it.
  virtual void when_resumable(UniqueFunction resume);
  /// The operand of the collective call advance() stopped at.
  [[nodiscard]] virtual const IntrusivePtr<DeviceMemory>& collective_operand() const = 0;
  /// A buffer for the result of the collective call advance() stopped at: one the run released
  /// earlier, as its memory plan counts on, or null when it has none to give (the caller
  /// allocates).
  [[nodiscard]] virtual IntrusivePtr<DeviceMemory> collective_result_buffer() { return {}; }
  /// The result of the collective call advance() stopped at. It may be shared with other members
  /// (an all-reduce's), so the program writes over it only once it holds it alone
  /// (DeviceMemory::exclusive()).
  virtual void finish_collective(IntrusivePtr<DeviceMemory> result) = 0;
  /// After advance() returned null: one buffer per output slot.
  virtual std::vector<IntrusivePtr<DeviceMemory>> take_outputs() = 0;
};

/// A kind of device and its instances. Calls for one device come from that device's actor, one
/// at a time; calls for different devices may run concurrently.
class Backend {
 public:
  virtual ~Backend() = default;

  /// Hardware name as `xla_device_hw` reports it: "CPU".
  [[nodiscard]] virtual std::string_view hardware() const noexcept = 0;
  [[nodiscard]] virtual int device_count() const noexcept = 0;

  virtual IntrusivePtr<DeviceMemory> allocate(int device, std::size_t bytes) = 0;
  /// Memory the members of a collective on several of this backend's devices use as one (the
  /// result of an all-reduce among devices that read each other's memory), made on `device` and
  /// counted on none: each member holds it through share(). This default is allocate().
  virtual IntrusivePtr<DeviceMemory> allocate_shared(int device, std::size_t bytes) {
    return allocate(device, bytes);
  }
  /// `device`'s handle on memory from allocate_shared(), counted on `device` while it lives, as
  /// a buffer of its own would be on devices that share nothing: every member's memory use is
  /// then what its program's plan says. This default hands the memory itself.
  virtual IntrusivePtr<DeviceMemory> share(int device, IntrusivePtr<DeviceMemory> shared) {
    (void)device;
    return shared;
  }
  virtual void copy_to_device(int device, const void* host, DeviceMemory& dst,
                              std::size_t bytes) = 0;
  virtual void copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) = 0;

  /// Starts running `program` on `device`. `inputs` match program.input_slots. A donated input
  /// (program.donated(i)) is the program's to overwrite and reuse when `inputs` holds its only
  /// reference; one referenced elsewhere too is copied first, so the other holders never see it
  /// change. Throws when the inputs do not fit the program.
  virtual std::unique_ptr<ProgramRun> start(int device, const Executable& program,
                                            std::vector<IntrusivePtr<DeviceMemory>> inputs) = 0;

  /// Runs a program without collectives to its end: start() and advance(); returns one buffer
  /// per output slot. Throws (with the kernel's name and shapes) when a kernel fails, and
  /// std::logic_error at a collective call, which needs the other members (see DeviceActor).
  std::vector<IntrusivePtr<DeviceMemory>> execute(int device, const Executable& program,
                                                  std::vector<IntrusivePtr<DeviceMemory>> inputs);

  /// Computes member `position`'s part of collective `call` once every member's operand is at
  /// hand: `operands[i]` is member i's (in group order), all of `operand`'s type and shape, and
  /// `output` (of `result`'s type and shape) receives this member's result. For kAllReduce the
  /// members share one output and each computes its own stretch of it (the backend chooses the
  /// stretches, and may leave some members none; calling it for every position computes the
  /// whole); the others compute their whole output. Memory of every device of this backend is
  /// readable from any of them.
  virtual void collective(int device, const KernelCall& call, const BufferDesc& operand,
                          const BufferDesc& result, std::span<DeviceMemory* const> operands,
                          int position, DeviceMemory& output) = 0;

  [[nodiscard]] virtual MemoryInfo memory_info(int device) const = 0;
};

/// How the CPU backend runs its devices; the defaults are those of axle's settings
/// (backends/device_settings.h, DeviceSettings), which the lazy system passes.
struct CpuBackendOptions {
  /// Per device, the threads a large kernel is split over (the device actor's thread included);
  /// 0 shares the usable cores among the devices (at least one each).
  int intra_op_threads = 0;
  /// The job's processes on this host: with intra_op_threads 0, the cores they all see are
  /// shared among them before the devices (process_share_of_cores).
  int host_processes = 1;
  /// Per device, how many MiB of freed memory in blocks of 64 KiB and more are kept for reuse (a
  /// negative value counts as 0).
  int64_t block_cache_mb = 1024;
  /// The instruction set of the CPU kernels (cpu/isa.h): "auto" (or empty) for the widest the
  /// processor has, or a narrower one by name. Process-wide: it applies to every CPU device.
  std::string cpu_isa = "auto";
};

/// The CPU backend with `devices` virtual devices.
std::unique_ptr<Backend> make_cpu_backend(int devices, CpuBackendOptions options = {});

}  // namespace axle
