// io: a run's checkpoints as one directory per step. The tensors go through the checkpoint codec
// (graph/formats/checkpoint_codec.h), the host state and the random streams as JSON, and the
// commit file, written last, lists every file's size and CRC-32: a step is whole once its commit
// file is there, and a restore checks every file against it before it changes anything.
#include "io/checkpoint_manager.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <csignal>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "actors/host/api.h"
#include "actors/host/replicas.h"
#include "engine/log.h"
#include "engine/metrics.h"
#include "graph/formats/atomic_file.h"
#include "graph/formats/checkpoint_codec.h"
#include "graph/formats/error.h"
#include "graph/formats/step_commit.h"
#include "graph/trace_context.h"
#include "io/checkpoint_step.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
// The step directory's files (io/checkpoint_step.h).
using checkpoint_step::any_pending;
using checkpoint_step::apply_host_state;
using checkpoint_step::host_bytes_of;
using checkpoint_step::host_state;
using checkpoint_step::host_tensors;
using checkpoint_step::HostState;
using checkpoint_step::kExtra;
using checkpoint_step::kModel;
using checkpoint_step::kOptimizer;
using checkpoint_step::kStateFile;
using checkpoint_step::kTensorsFile;
using checkpoint_step::master_tensors_of;
using checkpoint_step::part;
using checkpoint_step::per_replica_file;
using checkpoint_step::per_replica_layout;
using checkpoint_step::random_streams;
using checkpoint_step::read_host_state;
using checkpoint_step::read_json;
using checkpoint_step::read_replica_tensors;
using checkpoint_step::read_tensors;
using checkpoint_step::replica_tensors_of;
using checkpoint_step::restored_entries;
using checkpoint_step::restored_per_replica;
using checkpoint_step::saved_streams;
using checkpoint_step::streams_file;
using checkpoint_step::write_tensors;
using checkpoint_step::write_text;

// Set by SIGTERM once a manager watches for preemption; read by reached_preemption.
std::atomic<bool> g_preempted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void on_preemption(int) { g_preempted.store(true, std::memory_order_relaxed); }

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

// A step's directory name is its number and nothing else.
std::optional<int64_t> step_of(const std::string& name) {
  int64_t step = 0;
  const char* end = name.data() + name.size();
  const auto [at, error] = std::from_chars(name.data(), end, step);
  if (name.empty() || error != std::errc() || at != end || step < 0) return std::nullopt;
  return step;
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort, as the atomic file writer's
  ::fsync(fd);
  ::close(fd);
}

// Each std::filesystem failure as a FileError naming the path and the system's reason.
template <typename Action>
void on_disk(const fs::path& path, std::string_view what, Action&& action) {
  std::error_code error;
  action(error);
  if (error) throw FileError(path, fmt::format("cannot {}: {}", what, error.message()));
}

}  // namespace

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
  while (!in_flight_.empty()) {
    std::future<void> oldest = std::move(in_flight_.front());
    in_flight_.pop_front();
    oldest.get();  // throws its failure
  }
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
  const bool replicated = world_size() > 1;
  const nn::StateDict tensors = master_tensors_of(state);
  const nn::StateDict own = replica_tensors_of(state);
  // Pending values are computed by every replica alike, as at its next mark_step.
  if (any_pending(tensors) || any_pending(own)) mark_step();
  const bool master = is_master_ordinal(/*local=*/false);
  const fs::path partial = path_ / fmt::format(".{}.partial", step);
  // A save that fails leaves no partial directory behind, and the earlier steps as they were.
  const auto master_writes = [&](auto&& write) {
    if (!master) return;
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
    write_tensors(tensors, partial / kTensorsFile);
    write_text(partial / kStateFile, host_state(step, state).dump(1));
  });
  if (replicated) rendezvous("CheckpointManager.save: state written");
  write_text(partial / streams_file(global_ordinal()), random_streams().dump(1));
  if (!own.empty()) {
    (void)per_replica_layout(own);  // every entry defined
    write_tensors(own, partial / per_replica_file(global_ordinal()));
  }
  if (replicated) rendezvous("CheckpointManager.save: random streams written");
  master_writes([&] { commit(step, partial, world_size()); });
  if (replicated) rendezvous("CheckpointManager.save: committed");
  return true;
}

