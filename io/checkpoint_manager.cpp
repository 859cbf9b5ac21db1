// io: a run's checkpoints as one directory per step. The tensors go through the checkpoint codec
// (graph/formats/checkpoint_codec.h), the host state and the random streams as JSON, and the
// commit file, written last, lists every file's size and CRC-32: a step is whole once its commit
// file is there, and a restore checks every file against it before it changes anything.
#include "axle/io/checkpoint_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "axle/actors/host/api.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replicas.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"
#include "axle/engine/spawn.h"
#include "axle/graph/formats/atomic_file.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/step_commit.h"
#include "axle/graph/trace_context.h"
#include "axle/io/checkpoint_step.h"
#include "axle/io/checkpoint_tiles.h"
#include "axle/io/checkpoint_writer.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
// The step directory's files (io/checkpoint_step.h).
using checkpoint_step::adopt_layouts;
using checkpoint_step::any_pending;
using checkpoint_step::apply_host_state;
using checkpoint_step::CheckpointWriterActor;
using checkpoint_step::commit_step;
using checkpoint_step::committed_steps;
using checkpoint_step::DeviceTiles;
using checkpoint_step::finish_part;
using checkpoint_step::host_bytes_of;
using checkpoint_step::host_state;
using checkpoint_step::host_tensors;
using checkpoint_step::HostState;
using checkpoint_step::HostStep;
using checkpoint_step::HostValues;
using checkpoint_step::kExtra;
using checkpoint_step::kModel;
using checkpoint_step::kOptimizer;
using checkpoint_step::kStateFile;
using checkpoint_step::kTensorsFile;
using checkpoint_step::master_tensors_of;
using checkpoint_step::on_disk;
using checkpoint_step::part;
using checkpoint_step::per_replica_file;
using checkpoint_step::per_replica_layout;
using checkpoint_step::read_host_state;
using checkpoint_step::read_json;
using checkpoint_step::read_local_tiles;
using checkpoint_step::read_replica_host_state;
using checkpoint_step::read_replica_tensors;
using checkpoint_step::read_tensors;
using checkpoint_step::read_tile_tensors;
using checkpoint_step::replica_host_state;
using checkpoint_step::replica_tensors_of;
using checkpoint_step::ReplicaHostState;
using checkpoint_step::restored_entries;
using checkpoint_step::restored_per_replica;
using checkpoint_step::saved_as_tiles;
using checkpoint_step::saved_layouts;
using checkpoint_step::StepDirectory;
using checkpoint_step::streams_file;
using checkpoint_step::write_tensors;
using checkpoint_step::write_text;
using checkpoint_step::write_tiles;
using checkpoint_step::WriteFailure;
using checkpoint_step::WriteStep;

// Set by SIGTERM once a manager watches for preemption; read by reached_preemption.
std::atomic<bool> g_preempted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

// The process goes on to save at the next step; in a job of processes it says so, and what it
// waits for: when mpirun stops the job because another process ended, that is the last line.
void on_preemption(int) {
  g_preempted.store(true, std::memory_order_relaxed);
  say_sigterm_note();
}

// From the first manager on, SIGTERM marks a preemption instead of ending the process.
void watch_for_preemption() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_handler = on_preemption;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, nullptr);
  });
}

// Who takes part in a save: the replicas, or under SPMD the processes. There each process traces
// the one program over the mesh (replica 0 of 1 to world_size()) and reading a value laid out
// over the mesh is a collective of the processes, so the processes stand in for the replicas;
// the first one writes.
struct Party {
  int ordinal = 0;
  int count = 1;
  bool spmd = false;
  [[nodiscard]] bool writes() const noexcept { return ordinal == 0; }
};

Party party() {
  if (LazySystem::get().spmd()) return {process_index(), process_count(), true};
  return {global_ordinal(), world_size(), false};
}

template <typename T>
std::vector<T> gather_all(const std::vector<T>& values) {
  return values;
}

// Neither a sharded state nor per_replica tensors mean anything under SPMD, where the state's
// tensors are global values laid out over the mesh.
void check_spmd_state(const Party& me, const TrainingState& state, std::string_view op) {
  if (me.spmd && (state.sharded || !state.per_replica.empty())) {
    throw std::invalid_argument(fmt::format(
        "CheckpointManager.{}: under SPMD the state's tensors are global values laid out over "
        "the mesh; a sharded state (FSDP) or per_replica tensors do not apply",
        op));
  }
}

// `tensors` read to the host, every read asked before the first is awaited; FileError naming
// `file` for an undefined one.
HostValues read_to_host(const nn::StateDict& tensors, const fs::path& file) {
  std::vector<Future<CpuTensor>> reads;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw FileError(file, fmt::format("key \"{}\" is undefined", name));
    reads.push_back(tensor.to_cpu_async());
  }
  HostValues values;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    values.emplace_back(tensors[i].first, reads[i].get());
  }
  return values;
}

