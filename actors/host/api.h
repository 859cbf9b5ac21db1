// actors: the user API for devices and steps, in PyTorch/XLA's vocabulary.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <source_location>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "axle/actors/host/device_runtime.h"
#include "axle/actors/runtime/errors.h"
#include "axle/engine/device_memory.h"
#include "axle/engine/trace.h"
#include "axle/graph/device.h"
#include "axle/graph/ops.h"
#include "axle/graph/tensor.h"

namespace axle {

namespace detail {
// Every program that includes the user API runs its tensors on this process's devices.
[[maybe_unused]] inline const bool kUsesDevices = use_devices_by_default();
}  // namespace detail

/// Device `ordinal` of this process (throws std::out_of_range for a device that does not exist).
Device device(int ordinal);
/// This thread's default device, `Device{}`: the replica's own inside spawn, else xla:0.
Device device();
/// Every device of this process.
std::vector<Device> devices();
/// Number of devices of this process, as torch_xla.device_count().
int device_count();
/// Seeds the random stream of every device of this process, and of this thread's default device,
/// on this replica, as torch.manual_seed: set_rng_state(seed, device) for each.
void manual_seed(uint64_t seed);
/// The hardware behind a device: "CPU".
std::string xla_device_hw(Device device);

/// Cuts the trace: executes every pending tensor of this thread as one graph and returns without
/// waiting for the device (unless `wait`, or XLA_SYNC_WAIT=1).
void mark_step(bool wait = false, std::source_location where = std::source_location::current());
/// Alias of mark_step.
inline void sync(bool wait = false, std::source_location where = std::source_location::current()) {
  mark_step(wait, where);
}

/// Marks a step when it goes out of scope, like `with torch_xla.step():`. What that mark_step
/// throws (a failed step closure, say) leaves the scope; while another exception leaves it, the
/// step is marked and that exception goes on alone (two at once would end the program).
class StepScope {
 public:
  /// Opens the scope; `where` is the source line its mark_step reports.
  explicit StepScope(std::source_location where = std::source_location::current())
      : where_(where) {}
  ~StepScope() noexcept(false) {
    if (std::uncaught_exceptions() > unwinding_) {
      try {
        mark_step(false, where_);
      } catch (...) {  // the exception already leaving the scope says what went wrong first
      }
      return;
    }
    mark_step(false, where_);
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  std::source_location where_;
  int unwinding_ = std::uncaught_exceptions();  // exceptions already in flight at the start
};

/// Waits until everything issued to `devices` has finished, and every asynchronous step closure
/// this thread added so far has run. Empty `devices` means every device of the process, and
/// inside spawn the calling replica's own device, as a torch_xla process's local devices are
/// its one device: another replica's device may hold that replica's next step, waiting at a
/// collective for this one (so may its closures: they are not waited for either). Rethrows the
/// first failure of this thread's asynchronous closures (StepClosureError).
void wait_device_ops(const std::vector<Device>& devices = {});

/// Runs `closure` after this thread's next mark_step, once that step's device work is done (so
/// the values it reads are ready), as torch_xla's add_step_closure. Closures run in the order they
/// were added. Without `run_async`, mark_step runs them before returning, on this thread, and a
/// failure propagates from mark_step. With `run_async`, they run on a thread of their own (where
/// `Device{}` is still this thread's default device) and mark_step does not wait for the device;
/// a failure is rethrown (as a StepClosureError naming the line that added the closure) by this
/// thread's next mark_step or wait_device_ops.
void add_step_closure(std::function<void()> closure, bool run_async = false,
                      std::source_location where = std::source_location::current());

/// Keeps compiled programs in directory `path` (created if missing, unless `readonly`), so that
/// a later process running the same graphs compiles none of them, like
/// torch_xla.runtime.initialize_cache. `readonly` loads entries but never writes. Applies to
/// every compile after the call and for the rest of the process; calling again with the same
/// arguments does nothing, with others throws std::logic_error. XLA_PERSISTENT_CACHE_PATH (and
/// XLA_PERSISTENT_CACHE_READ_ONLY) do the same from the environment.
void initialize_cache(const std::string& path, bool readonly = false);

/// Executes every op as it is traced (XLA_USE_EAGER_DEBUG_MODE=1 does the same).
void eager_mode(bool enabled);
/// Whether eager mode is on (eager_mode, or XLA_USE_EAGER_DEBUG_MODE=1).
[[nodiscard]] bool is_eager_mode();

/// Suspends eager execution on this thread (this replica) for its lifetime: compile(fn) traces
/// whole graphs even in eager mode.
class EagerSuspension {
 public:
  EagerSuspension();
  ~EagerSuspension();
  EagerSuspension(const EagerSuspension&) = delete;
  EagerSuspension& operator=(const EagerSuspension&) = delete;
};

/// Wraps `fn` so that each call traces it as one graph (even in eager mode) and marks the step,
/// like torch_xla.compile.
namespace detail {
/// mark_step as compile's wrapper and the parallel loader take it: the same step, with its cause
/// told apart in PT_XLA_DEBUG_LEVEL's analysis.
void compiled_step(std::source_location where);
void loader_step(std::source_location where);
}  // namespace detail

/// torch_xla.compile: `fn` wrapped so that each call traces it as one graph and marks the step.
template <class F>
auto compile(F fn, std::source_location where = std::source_location::current()) {
  return [fn = std::move(fn), where](auto&&... args) {
    EagerSuspension lazy;
    auto result = fn(std::forward<decltype(args)>(args)...);
    detail::compiled_step(where);
    return result;
  };
}

/// A step as torch_xla's xp.StepTrace: the scope is a span named "<name> step <step>" in the
/// trace (start_trace), and closing it marks the step. When the scope ends by an exception, the
/// step is not marked.
class StepTrace {
 public:
  /// Opens the span "<name> step <step>"; `where` is the source line its mark_step reports.
  StepTrace(std::string_view name, int64_t step,
            std::source_location where = std::source_location::current())
      : span_(std::string(name) + " step " + std::to_string(step), "user"),
        where_(where),
        exceptions_(std::uncaught_exceptions()) {}
  ~StepTrace() noexcept(false) {
    if (std::uncaught_exceptions() == exceptions_) mark_step(false, where_);
  }
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

 private:
  Trace span_;
  std::source_location where_;
  int exceptions_;
};

/// Bytes in use and peak bytes on `device`.
[[nodiscard]] MemoryInfo get_memory_info(Device device = {});

/// Number of tensors alive in this process (CreateTensor - DestroyTensor).
[[nodiscard]] int64_t live_tensor_count();

}  // namespace axle