void CheckpointManager::commit(int64_t step, const fs::path& partial, int replicas,
                               const std::map<std::string, StepFileSummary>& known) const {
  write_step_commit(partial, step, replicas, known);
  sync_directory(partial);

  const fs::path target = path_ / std::to_string(step);
  const fs::path replaced = path_ / fmt::format(".{}.replaced", step);
  const bool exists = fs::exists(target);
  if (exists) {
    on_disk(replaced, "clear", [&](std::error_code& e) { fs::remove_all(replaced, e); });
    on_disk(target, "move aside", [&](std::error_code& e) { fs::rename(target, replaced, e); });
  }
  on_disk(target, "commit", [&](std::error_code& e) { fs::rename(partial, target, e); });
  sync_directory(path_);
  if (exists) fs::remove_all(replaced);

  if (max_to_keep_ <= 0) return;
  const std::vector<int64_t> steps = all_steps();
  for (std::size_t i = 0; i + max_to_keep_ < steps.size(); ++i) {
    const fs::path old = path_ / std::to_string(steps[i]);
    on_disk(old, "remove", [&](std::error_code& e) { fs::remove_all(old, e); });
  }
}

bool CheckpointManager::save_async(int64_t step, const TrainingState& state, bool force) {
  if (!force && !should_save(step)) return false;
  if (step < 0) {
    throw std::invalid_argument(fmt::format("CheckpointManager.save_async: step {} < 0", step));
  }
  const nn::StateDict tensors = master_tensors_of(state);
  const nn::StateDict own = replica_tensors_of(state);
  if (any_pending(tensors) || any_pending(own)) mark_step();
  // A step at a preemption is the run's last: it is saved even when the writers are busy.
  const bool may_skip =
      when_busy_ == WhenBusy::kSkip && !(chkpt_on_preemption_ && reached_preemption(step));
  const bool master = is_master_ordinal(/*local=*/false);
  const auto writing = [&] {
    return std::ranges::count_if(in_flight_, [](const std::future<void>& save) {
      return save.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    });
  };
  // Every replica's random streams and per_replica layout, by ordinal, and whether the master's
  // writers are all busy: one meeting decides alike on every replica.
  json mine{{"streams", random_streams()}, {"layout", per_replica_layout(own)}};
  if (master && may_skip) mine["writers_busy"] = writing() >= max_pending_async_;
  const auto gathered = [](const std::vector<std::string>& values) { return values; };
  std::vector<json> replicas;
  for (const std::string& text :
       mesh_reduce("CheckpointManager.save_async", mine.dump(), gathered)) {
    replicas.push_back(json::parse(text));
  }
  if (replicas.front().value("writers_busy", false)) {
    AXLE_COUNTER_INC("CheckpointAsyncSkipped", 1);
    return false;
  }
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
  std::vector<std::string> per_replica_bytes;
  if (!layout.empty()) {
    per_replica_bytes =
        mesh_reduce("CheckpointManager.save_async: per_replica", host_bytes_of(own), gathered);
  }
  if (!master) return true;
  while (static_cast<int64_t>(in_flight_.size()) >= max_pending_async_) {
    std::future<void> oldest = std::move(in_flight_.front());
    in_flight_.pop_front();
    oldest.get();
  }
  const fs::path partial = path_ / fmt::format(".{}.partial", step);
  // The values as they stand after this step, on the host before the loop goes on: a read still
  // in flight at the next mark_step would keep that step from donating its buffer, and so give
  // this replica another graph than the others'. Only the disk is left to the writer.
  std::vector<Future<CpuTensor>> reads;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw FileError(partial / kTensorsFile, fmt::format("key \"{}\" is undefined", name));
    }
    reads.push_back(tensor.to_cpu_async());  // every read asked before the first is awaited
  }
  HostStep saved{.step = step, .partial = partial, .host_state = host_state(step, state).dump(1)};
  for (const json& replica : replicas) saved.streams.push_back(replica.at("streams").dump(1));
  for (const std::string& bytes : per_replica_bytes) {
    saved.per_replica.push_back(host_tensors(layout, bytes));
  }
  uint64_t host_bytes = 0;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    saved.values.emplace_back(tensors[i].first, reads[i].get());
    host_bytes += saved.values.back().second.bytes.size();
  }
  for (const std::string& bytes : per_replica_bytes) host_bytes += bytes.size();
  AXLE_METRIC_ADD("CheckpointAsyncHostBytes", MetricKind::kBytes, static_cast<double>(host_bytes));
  in_flight_.push_back(std::async(std::launch::async, [this, saved = std::move(saved)]() mutable {
    write_step(std::move(saved));
  }));
  return true;
}