// Every replica's host state (random streams, data loader position) and per_replica layout, by
// ordinal, and whether the master's writers are all busy (`writers_busy`, on the master): one
// meeting decides alike on every replica. nullopt: the save is skipped.
std::optional<std::vector<json>> agree_on_async_save(const TrainingState& state,
                                                     const nn::StateDict& own, bool writers_busy) {
  json mine{{"streams", replica_host_state(state)}, {"layout", per_replica_layout(own)}};
  if (writers_busy) mine["writers_busy"] = true;
  std::vector<json> replicas;
  for (const std::string& text :
       mesh_reduce("CheckpointManager.save_async", mine.dump(), gather_all<std::string>)) {
    replicas.push_back(json::parse(text));
  }
  if (replicas.front().value("writers_busy", false)) return std::nullopt;
  const json& layout = replicas.front().at("layout");
  for (std::size_t ordinal = 1; ordinal < replicas.size(); ++ordinal) {
    if (replicas[ordinal].at("layout") != layout) {
      throw std::invalid_argument(fmt::format(
          "CheckpointManager.save_async: replica {}'s own tensors (per_replica entries, or a "
          "sharded model's) {} differ from the master's {}: every replica holds the same names, "
          "dtypes and shapes",
          ordinal, replicas[ordinal].at("layout").dump(), layout.dump()));
    }
  }
  return replicas;
}

}  // namespace

// The writer actor, on a runtime of its own (one thread), and the saves sent to it, oldest
// first: it writes them in order, one at a time.
struct CheckpointManager::Writer {
  explicit Writer(StepDirectory where)
      : runtime(RuntimeOptions{.threads = 1}),
        actor(spawn<CheckpointWriterActor>(runtime, SpawnOptions{.name = "checkpoint_writer"},
                                           std::move(where))) {}

  // The oldest save's outcome, waited for; its failure thrown as an error of this thread.
  void finish_oldest() {
    Future<std::optional<WriteFailure>> oldest = std::move(in_flight.front());
    in_flight.pop_front();
    const std::optional<WriteFailure> failure = oldest.get();
    if (!failure) return;
    if (failure->file.empty()) throw std::runtime_error("CheckpointManager: " + failure->cause);
    throw FileError(failure->file, failure->cause);
  }
  [[nodiscard]] int64_t writing() const {
    return std::ranges::count_if(in_flight, [](const auto& save) { return !save.ready(); });
  }

  Runtime runtime;
  ActorRef<CheckpointWriterActor> actor;
  std::deque<Future<std::optional<WriteFailure>>> in_flight;
};

CheckpointManager::CheckpointManager(fs::path path, int64_t save_interval, int64_t max_to_keep,
                                     int64_t max_pending_async, bool chkpt_on_preemption,
                                     WhenBusy when_busy)
    : path_(std::move(path)),
      save_interval_(save_interval),
      max_to_keep_(max_to_keep),
      max_pending_async_(max_pending_async),
      chkpt_on_preemption_(chkpt_on_preemption),
      when_busy_(when_busy) {
  if (max_pending_async < 1) {
    throw std::invalid_argument(fmt::format(
        "CheckpointManager: max_pending_async must be at least 1, not {}", max_pending_async));
  }
  if (save_interval < 1) {
    throw std::invalid_argument(
        fmt::format("CheckpointManager: save_interval must be at least 1, not {}", save_interval));
  }
  if (chkpt_on_preemption_) watch_for_preemption();
  on_disk(path_, "create the directory",
          [&](std::error_code& e) { fs::create_directories(path_, e); });
}

CheckpointManager::~CheckpointManager() {
  try {
    join();
  } catch (const std::exception& e) {
    AXLE_LOG(ERROR, "CheckpointManager: an asynchronous save failed: {}", e.what());
  }
}

void CheckpointManager::join() {
  while (writer_ && !writer_->in_flight.empty()) writer_->finish_oldest();
}

bool CheckpointManager::should_save(int64_t step) {
  if (step % save_interval_ == 0) return true;
  return chkpt_on_preemption_ && reached_preemption(step);
}

bool CheckpointManager::reached_preemption(int64_t step) {
  if (preemption_checked_ && preemption_checked_->first == step) return preemption_checked_->second;
  const bool mine = g_preempted.load(std::memory_order_relaxed);
  // Every replica's (step, preempted): one step for all, and preempted if any was.
  const bool any = mesh_reduce(
      "CheckpointManager.reached_preemption", std::pair<int64_t, int64_t>{step, mine ? 1 : 0},
      [&](const std::vector<std::pair<int64_t, int64_t>>& all) {
        bool preempted = false;
        for (const auto& [their_step, theirs] : all) {
          if (their_step != step) {
            throw std::logic_error(fmt::format(
                "CheckpointManager.reached_preemption: asked at step {} here and at step {} by "
                "another replica; every replica must ask at the same step",
                step, their_step));
          }
          preempted |= theirs != 0;
        }
        return preempted;
      });
  preemption_checked_ = {step, any};
  return any;
}

