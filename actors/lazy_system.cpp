// actors: the process-wide lazy runtime.
#include "actors/lazy_system.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "actors/standard_observers.h"
#include "engine/config.h"
#include "engine/log.h"
#include "engine/spawn.h"
#include "engine/trace.h"

namespace axle {
namespace {

std::mutex g_system_mutex;
std::unique_ptr<LazySystem> g_owner;

// The persistent compile cache outlives systems: restart() keeps it. `g_persistent_chosen` says
// initialize_cache, restart options or the environment have spoken, so the environment is read
// once and never overrides a call.
std::mutex g_persistent_mutex;
std::shared_ptr<const PersistentCache> g_persistent;
bool g_persistent_chosen = false;

std::shared_ptr<const PersistentCache> open_persistent(const PersistentCacheSettings& settings) {
  if (settings.path.empty()) return nullptr;
  return PersistentCache::open(settings.path, settings.readonly);
}

void choose_persistent_cache(const std::optional<PersistentCacheSettings>& settings) {
  std::lock_guard lock(g_persistent_mutex);
  if (settings) {
    g_persistent = open_persistent(*settings);
  } else if (!g_persistent_chosen) {
    g_persistent = open_persistent({config::get_string("XLA_PERSISTENT_CACHE_PATH", ""),
                                    config::get_bool("XLA_PERSISTENT_CACHE_READ_ONLY", false)});
  } else {
    return;
  }
  g_persistent_chosen = true;
}

std::unique_ptr<Backend> backend_from_environment(const LazySystemOptions& options) {
  if (options.backend) return options.backend();
  const std::string kind = config::get_string("PJRT_DEVICE", "CPU");
  if (kind != "CPU" && kind != "cpu") {
    throw ConfigError(
        fmt::format("PJRT_DEVICE={} is not available: axle has a CPU backend only", kind));
  }
  int devices = options.cpu_devices > 0 ? options.cpu_devices
                                        : static_cast<int>(config::get_int("CPU_NUM_DEVICES", 1));
  if (devices < 1) throw ConfigError(fmt::format("CPU_NUM_DEVICES={} must be at least 1", devices));
  return make_cpu_backend(devices);
}

}  // namespace

LazySystem& LazySystem::start_first() {
  std::lock_guard lock(g_system_mutex);
  if (!g_owner) {
    g_owner = std::make_unique<LazySystem>(LazySystemOptions{});
    running_.store(g_owner.get(), std::memory_order_release);
  }
  return *g_owner;
}

void LazySystem::restart(LazySystemOptions options) {
  std::lock_guard lock(g_system_mutex);
  running_.store(nullptr, std::memory_order_release);
  g_owner.reset();
  g_owner = std::make_unique<LazySystem>(std::move(options));
  running_.store(g_owner.get(), std::memory_order_release);
}

void LazySystem::initialize_persistent_cache(const std::string& path, bool readonly) {
  std::lock_guard lock(g_persistent_mutex);
  if (g_persistent) {
    std::error_code error;
    const std::filesystem::path directory = std::filesystem::weakly_canonical(path, error);
    if (!error && directory == g_persistent->directory() && readonly == g_persistent->readonly()) {
      return;
    }
    throw std::logic_error(fmt::format(
        "initialize_cache(\"{}\"{}): the persistent compile cache is already \"{}\"{}, and it "
        "cannot change within a process",
        path, readonly ? ", readonly" : "", g_persistent->directory().string(),
        g_persistent->readonly() ? " (readonly)" : ""));
  }
  g_persistent = PersistentCache::open(path, readonly);
  g_persistent_chosen = true;
}

std::shared_ptr<const PersistentCache> LazySystem::persistent_cache() {
  std::lock_guard lock(g_persistent_mutex);
  return g_persistent;
}

LazySystem::LazySystem(LazySystemOptions options)
    : observers_(options.observers ? std::move(*options.observers) : standard_observers()),
      backend_(backend_from_environment(options)),
      cache_(static_cast<std::size_t>(config::get_int("XLA_COMPILATION_CACHE_SIZE", 2048))),
      max_graph_nodes_(static_cast<uint64_t>(config::get_int("AXLE_MAX_GRAPH_NODES", 1'000'000))),
      saved_graphs_(config::get_string("XLA_SAVE_TENSORS_FILE", ""),
                    config::get_string("XLA_SAVE_TENSORS_FMT", "text")) {
  choose_persistent_cache(options.persistent_cache);
  compiler_ =
      spawn<CompilerActor>(runtime_, SpawnOptions{.name = "compiler"}, cache_,
                           PersistentCacheSource(&LazySystem::persistent_cache), observers_);
  rendezvous_actor_ = spawn<RendezvousActor>(runtime_, SpawnOptions{.name = "rendezvous"});
  for (int i = 0; i < backend_->device_count(); ++i) {
    devices_.push_back(spawn<DeviceActor>(
        runtime_, SpawnOptions{.name = fmt::format("device-{}", i), .dedicated_thread = true},
        *backend_, i, rendezvous_actor_, observers_));
  }
  // Closures may block (a value they read may not be ready), so they get a thread of their own.
  closure_runner_ = spawn<ClosureRunner>(
      runtime_, SpawnOptions{.name = "step-closures", .dedicated_thread = true}, observers_);
  eager_ = config::get_bool("XLA_USE_EAGER_DEBUG_MODE", false);
  sync_wait_ = config::get_bool("XLA_SYNC_WAIT", false);
  param_aliasing_ = config::get_bool("XLA_ENABLE_PARAM_ALIASING", true);
  debug_level_ = static_cast<int>(config::get_int("PT_XLA_DEBUG_LEVEL", 0));
  step_reports_ = std::make_unique<StepReports>(
      StepReportSettings{.analysis = debug_level_ >= 1,
                         .analysis_steps = config::get_int("AXLE_METRICS_ANALYSIS_STEPS", 100),
                         .metrics_file = config::get_string("XLA_METRICS_FILE", "")});
  // AXLE_TRACE_FILE records the system's whole life.
  if (const std::string trace_file = config::get_string("AXLE_TRACE_FILE", "");
      !trace_file.empty() && !trace_recording()) {
    start_trace(trace_file);
    traces_to_file_ = true;
  }
}

LazySystem::~LazySystem() {
  runtime_.shutdown();
  step_reports_.reset();  // the analysis's last look, once the devices are done
  if (traces_to_file_) {
    try {
      (void)stop_trace();
    } catch (const std::exception& e) {
      AXLE_LOG(ERROR, "AXLE_TRACE_FILE: {}", e.what());
    }
  }
}

const ActorRef<DeviceActor>& LazySystem::device_actor(Device device) const {
  if (device.ordinal < 0 || device.ordinal >= device_count()) {
    throw std::out_of_range(fmt::format("device {} does not exist: this process has {} {} device{}",
                                        device.to_string(), device_count(), backend_->hardware(),
                                        device_count() == 1 ? "" : "s"));
  }
  return devices_[device.ordinal];
}

}  // namespace axle
