// actors: the process-wide lazy runtime — the actor system, the backend and its devices, the
// compiler and its caches. Started on first use from the environment (PJRT_DEVICE,
// CPU_NUM_DEVICES, XLA_COMPILATION_CACHE_SIZE, ...); tests may restart it with other options.
// The persistent compile cache is process-wide: restart() keeps it unless the options replace it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/closure_runner.h"
#include "actors/compile_cache.h"
#include "actors/compiler_actor.h"
#include "actors/debug_analysis.h"
#include "actors/device_actor.h"
#include "actors/persistent_cache.h"
#include "actors/rendezvous_actor.h"
#include "backends/backend.h"
#include "engine/runtime.h"
#include "graph/trace_context.h"

namespace axle {

/// Where compiled programs persist (initialize_cache); an empty path means nowhere.
struct PersistentCacheSettings {
  std::string path;
  bool readonly = false;
};

struct LazySystemOptions {
  /// Devices of the CPU backend (CPU_NUM_DEVICES; default 1). Ignored with `backend`.
  int cpu_devices = 0;
  /// A backend to use instead of the one PJRT_DEVICE names (tests wrap the CPU backend).
  std::function<std::unique_ptr<Backend>()> backend;
  /// Replaces the persistent compile cache, even one initialize_cache opened (tests start each
  /// from a directory of their own). Unset keeps the current one.
  std::optional<PersistentCacheSettings> persistent_cache;
};

class LazySystem final : public TraceObserver {
 public:
  /// The running system, started on first use.
  static LazySystem& get();
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
  ~LazySystem() override;

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
  /// Where spawn's replicas meet for rendezvous and mesh_reduce.
  [[nodiscard]] const ActorRef<RendezvousActor>& rendezvous_actor() const noexcept {
    return rendezvous_actor_;
  }

  // Per-op hook: eager mode and the runaway-graph limit.
  void after_op(const Tensor& result, const SourceLocation& where) override;
  /// Appends the graph of `tensors` to XLA_SAVE_TENSORS_FILE (in XLA_SAVE_TENSORS_FMT, text or
  /// dot) when that is set.
  void save_graph(const std::vector<Tensor>& tensors, std::string_view reason);

  void set_eager(bool eager) noexcept { eager_.store(eager, std::memory_order_relaxed); }
  [[nodiscard]] bool eager() const noexcept { return eager_.load(std::memory_order_relaxed); }
  /// XLA_SYNC_WAIT: mark_step waits for the device.
  [[nodiscard]] bool sync_wait() const noexcept { return sync_wait_; }
  /// XLA_ENABLE_PARAM_ALIASING (default on): a mark_step may update inputs nothing else reads in
  /// place (buffer donation).
  [[nodiscard]] bool param_aliasing() const noexcept { return param_aliasing_; }
  /// PT_XLA_DEBUG_LEVEL: 0 quiet, 1 compilation analysis, 2 execution analysis too.
  [[nodiscard]] int debug_level() const noexcept { return debug_level_; }
  /// After every mark_step: counts it for the auto-metrics analysis (PT_XLA_DEBUG_LEVEL >= 1;
  /// every AXLE_METRICS_ANALYSIS_STEPS steps its lines go to stderr), and appends the metrics
  /// report and the step breakdown to XLA_METRICS_FILE when set.
  void after_step();

 private:
  Runtime runtime_;
  std::unique_ptr<Backend> backend_;
  CompileCache cache_;
  ActorRef<CompilerActor> compiler_;
  std::vector<ActorRef<DeviceActor>> devices_;
  ActorRef<ClosureRunner> closure_runner_;
  ActorRef<RendezvousActor> rendezvous_actor_;
  std::atomic<bool> eager_{false};
  uint64_t max_graph_nodes_;
  bool sync_wait_ = false;
  bool param_aliasing_ = true;
  int debug_level_ = 0;
  int64_t metrics_analysis_steps_ = 100;
  std::unique_ptr<MetricsAnalysis> metrics_analysis_;
  std::string metrics_file_;
  std::mutex metrics_file_mutex_;
  int64_t metrics_file_steps_ = 0;
  bool traces_to_file_ = false;  // this system started the AXLE_TRACE_FILE trace
  std::string save_tensors_file_;
  std::string save_tensors_format_;
  std::mutex save_mutex_;
};

/// Suspends eager execution on this thread for its lifetime (compile(fn) traces whole graphs).
class EagerSuspension {
 public:
  EagerSuspension() noexcept;
  ~EagerSuspension();
  EagerSuspension(const EagerSuspension&) = delete;
  EagerSuspension& operator=(const EagerSuspension&) = delete;
  [[nodiscard]] static bool active() noexcept;
};

}  // namespace axle