bool CheckpointManager::save(int64_t step, const TrainingState& state, bool force) {
  if (!force && !should_save(step)) return false;
  if (step < 0)
    throw std::invalid_argument(fmt::format("CheckpointManager.save: step {} < 0", step));
  join();
  const Party me = party();
  check_spmd_state(me, state, "save");
  const bool replicated = me.count > 1;
  const nn::StateDict tensors = master_tensors_of(state);
  const nn::StateDict own = replica_tensors_of(state);
  // Pending values are computed by every replica alike, as at its next mark_step.
  if (any_pending(tensors) || any_pending(own)) mark_step();
  const fs::path partial = path_ / fmt::format(".{}.partial", step);
  // A save that fails leaves no partial directory behind, and the earlier steps as they were.
  const auto master_writes = [&](auto&& write) {
    if (!me.writes()) return;
    try {
      write();
    } catch (...) {
      std::error_code ignored;
      fs::remove_all(partial, ignored);
      throw;
    }
  };
  master_writes([&] {
    on_disk(partial, "clear", [&](std::error_code& e) { fs::remove_all(partial, e); });
    on_disk(partial, "create", [&](std::error_code& e) { fs::create_directories(partial, e); });
    // Under SPMD every process writes its devices' tiles, below.
    if (!me.spmd) write_tensors(tensors, partial / kTensorsFile);
    write_text(partial / kStateFile, host_state(step, state).dump(1));
  });
  if (replicated) rendezvous("CheckpointManager.save: state written");
  write_text(partial / streams_file(me.ordinal), replica_host_state(state).dump(1));
  if (!own.empty()) {
    (void)per_replica_layout(own);  // every entry defined
    write_tensors(own, partial / per_replica_file(me.ordinal));
  }
  if (me.spmd) {
    std::vector<DeviceTiles> tiles = read_local_tiles(tensors, partial / kTensorsFile);
    finish_part({path_, max_to_keep_}, step, partial, me.ordinal, me.count,
                write_tiles(partial, tiles));
  }
  if (replicated) rendezvous("CheckpointManager.save: random streams written");
  if (!me.spmd) master_writes([&] { commit_step({path_, max_to_keep_}, step, partial, me.count); });
  // Under SPMD the part written last committed the step before the processes met above.
  if (replicated && !me.spmd) rendezvous("CheckpointManager.save: committed");
  return true;
}

bool CheckpointManager::save_async(int64_t step, const TrainingState& state, bool force) {
  if (!force && !should_save(step)) return false;
  if (step < 0) {
    throw std::invalid_argument(fmt::format("CheckpointManager.save_async: step {} < 0", step));
  }
  const Party me = party();
  check_spmd_state(me, state, "save_async");
  const nn::StateDict tensors = master_tensors_of(state);
  const nn::StateDict own = replica_tensors_of(state);
  if (any_pending(tensors) || any_pending(own)) mark_step();
  // A step at a preemption is the run's last: it is saved even when the writers are busy.
  const bool may_skip =
      when_busy_ == WhenBusy::kSkip && !(chkpt_on_preemption_ && reached_preemption(step));
  const bool writers_busy =
      me.writes() && may_skip && writer_ && writer_->writing() >= max_pending_async_;
  const fs::path partial = path_ / fmt::format(".{}.partial", step);
  // Under SPMD every process's writer writes into the step's partial directory: the first clears
  // what an earlier run left there before they meet, so that none clears another's part.
  if (me.spmd && me.writes() && !writers_busy) {
    on_disk(partial, "clear", [&](std::error_code& e) { fs::remove_all(partial, e); });
  }
  const std::optional<std::vector<json>> replicas = agree_on_async_save(state, own, writers_busy);
  if (!replicas) {
    AXLE_COUNTER_INC("CheckpointAsyncSkipped", 1);
    return false;
  }
  const json& layout = replicas->front().at("layout");
  std::vector<std::string> per_replica_bytes;
  if (!layout.empty()) {
    per_replica_bytes = mesh_reduce("CheckpointManager.save_async: per_replica", host_bytes_of(own),
                                    gather_all<std::string>);
  }
  // Under SPMD every process writes its part of the step: its devices' tiles.
  if (!me.writes() && !me.spmd) return true;
  if (!writer_) writer_ = std::make_unique<Writer>(StepDirectory{path_, max_to_keep_});
  while (static_cast<int64_t>(writer_->in_flight.size()) >= max_pending_async_) {
    writer_->finish_oldest();
  }
  // The values as they stand after this step, on the host before the loop goes on: a read still
  // in flight at the next mark_step would keep that step from donating its buffer, and so give
  // this replica another graph than the others'. Only the disk is left to the writer.
  HostStep saved{.step = step, .partial = partial};
  if (me.spmd) {
    saved.as_tiles = true;
    saved.tiles = read_local_tiles(tensors, partial / kTensorsFile);
    saved.process = me.ordinal;
    saved.processes = me.count;
  } else {
    saved.values = read_to_host(tensors, partial / kTensorsFile);
  }
  if (me.writes()) {
    saved.host_state = host_state(step, state).dump(1);
    for (const json& replica : *replicas) saved.streams.push_back(replica.at("streams").dump(1));
  }
  for (const std::string& bytes : per_replica_bytes) {
    saved.per_replica.push_back(host_tensors(layout, bytes));
  }
  uint64_t host_bytes = 0;
  for (const auto& [name, value] : saved.values) host_bytes += value.bytes.size();
  for (const DeviceTiles& device : saved.tiles) {
    for (const auto& [name, tile] : device.values) host_bytes += tile.bytes.size();
  }
  for (const std::string& bytes : per_replica_bytes) host_bytes += bytes.size();
  AXLE_METRIC_ADD("CheckpointAsyncHostBytes", MetricKind::kBytes, static_cast<double>(host_bytes));
  writer_->in_flight.push_back(writer_->actor.ask(WriteStep{std::move(saved)}));
  return true;
}

