// actors: the process-wide lazy runtime.
#include "axle/actors/host/lazy_system.h"
#include "axle/actors/compiler/compiler_settings.h"
#include "axle/actors/host/lazy_settings.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "axle/actors/runtime/replica_exchange.h"
#include "axle/actors/runtime/standard_observers.h"
#include "axle/backends/device_settings.h"
#include "axle/engine/config.h"
#include "axle/engine/log.h"
#include "axle/engine/spawn.h"
#include "axle/engine/trace.h"

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
    const config::PersistentCacheSettings configured = config::read_persistent_cache_settings();
    g_persistent = open_persistent({configured.path, configured.read_only});
  } else {
    return;
  }
  g_persistent_chosen = true;
}

std::unique_ptr<Backend> backend_from_settings(const LazySystemOptions& options) {
  if (options.backend) return options.backend();
  const config::DeviceSettings settings = config::read_device_settings();
  const int devices = options.cpu_devices > 0 ? options.cpu_devices : settings.cpu_num_devices;
  return make_cpu_backend(devices,
                          {.intra_op_threads = settings.cpu_intra_op_threads,
                           .host_processes = config::read_process_settings().host_processes,
                           .block_cache_mb = settings.cpu_block_cache_mb,
                           .cpu_isa = settings.cpu_isa});
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
    : LazySystem(std::move(options), config::read_lazy_settings()) {}

LazySystem::LazySystem(LazySystemOptions options, const config::LazySettings& settings)
    : observers_(options.observers ? std::move(*options.observers) : standard_observers()),
      backend_(backend_from_settings(options)),
      cache_(static_cast<std::size_t>(settings.compilation_cache_size)),
      max_graph_nodes_(static_cast<uint64_t>(settings.max_graph_nodes)),
      saved_graphs_(settings.save_tensors_file, settings.save_tensors_format) {
  choose_persistent_cache(options.persistent_cache);
  compiler_ =
      spawn<CompilerActor>(runtime_, SpawnOptions{.name = "compiler"}, cache_,
                           PersistentCacheSource(&LazySystem::persistent_cache), observers_);
  transport_ = ProcessTransport::get();
  meeting_points_ = std::make_shared<MeetingPoints>(transport_);
  rendezvous_actor_ =
      spawn<RendezvousActor>(runtime_, SpawnOptions{.name = "rendezvous"}, meeting_points_);
  if (transport_) {
    // Outside spawn, each process of the job is one replica.
    const ProcessPlacement process = ProcessTransport::placement();
    rendezvous_actor_.tell(OpenGroup{kProcessGroup, process.count, process.index, 1});
    // Read on the transport's thread: a waiting device is answered without another hop.
    transport_->set_receiver([points = meeting_points_](int from, ProcessMessage message) {
      FromProcess received{from, std::move(message)};
      points->receive(received);
    });
  }
  const auto memory_limit =
      static_cast<uint64_t>(config::read_device_settings().device_memory_limit);
  for (int i = 0; i < backend_->device_count(); ++i) {
    devices_.push_back(spawn<DeviceActor>(
        runtime_, SpawnOptions{.name = fmt::format("device-{}", i), .dedicated_thread = true},
        *backend_, i, meeting_points_, config::read_runtime_settings().spin, observers_,
        memory_limit));
  }
  // Closures may block (a value they read may not be ready), so they get a thread of their own.
  closure_runner_ = spawn<ClosureRunner>(
      runtime_, SpawnOptions{.name = "step-closures", .dedicated_thread = true}, observers_);
  eager_ = settings.eager_debug_mode;
  sync_wait_ = settings.sync_wait;
  max_steps_in_flight_ = static_cast<std::size_t>(settings.max_steps_in_flight);
  run_on_host_below_ns_ = settings.run_on_host_below_us * 1000;
  max_async_closures_ = static_cast<std::size_t>(settings.max_async_closures);
  static std::atomic<uint64_t> systems{0};
  serial_ = ++systems;
  param_aliasing_ = settings.param_aliasing;
  check_finite_ = settings.check_finite;
  if (settings.use_spmd) enable_spmd();
  const config::AnalysisSettings analysis = config::read_analysis_settings();
  debug_level_ = analysis.debug_level;
  step_reports_ = std::make_unique<StepReports>(
      StepReportSettings{.analysis = debug_level_ >= 1,
                         .analysis_steps = analysis.metrics_analysis_steps,
                         .metrics_file = analysis.metrics_file});
  // The trace file records the system's whole life.
  if (!settings.trace_file.empty() && !trace_recording()) {
    start_trace(settings.trace_file);
    traces_to_file_ = true;
  }
}

LazySystem::~LazySystem() {
  if (transport_) transport_->set_receiver({});  // the next system's actor takes over
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

void LazySystem::enable_spmd() {
  if (spmd_.load(std::memory_order_acquire)) return;
  const int local = device_count();
  int world = local;
  int first = 0;
  if (transport_) {
    // One mesh over the job's devices, global ordinals process-major (as spawn's replicas): every
    // process must hold as many, or the positions would not agree.
    const ProcessPlacement process = ProcessTransport::placement();
    static constexpr ValueCodec kCountCodec{
        [](const void* value, WireWriter& out, int) {
          out.put(*static_cast<const int64_t*>(value));
        },
        [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
          return std::make_shared<const int64_t>(in.get<int64_t>("a process's device count"));
        }};
    const Gathered counts = exchange_with_replicas(
        rendezvous_actor_, *process_replica(), "use_spmd", "compare the processes' device counts",
        std::make_shared<const int64_t>(local), typeid(int64_t), {}, &kCountCodec);
    std::string differing;
    for (std::size_t p = 0; p < counts->size(); ++p) {
      const int64_t theirs = *static_cast<const int64_t*>((*counts)[p].get());
      if (theirs != local) differing += fmt::format(" process {} has {};", p, theirs);
    }
    if (!differing.empty()) {
      throw std::logic_error(fmt::format(
          "use_spmd: every process of the job must hold as many devices for one mesh over them "
          "all, but process {} has {} and{} set the same CPU_NUM_DEVICES for every process",
          process.index, local, differing));
    }
    world = local * process.count;
    first = local * process.index;
  }
  // The mesh's devices meet in their collectives as the replicas of one group, open before any
  // device can come to one; in a job of several processes the group spans them all.
  rendezvous_actor_.ask(OpenGroup{kSpmdGroup, world, first, local}).get();
  spmd_devices_ = world;
  first_spmd_device_ = first;
  spmd_.store(true, std::memory_order_release);
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
