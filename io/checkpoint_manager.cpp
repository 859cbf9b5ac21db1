// io: a run's checkpoints as one directory per step. The tensors go through the checkpoint codec
// (graph/formats/checkpoint_codec.h), the host state and the random streams as JSON, and the
// commit file, written last, lists every file's size and CRC-32: a step is whole once its commit
// file is there, and a restore checks every file against it before it changes anything.
#include "io/checkpoint_manager.h"

#include <fcntl.h>
#include <fmt/format.h>
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

namespace axle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTensorsFile = "tensors.ckpt";
constexpr const char* kStateFile = "state.json";
// The prefixes that keep the model's, the optimizer's and the caller's tensors apart in one file.
constexpr std::string_view kModel = "model/";
constexpr std::string_view kOptimizer = "optimizer/";
constexpr std::string_view kExtra = "extra/";

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

std::string streams_file(int ordinal) { return fmt::format("rng.{}.json", ordinal); }

// A step's directory name is its number and nothing else.
std::optional<int64_t> step_of(const std::string& name) {
  int64_t step = 0;
  const char* end = name.data() + name.size();
  const auto [at, error] = std::from_chars(name.data(), end, step);
  if (name.empty() || error != std::errc() || at != end || step < 0) return std::nullopt;
  return step;
}

void write_text(const fs::path& file, const std::string& text) {
  AtomicFileWriter out(file);
  out.write(text);
  out.commit();
}

json read_json(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FileError(file, "missing or unreadable");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw FileError(file, fmt::format("not valid JSON: {}", e.what()));
  }
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

nn::StateDict tensors_of(const TrainingState& state) {
  nn::StateDict all;
  const auto add = [&](std::string_view prefix, const nn::StateDict& part) {
    for (const auto& [name, tensor] : part)
      all.emplace_back(fmt::format("{}{}", prefix, name), tensor);
  };
  if (state.model) add(kModel, state.model->state_dict());
  if (state.optimizer) add(kOptimizer, state.optimizer->state_dict());
  add(kExtra, state.extra);
  return all;
}

void write_tensors(const nn::StateDict& tensors, const fs::path& file) {
  CheckpointWriter out(file, tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw FileError(file, fmt::format("key \"{}\" is undefined", name));
    const CpuTensor host = tensor.to_cpu();
    AXLE_METRIC_ADD("CheckpointHostBytes", MetricKind::kBytes,
                    static_cast<double>(host.bytes.size()));
    out.add(name, host);
  }
  out.commit();
}

json host_state(int64_t step, const TrainingState& state) {
  json out{{"step", step}};
  if (state.optimizer) {
    json groups = json::array();
    for (const optim::ParamGroupOptions& group : state.optimizer->param_groups()) {
      groups.push_back(
          {{"lr", group.lr}, {"initial_lr", group.initial_lr ? json(*group.initial_lr) : json()}});
    }
    out["param_groups"] = std::move(groups);
  }
  if (state.scheduler) {
    const optim::LRSchedulerState s = state.scheduler->state_dict();
    out["scheduler"] = {
        {"last_epoch", s.last_epoch}, {"base_lrs", s.base_lrs}, {"last_lr", s.last_lr}};
  }
  return out;
}

json random_streams() {
  json devices = json::array();
  for (const auto& [device, rng] : TraceContext::current().rng_states()) {
    devices.push_back({{"device", device}, {"seed", rng.seed}, {"offset", rng.offset}});
  }
  return {{"ordinal", global_ordinal()}, {"devices", std::move(devices)}};
}