std::vector<int64_t> CheckpointManager::all_steps() const { return committed_steps(path_); }

void CheckpointManager::restore(int64_t step, TrainingState& state) {
  const fs::path dir = path_ / std::to_string(step);
  check_step_commit(dir);
  // Everything is read and checked before anything changes.
  const json host_json = read_json(dir / kStateFile);
  const HostState host = read_host_state(host_json, dir / kStateFile, state);
  const Party me = party();
  // Under SPMD every process traces the one program with the same streams and loader position,
  // so a job of more processes than saved the step resumes from the first one's.
  const int saved_by = read_json(dir / kStepCommitFile).value("replicas", 0);
  const int ordinal = me.spmd && me.ordinal >= saved_by ? 0 : me.ordinal;
  // A replica beyond those that saved the step has nothing of its own in it: the caller's
  // mistake (a job grown since), not damage to skip over for an older step or a fresh start.
  if (ordinal >= saved_by) {
    throw nn::StateDictError(fmt::format(
        "{}: saved by {} replica(s); replica {} of this job has no random streams or position in "
        "it (resume a job of as many replicas, or of processes that hold them)",
        dir.string(), saved_by, ordinal));
  }
  const ReplicaHostState replica_host = read_replica_host_state(dir / streams_file(ordinal), state);
  const fs::path tensors_file = dir / kTensorsFile;
  const fs::path replica_file = dir / per_replica_file(ordinal);
  const nn::StateDict masters =
      saved_as_tiles(host_json)
          ? read_tile_tensors(dir, master_tensors_of(state), host_json)
          : read_tensors(tensors_file, master_tensors_of(state), saved_layouts(host_json));
  const nn::StateDict own = read_replica_tensors(replica_tensors_of(state), replica_file);
  // The model, the optimizer and the extra tensors: the master's, or this replica's shards.
  const nn::StateDict& saved = state.sharded ? own : masters;
  const fs::path& saved_file = state.sharded ? replica_file : tensors_file;
  nn::StateDict extra = restored_entries("extra", state.extra, part(saved, kExtra), saved_file);
  const nn::StateDict mine = restored_per_replica(state.per_replica, own, replica_file);

  if (state.model) {
    const nn::StateDict model = part(saved, kModel);
    state.model->load_state_dict(model);
    adopt_layouts(state.model->state_dict(), model);
  }
  if (state.optimizer) state.optimizer->load_state_dict(part(saved, kOptimizer));
  apply_host_state(host, state);
  state.extra = std::move(extra);
  // After the model's: a module buffer listed here takes this replica's value, not the master's.
  for (std::size_t i = 0; i < mine.size(); ++i) state.per_replica[i].second.copy_(mine[i].second);
  TraceContext::current().set_rng_states(replica_host.streams);
  if (replica_host.data_loader) state.data_loader->load_state_dict(*replica_host.data_loader);
}

std::optional<int64_t> CheckpointManager::restore_latest(TrainingState& state) {
  const std::vector<int64_t> steps = all_steps();
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    try {
      restore(*step, state);
      return *step;
    } catch (const FileError& e) {
      AXLE_LOG(WARNING, "CheckpointManager: step {} does not restore ({}); trying an older one",
               *step, e.what());
    }
  }
  return std::nullopt;
}

}  // namespace axle