void CheckpointManager::write_step(HostStep saved) const {
  // Below the steps' threads: the checksums and copies into the page cache take what the steps
  // leave of the cores, and a tenth of them under contention (nice 10), rather than half.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  const fs::path& partial = saved.partial;
  try {
    on_disk(partial, "clear", [&](std::error_code& e) { fs::remove_all(partial, e); });
    on_disk(partial, "create", [&](std::error_code& e) { fs::create_directories(partial, e); });
    // The tensor files' sizes and CRC-32s, summed as they are written, so that the commit file
    // need not read them back.
    std::map<std::string, StepFileSummary> known;
    const auto write = [&](const std::string& file, auto& values) {
      CheckpointWriter out(partial / file, values.size());
      for (auto& [name, value] : values) {
        out.add(name, value);
        value = {};  // the host copy goes as soon as it is written
      }
      out.commit();
      known[file] = {.bytes = out.bytes_written(), .crc32 = out.file_crc32()};
    };
    write(kTensorsFile, saved.values);
    write_text(partial / kStateFile, saved.host_state);
    for (std::size_t ordinal = 0; ordinal < saved.streams.size(); ++ordinal) {
      write_text(partial / streams_file(static_cast<int>(ordinal)), saved.streams[ordinal]);
    }
    for (std::size_t ordinal = 0; ordinal < saved.per_replica.size(); ++ordinal) {
      write(per_replica_file(static_cast<int>(ordinal)), saved.per_replica[ordinal]);
    }
    commit(saved.step, partial, static_cast<int>(saved.streams.size()), known);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    throw;
  }
}

std::vector<int64_t> CheckpointManager::all_steps() const {
  std::vector<int64_t> steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(path_, error)) {
    const std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory() && fs::exists(entry.path() / kStepCommitFile)) {
      steps.push_back(*step);
    }
  }
  if (error) throw FileError(path_, fmt::format("cannot list the steps: {}", error.message()));
  std::ranges::sort(steps);
  return steps;
}

void CheckpointManager::restore(int64_t step, TrainingState& state) {
  const fs::path dir = path_ / std::to_string(step);
  check_step_commit(dir);
  // Everything is read and checked before anything changes.
  const HostState host = read_host_state(read_json(dir / kStateFile), dir / kStateFile, state);
  const std::unordered_map<int, RngState> streams =
      saved_streams(dir / streams_file(global_ordinal()));
  const fs::path tensors_file = dir / kTensorsFile;
  const fs::path replica_file = dir / per_replica_file(global_ordinal());
  const nn::StateDict masters = read_tensors(tensors_file, master_tensors_of(state));
  const nn::StateDict own = read_replica_tensors(replica_tensors_of(state), replica_file);
  // The model, the optimizer and the extra tensors: the master's, or this replica's shards.
  const nn::StateDict& saved = state.sharded ? own : masters;
  const fs::path& saved_file = state.sharded ? replica_file : tensors_file;
  nn::StateDict extra = restored_entries("extra", state.extra, part(saved, kExtra), saved_file);
  const nn::StateDict mine = restored_per_replica(state.per_replica, own, replica_file);

  if (state.model) state.model->load_state_dict(part(saved, kModel));
  if (state.optimizer) state.optimizer->load_state_dict(part(saved, kOptimizer));
  apply_host_state(host, state);
  state.extra = std::move(extra);
  // After the model's: a module buffer listed here takes this replica's value, not the master's.
  for (std::size_t i = 0; i < mine.size(); ++i) state.per_replica[i].second.copy_(mine[i].second);
  TraceContext::current().set_rng_states(streams);
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