// The saved tensors in the file's order, each on the device of the value it will replace (the
// replica's default device for optimizer state, which may not exist yet).
nn::StateDict read_tensors(const fs::path& file, const nn::StateDict& targets) {
  std::unordered_map<std::string, Device> device_of;
  for (const auto& [name, tensor] : targets) {
    if (tensor.defined()) device_of.emplace(name, tensor.device());
  }
  nn::StateDict out;
  CheckpointReader in(file);
  while (std::optional<CheckpointEntry> entry = in.next()) {
    const auto device = device_of.find(entry->name);
    Tensor t = tensor_from_bytes(entry->tensor.bytes, entry->tensor.dtype, entry->tensor.shape,
                                 device == device_of.end() ? Device{} : device->second);
    (void)t.impl()->data()->wait();  // on the device before the next tensor comes to the host
    out.emplace_back(std::move(entry->name), std::move(t));
  }
  return out;
}

// The entries of `saved` under `prefix`, without it.
nn::StateDict part(const nn::StateDict& saved, std::string_view prefix) {
  nn::StateDict out;
  for (const auto& [name, tensor] : saved) {
    if (name.starts_with(prefix)) out.emplace_back(name.substr(prefix.size()), tensor);
  }
  return out;
}

// A saved state that does not fit the one restored into: the caller's mistake, not damage.
[[noreturn]] void does_not_fit(const fs::path& file, std::string_view what) {
  throw nn::StateDictError(fmt::format("{}: {}", file.string(), what));
}

// The extra tensors in the caller's order, each replaced by its saved value; throws when the
// names differ.
nn::StateDict restored_extra(const nn::StateDict& extra, const nn::StateDict& saved,
                             const fs::path& file) {
  nn::StateDict out;
  for (const auto& [name, tensor] : extra) {
    const Tensor* value = nn::find(saved, name);
    if (!value) does_not_fit(file, fmt::format("has no extra entry \"{}\"", name));
    out.emplace_back(name, *value);
  }
  for (const auto& [name, tensor] : saved) {
    if (!nn::find(extra, name)) {
      does_not_fit(file, fmt::format("has extra entry \"{}\", which the state lacks", name));
    }
  }
  return out;
}

// The host state of a step, read and checked against the state restored into before anything
// changes.
struct HostState {
  std::vector<std::pair<double, std::optional<double>>> group_rates;  // lr, initial_lr
  optim::LRSchedulerState scheduler;
};

HostState read_host_state(const json& saved, const fs::path& file, const TrainingState& state) {
  HostState out;
  try {
    if (state.optimizer) {
      const json& groups = saved.at("param_groups");
      if (groups.size() != state.optimizer->param_groups().size()) {
        does_not_fit(file, fmt::format("holds {} parameter groups for an optimizer of {}",
                                       groups.size(), state.optimizer->param_groups().size()));
      }
      for (const json& group : groups) {
        const json& initial = group.at("initial_lr");
        out.group_rates.emplace_back(
            group.at("lr").get<double>(),
            initial.is_null() ? std::nullopt : std::optional<double>(initial.get<double>()));
      }
    }
    if (state.scheduler) {
      const json& s = saved.at("scheduler");
      out.scheduler = {.last_epoch = s.at("last_epoch").get<int64_t>(),
                       .base_lrs = s.at("base_lrs").get<std::vector<double>>(),
                       .last_lr = s.at("last_lr").get<std::vector<double>>()};
      if (out.scheduler.base_lrs.size() != state.scheduler->base_lrs().size()) {
        does_not_fit(
            file, fmt::format("holds a scheduler of {} groups for one of {}",
                              out.scheduler.base_lrs.size(), state.scheduler->base_lrs().size()));
      }
    }
  } catch (const json::exception& e) {
    does_not_fit(file, fmt::format("does not hold the state asked for: {}", e.what()));
  }
  return out;
}

void apply_host_state(const HostState& saved, TrainingState& state) {
  if (state.optimizer) {
    auto& groups = state.optimizer->param_groups();
    for (std::size_t g = 0; g < groups.size(); ++g) {
      std::tie(groups[g].lr, groups[g].initial_lr) = saved.group_rates[g];
    }
  }
  if (state.scheduler) state.scheduler->load_state_dict(saved.scheduler);
}

