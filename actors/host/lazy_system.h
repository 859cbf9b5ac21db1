// actors: the process root — the actor system, the backend and its devices' actors, the compiler
// and its caches, the closure runner and the rendezvous, and the process-wide settings and
// reports. Started on first use from the environment (PJRT_DEVICE, CPU_NUM_DEVICES,
// XLA_COMPILATION_CACHE_SIZE, ...); tests may restart it with other options. Replicas reach it
// through their hosts (actors/host/replica_host.h); it knows nothing of them. The persistent
// compile cache is process-wide: restart() keeps it unless the options replace it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "axle/actors/compiler/compile_cache.h"
#include "axle/actors/compiler/persistent_cache.h"
#include "axle/actors/compiler/saved_graphs.h"
#include "axle/actors/host/step_reports.h"
#include "axle/actors/runtime/closure_runner.h"
#include "axle/actors/runtime/compiler_actor.h"
#include "axle/actors/runtime/device_actor.h"
#include "axle/actors/runtime/observer.h"
#include "axle/actors/runtime/rendezvous_actor.h"
#include "axle/backends/backend.h"
#include "axle/engine/runtime.h"

namespace axle {
namespace config {
struct LazySettings;  // actors/host/lazy_settings.h
}  // namespace config

/// Where compiled programs persist (initialize_cache); an empty path means nowhere.
struct PersistentCacheSettings {
  std::string path;
  bool readonly = false;
};

struct LazySystemOptions {
  /// Devices of the CPU backend (CPU_NUM_DEVICES; default 1). Ignored with `backend`.
  int cpu_devices = 0;
  /// A backend to use instead of the one PJRT_DEVICE names (tests use the testing backend).
  std::function<std::unique_ptr<Backend>()> backend;
  /// Replaces the persistent compile cache, even one initialize_cache opened (tests start each
  /// from a directory of their own). Unset keeps the current one.
  std::optional<PersistentCacheSettings> persistent_cache;
  /// What watches the actors work (actors/runtime/observer.h). Unset: the standard observers
  /// (metrics, timeline, step breakdown); empty: none.
  std::optional<std::vector<std::shared_ptr<ActorObserver>>> observers;
};

class LazySystem final {
 public:
  /// The running system, started on first use.
  [[nodiscard]] static LazySystem& get() {
    if (LazySystem* system = running_.load(std::memory_order_acquire)) [[likely]]
      return *system;
    return start_first();
  }
  /// Shuts the current system down (waiting for its devices) and starts the next with `options`.
  static void restart(LazySystemOptions options = {});

  /// Opens the persistent compile cache for the rest of the process (initialize_cache). Without
  /// a call, the first system opens XLA_PERSISTENT_CACHE_PATH (XLA_PERSISTENT_CACHE_READ_ONLY) if
  /// set. Calling again with the same settings does nothing; other settings throw
  /// std::logic_error naming both, since compiled programs already went to the first directory.
  static void initialize_persistent_cache(const std::string& path, bool readonly);
  /// The persistent compile cache, or null when none is open.
  [[nodiscard]] static std::shared_ptr<const PersistentCache> persistent_cache();

  explicit LazySystem(LazySystemOptions options);
  ~LazySystem();
  LazySystem(const LazySystem&) = delete;
  LazySystem& operator=(const LazySystem&) = delete;

  [[nodiscard]] Backend& backend() noexcept { return *backend_; }
  [[nodiscard]] int device_count() const noexcept { return static_cast<int>(devices_.size()); }
  /// The actor of `device`; throws std::out_of_range naming the device count.
  [[nodiscard]] const ActorRef<DeviceActor>& device_actor(Device device) const;
  [[nodiscard]] const ActorRef<CompilerActor>& compiler() const noexcept { return compiler_; }
  [[nodiscard]] CompileCache& cache() noexcept { return cache_; }
  /// Runs asynchronous step closures (add_step_closure with run_async).
  [[nodiscard]] const ActorRef<ClosureRunner>& closure_runner() const noexcept {
    return closure_runner_;
  }
  /// Where spawn's replicas meet for rendezvous and mesh_reduce, and their devices for
  /// in-graph collectives.
  [[nodiscard]] const ActorRef<RendezvousActor>& rendezvous_actor() const noexcept {
    return rendezvous_actor_;
  }

