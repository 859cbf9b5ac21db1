// actors: the process-wide lazy runtime.
#include "actors/lazy_system.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "actors/host.h"
#include "actors/lowering.h"
#include "actors/program_dump.h"
#include "actors/step_breakdown.h"
#include "engine/config.h"
#include "engine/log.h"
#include "engine/metrics.h"
#include "engine/spawn.h"
#include "engine/trace.h"
#include "graph/dump.h"

namespace axle {
namespace {

std::mutex g_system_mutex;
std::atomic<LazySystem*> g_system{nullptr};
std::unique_ptr<LazySystem> g_owner;

thread_local int tls_eager_suspensions = 0;

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

LazySystem& LazySystem::get() {
  if (LazySystem* system = g_system.load(std::memory_order_acquire)) return *system;
  std::lock_guard lock(g_system_mutex);
  if (!g_owner) {
    g_owner = std::make_unique<LazySystem>(LazySystemOptions{});
    g_system.store(g_owner.get(), std::memory_order_release);
  }
  return *g_owner;
}

void LazySystem::restart(LazySystemOptions options) {
  std::lock_guard lock(g_system_mutex);
  g_system.store(nullptr, std::memory_order_release);
  g_owner.reset();
  g_owner = std::make_unique<LazySystem>(std::move(options));
  g_system.store(g_owner.get(), std::memory_order_release);
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
    : backend_(backend_from_environment(options)),
      cache_(static_cast<std::size_t>(config::get_int("XLA_COMPILATION_CACHE_SIZE", 2048))),
      max_graph_nodes_(static_cast<uint64_t>(config::get_int("AXLE_MAX_GRAPH_NODES", 1'000'000))) {
  choose_persistent_cache(options.persistent_cache);
  compiler_ = spawn<CompilerActor>(runtime_, SpawnOptions{.name = "compiler"}, cache_,
                                   PersistentCacheSource(&LazySystem::persistent_cache));
  rendezvous_actor_ = spawn<RendezvousActor>(runtime_, SpawnOptions{.name = "rendezvous"});
  for (int i = 0; i < backend_->device_count(); ++i) {
    devices_.push_back(spawn<DeviceActor>(
        runtime_, SpawnOptions{.name = fmt::format("device-{}", i), .dedicated_thread = true},
        *backend_, i, rendezvous_actor_));
  }
  // Closures may block (a value they read may not be ready), so they get a thread of their own.
  closure_runner_ = spawn<ClosureRunner>(
      runtime_, SpawnOptions{.name = "step-closures", .dedicated_thread = true});
  eager_ = config::get_bool("XLA_USE_EAGER_DEBUG_MODE", false);
  sync_wait_ = config::get_bool("XLA_SYNC_WAIT", false);
  param_aliasing_ = config::get_bool("XLA_ENABLE_PARAM_ALIASING", true);
  debug_level_ = static_cast<int>(config::get_int("PT_XLA_DEBUG_LEVEL", 0));
  metrics_analysis_steps_ = config::get_int("AXLE_METRICS_ANALYSIS_STEPS", 100);
  metrics_file_ = config::get_string("XLA_METRICS_FILE", "");
  // AXLE_TRACE_FILE records the system's whole life.
  if (const std::string trace_file = config::get_string("AXLE_TRACE_FILE", "");
      !trace_file.empty() && !trace_recording()) {
    start_trace(trace_file);
    traces_to_file_ = true;
  }
  if (debug_level_ >= 1) metrics_analysis_ = std::make_unique<MetricsAnalysis>();
  save_tensors_file_ = config::get_string("XLA_SAVE_TENSORS_FILE", "");
  save_tensors_format_ = config::get_string("XLA_SAVE_TENSORS_FMT", "text");
  if (save_tensors_format_ != "text" && save_tensors_format_ != "dot" &&
      save_tensors_format_ != "hlo") {
    throw ConfigError(
        fmt::format("XLA_SAVE_TENSORS_FMT={} is not one of text, dot, hlo", save_tensors_format_));
  }
  TraceContext::set_observer(this);
}

LazySystem::~LazySystem() {
  TraceContext::set_observer(nullptr);
  runtime_.shutdown();
  if (metrics_analysis_) fmt::print(stderr, "{}", metrics_analysis_->look());
  if (traces_to_file_) {
    try {
      (void)stop_trace();
    } catch (const std::exception& e) {
      AXLE_LOG(ERROR, "AXLE_TRACE_FILE: {}", e.what());
    }
  }
}

void LazySystem::after_step() {
  if (metrics_analysis_) {
    const std::string lines = metrics_analysis_->step(metrics_analysis_steps_);
    if (!lines.empty()) fmt::print(stderr, "{}", lines);
  }
  if (!metrics_file_.empty()) {
    std::lock_guard lock(metrics_file_mutex_);
    std::ofstream out(metrics_file_, std::ios::app);
    out << fmt::format("Step {}\n{}Step Breakdown\n{}\n", ++metrics_file_steps_, metrics_report(),
                       detail::metrics_file_step_report());
    if (!out) AXLE_LOG(WARNING, "could not append to XLA_METRICS_FILE={}", metrics_file_);
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

void LazySystem::after_op(const Tensor& result, const SourceLocation& where) {
  if (eager() && !EagerSuspension::active()) {
    sync_tensors({result}, false, SyncReason::kEager, std::source_location::current());
    return;
  }
  TraceContext& context = TraceContext::current();
  if (context.nodes_since_step() >= max_graph_nodes_) {
    AXLE_LOG(WARNING,
             "{} ops traced without a mark_step (AXLE_MAX_GRAPH_NODES={}): cutting the step at "
             "{}:{}; add mark_step() to the loop",
             context.nodes_since_step(), max_graph_nodes_, where.file(), where.line());
    sync_tensors(context.pending_tensors(), false, SyncReason::kGraphLimit,
                 std::source_location::current());
    context.reset_node_count();
  }
}

namespace {

// The program the compiler makes of the tensors' pending graph (XLA_SAVE_TENSORS_FMT=hlo),
// lowered here for the dump: fused kernels, buffer assignment and sizes.
std::string lowered_text(const std::vector<Tensor>& tensors) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.impl()->pending_ir()) roots.push_back(t.impl()->ir());
  }
  if (roots.empty()) return "(nothing pending)\n";
  const StepGraph graph = build_step_graph(roots);
  return program_text(*compile_graph(graph, PassSet::from_config()));
}

}  // namespace

void LazySystem::save_graph(const std::vector<Tensor>& tensors, std::string_view reason) {
  if (save_tensors_file_.empty()) return;
  std::string dump = save_tensors_format_ == "dot"   ? tensors_dot(tensors)
                     : save_tensors_format_ == "hlo" ? lowered_text(tensors)
                                                     : tensors_text(tensors);
  std::lock_guard lock(save_mutex_);
  std::FILE* file = std::fopen(save_tensors_file_.c_str(), "a");
  if (!file) {
    AXLE_LOG(ERROR, "XLA_SAVE_TENSORS_FILE={}: cannot open for appending", save_tensors_file_);
    return;
  }
  std::fprintf(file, "[%.*s]\n%s\n", static_cast<int>(reason.size()), reason.data(), dump.c_str());
  std::fclose(file);
}

EagerSuspension::EagerSuspension() noexcept { ++tls_eager_suspensions; }
EagerSuspension::~EagerSuspension() { --tls_eager_suspensions; }
bool EagerSuspension::active() noexcept { return tls_eager_suspensions > 0; }

}  // namespace axle