std::unordered_map<int, RngState> saved_streams(const fs::path& file) {
  const json saved = read_json(file);
  std::unordered_map<int, RngState> streams;
  try {
    for (const json& device : saved.at("devices")) {
      streams[device.at("device").get<int>()] = {.seed = device.at("seed").get<uint64_t>(),
                                                 .offset = device.at("offset").get<uint64_t>()};
    }
  } catch (const json::exception& e) {
    throw FileError(file, fmt::format("not a random-stream file: {}", e.what()));
  }
  return streams;
}

}  // namespace

CheckpointManager::CheckpointManager(fs::path path, int64_t save_interval, int64_t max_to_keep,
                                     int64_t max_pending_async, bool chkpt_on_preemption)
    : path_(std::move(path)),
      save_interval_(save_interval),
      max_to_keep_(max_to_keep),
      max_pending_async_(max_pending_async),
      chkpt_on_preemption_(chkpt_on_preemption) {
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
  const nn::StateDict tensors = tensors_of(state);
  // Pending values are computed by every replica alike, as at its next mark_step.
  if (std::ranges::any_of(tensors, [](const auto& entry) {
        return entry.second.defined() && entry.second.impl()->pending_ir();
      })) {
    mark_step();
  }
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
  if (replicated) rendezvous("CheckpointManager.save: random streams written");
  master_writes([&] { commit(step, partial, world_size()); });
  if (replicated) rendezvous("CheckpointManager.save: committed");
  return true;
}

void CheckpointManager::commit(int64_t step, const fs::path& partial, int replicas) const {
  write_step_commit(partial, step, replicas);
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
  const nn::StateDict tensors = tensors_of(state);
  if (std::ranges::any_of(tensors, [](const auto& entry) {
        return entry.second.defined() && entry.second.impl()->pending_ir();
      })) {
    mark_step();
  }
  // Every replica's random streams, by ordinal, for the master to write with the rest.
  std::vector<std::string> streams =
      mesh_reduce("CheckpointManager.save_async", random_streams().dump(1),
                  [](const std::vector<std::string>& all) { return all; });
  if (!is_master_ordinal(/*local=*/false)) return true;
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
  HostStep saved{.step = step,
                 .partial = partial,
                 .host_state = host_state(step, state).dump(1),
                 .streams = std::move(streams)};
  uint64_t host_bytes = 0;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    saved.values.emplace_back(tensors[i].first, reads[i].get());
    host_bytes += saved.values.back().second.bytes.size();
  }
  AXLE_METRIC_ADD("CheckpointAsyncHostBytes", MetricKind::kBytes, static_cast<double>(host_bytes));
  in_flight_.push_back(std::async(std::launch::async, [this, saved = std::move(saved)]() mutable {
    write_step(std::move(saved));
  }));
  return true;
}

void CheckpointManager::write_step(HostStep saved) const {
  const fs::path& partial = saved.partial;
  try {
    on_disk(partial, "clear", [&](std::error_code& e) { fs::remove_all(partial, e); });
    on_disk(partial, "create", [&](std::error_code& e) { fs::create_directories(partial, e); });
    CheckpointWriter out(partial / kTensorsFile, saved.values.size());
    for (auto& [name, value] : saved.values) {
      out.add(name, value);
      value = {};  // the host copy goes as soon as it is written
    }
    out.commit();
    write_text(partial / kStateFile, saved.host_state);
    for (std::size_t ordinal = 0; ordinal < saved.streams.size(); ++ordinal) {
      write_text(partial / streams_file(static_cast<int>(ordinal)), saved.streams[ordinal]);
    }
    commit(saved.step, partial, static_cast<int>(saved.streams.size()));
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
  const nn::StateDict saved = read_tensors(tensors_file, tensors_of(state));
  nn::StateDict extra = restored_extra(state.extra, part(saved, kExtra), tensors_file);

  if (state.model) state.model->load_state_dict(part(saved, kModel));
  if (state.optimizer) state.optimizer->load_state_dict(part(saved, kOptimizer));
  apply_host_state(host, state);
  state.extra = std::move(extra);
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