  /// Eager mode (XLA_USE_EAGER_DEBUG_MODE, eager_mode()): every op executes as it is traced.
  void set_eager(bool eager) noexcept { eager_.store(eager, std::memory_order_relaxed); }
  [[nodiscard]] bool eager() const noexcept { return eager_.load(std::memory_order_relaxed); }
  /// AXLE_MAX_GRAPH_NODES: a replica's pending graph is cut (executed) at this many nodes.
  [[nodiscard]] uint64_t max_graph_nodes() const noexcept { return max_graph_nodes_; }
  /// XLA_SYNC_WAIT: mark_step waits for the device.
  [[nodiscard]] bool sync_wait() const noexcept { return sync_wait_; }
  /// AXLE_MAX_STEPS_IN_FLIGHT: graphs a host thread may have sent and not seen done (0: no bound).
  [[nodiscard]] std::size_t max_steps_in_flight() const noexcept { return max_steps_in_flight_; }
  /// AXLE_RUN_ON_HOST_BELOW_US in nanoseconds: steps this short run on their host's thread.
  [[nodiscard]] int64_t run_on_host_below_ns() const noexcept { return run_on_host_below_ns_; }
  /// XLA_MAX_ASYNC_QUEUE: asynchronous closures a host thread may have pending (0: no bound).
  [[nodiscard]] std::size_t max_async_closures() const noexcept { return max_async_closures_; }
  /// Tells this system from those before it in the process (restart()).
  [[nodiscard]] uint64_t serial() const noexcept { return serial_; }
  /// XLA_ENABLE_PARAM_ALIASING (default on): a mark_step may update inputs nothing else reads in
  /// place (buffer donation).
  [[nodiscard]] bool param_aliasing() const noexcept { return param_aliasing_; }
  /// AXLE_CHECK_FINITE: every step waits and has its floating results checked
  /// (actors/host/finite_check.h).
  [[nodiscard]] bool check_finite() const noexcept { return check_finite_; }
  /// SPMD (XLA_USE_SPMD, use_spmd()): the user sees one virtual device, Device{0}, over every
  /// device of the process, and each step runs as one partitioned program on all of them
  /// (actors/host/spmd_runtime.h). Once on, it stays on for the system's life.
  [[nodiscard]] bool spmd() const noexcept { return spmd_.load(std::memory_order_acquire); }
  /// Turns SPMD on. In a job of several processes (mpirun) every process calls it at the same
  /// point of the program: the virtual device spans every device of the job, and the processes
  /// check that they hold as many devices each (std::logic_error naming them otherwise).
  void enable_spmd();
  /// Under SPMD, the mesh's devices: every device of the job (processes × local devices).
  [[nodiscard]] int spmd_device_count() const noexcept { return spmd_devices_; }
  /// Under SPMD, the mesh position (global ordinal) of this process's device 0: process-major,
  /// process p's devices are p * L .. p * L + L - 1.
  [[nodiscard]] int first_spmd_device() const noexcept { return first_spmd_device_; }
  /// PT_XLA_DEBUG_LEVEL: 0 quiet, 1 compilation analysis, 2 execution analysis too.
  [[nodiscard]] int debug_level() const noexcept { return debug_level_; }
  /// XLA_SAVE_TENSORS_FILE, appended to by every sync.
  [[nodiscard]] SavedGraphs& saved_graphs() noexcept { return saved_graphs_; }
  /// The auto-metrics analysis and XLA_METRICS_FILE, told of every step.
  [[nodiscard]] StepReports& step_reports() noexcept { return *step_reports_; }
  /// What watches the actors (fixed for the system's life).
  [[nodiscard]] const Observers& observers() const noexcept { return observers_; }

 private:
  static LazySystem& start_first();
  // The running system (null while none is, or while restart() replaces it).
  static inline constinit std::atomic<LazySystem*> running_{nullptr};

  LazySystem(LazySystemOptions options, const config::LazySettings& settings);

  Observers observers_;  // before the actors that tell them, after them in destruction
  Runtime runtime_;
  std::unique_ptr<Backend> backend_;
  CompileCache cache_;
  ActorRef<CompilerActor> compiler_;
  std::vector<ActorRef<DeviceActor>> devices_;
  ActorRef<ClosureRunner> closure_runner_;
  ActorRef<RendezvousActor> rendezvous_actor_;
  ProcessTransport* transport_ = nullptr;          // null when this process is the whole job
  std::shared_ptr<MeetingPoints> meeting_points_;  // shared by the rendezvous actor and devices
  std::atomic<bool> eager_{false};
  uint64_t max_graph_nodes_;
  bool sync_wait_ = false;
  std::size_t max_steps_in_flight_ = 0;
  int64_t run_on_host_below_ns_ = 0;
  std::size_t max_async_closures_ = 0;
  uint64_t serial_ = 0;
  bool param_aliasing_ = true;
  bool check_finite_ = false;
  std::atomic<bool> spmd_{false};
  int spmd_devices_ = 0;
  int first_spmd_device_ = 0;
  int debug_level_ = 0;
  SavedGraphs saved_graphs_;
  std::unique_ptr<StepReports> step_reports_;
  bool traces_to_file_ = false;  // this system started the AXLE_TRACE_FILE trace
};

}  // namespace axle
