// io: the files of one step's directory (io/checkpoint_step.h).
#include "axle/io/checkpoint_step.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replicas.h"
#include "axle/engine/metrics.h"
#include "axle/graph/device_data.h"
#include "axle/graph/formats/atomic_file.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/sharding.h"

namespace axle::checkpoint_step {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A saved state that does not fit the one restored into: the caller's mistake, not damage.
[[noreturn]] void does_not_fit(const fs::path& file, std::string_view what) {
  throw nn::StateDictError(fmt::format("{}: {}", file.string(), what));
}

}  // namespace

std::string streams_file(int ordinal) { return fmt::format("rng.{}.json", ordinal); }
std::string per_replica_file(int ordinal) { return fmt::format("replica.{}.ckpt", ordinal); }
std::string tiles_file(int64_t device) { return fmt::format("tiles.{}.ckpt", device); }

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
    const CpuTensor host = tensor.cpu();
    AXLE_METRIC_ADD("CheckpointHostBytes", MetricKind::kBytes,
                    static_cast<double>(host.bytes.size()));
    out.add(name, host);
  }
  out.commit();
}

// Each per_replica entry's name, dtype and shape, which every replica must agree on.
json per_replica_layout(const nn::StateDict& per_replica) {
  json out = json::array();
  for (const auto& [name, tensor] : per_replica) {
    if (!tensor.defined()) {
      throw std::invalid_argument(fmt::format(
          "CheckpointManager: \"{}\", a tensor of the replica's own, is undefined", name));
    }
    const std::span<const int64_t> dims = tensor.shape().dims();
    out.push_back(
        {name, dtype_name(tensor.dtype()), std::vector<int64_t>(dims.begin(), dims.end())});
  }
  return out;
}

nn::StateDict master_tensors_of(const TrainingState& state) {
  return state.sharded ? nn::StateDict{} : tensors_of(state);
}

nn::StateDict replica_tensors_of(const TrainingState& state) {
  nn::StateDict all = state.sharded ? tensors_of(state) : nn::StateDict{};
  for (const auto& [name, tensor] : state.per_replica) {
    all.emplace_back(fmt::format("{}{}", kPerReplica, name), tensor);
  }
  return all;
}

bool any_pending(const nn::StateDict& tensors) {
  return std::ranges::any_of(tensors, [](const auto& entry) {
    return entry.second.defined() && entry.second.impl()->pending_ir();
  });
}

// The per_replica values on the host, one after another, as they go to the master.
std::string host_bytes_of(const nn::StateDict& per_replica) {
  std::vector<Future<CpuTensor>> reads;
  for (const auto& [name, tensor] : per_replica) reads.push_back(tensor.to_cpu_async());
  std::string bytes;
  for (Future<CpuTensor>& read : reads) {
    const CpuTensor host = read.get();
    bytes.append(reinterpret_cast<const char*>(host.bytes.data()), host.bytes.size());
  }
  return bytes;
}

// A replica's per_replica values cut out of `bytes` by the layout every replica agreed on.
std::vector<std::pair<std::string, CpuTensor>> host_tensors(const json& layout,
                                                            const std::string& bytes) {
  std::vector<std::pair<std::string, CpuTensor>> out;
  std::size_t at = 0;
  for (const json& entry : layout) {
    const std::string name = entry.at(0).get<std::string>();
    DType dtype = DType::kFloat32;
    for (int d = 0; d < kNumDTypes; ++d) {
      if (dtype_name(static_cast<DType>(d)) == entry.at(1).get<std::string>()) {
        dtype = static_cast<DType>(d);
      }
    }
    const Shape shape(entry.at(2).get<std::vector<int64_t>>());
    const std::size_t size = dtype_size(dtype) * static_cast<std::size_t>(shape.numel());
    if (at + size > bytes.size()) {
      throw std::logic_error(fmt::format("CheckpointManager: a replica sent {} bytes for {}",
                                         bytes.size(), layout.dump()));
    }
    const auto* first = reinterpret_cast<const std::byte*>(bytes.data()) + at;
    out.emplace_back(name, CpuTensor(dtype, shape, std::vector<std::byte>(first, first + size)));
    at += size;
  }
  return out;
}

json host_state(int64_t step, const TrainingState& state) {
  json out{{"step", step}, {"sharded", state.sharded}};
  if (LazySystem::get().spmd()) {
    const nn::StateDict tensors = tensors_of(state);
    out["spmd_layouts"] = spmd_layouts(tensors);
    out["spmd_tiles"] = tile_layouts(tensors);
  }
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

json replica_host_state(const TrainingState& state) {
  json devices = json::array();
  for (const auto& [device, rng] : TraceContext::current().rng_states()) {
    devices.push_back({{"device", device}, {"seed", rng.seed}, {"offset", rng.offset}});
  }
  json out{{"ordinal", global_ordinal()}, {"devices", std::move(devices)}};
  if (state.data_loader) {
    const DataLoaderState at = state.data_loader->state_dict();
    out["data_loader"] = {
        {"epoch", at.epoch},     {"batch", at.batch},           {"batches", at.batches},
        {"samples", at.samples}, {"batch_size", at.batch_size}, {"shuffle", at.shuffle},
        {"seed", at.seed}};
  }
  return out;
}

json spmd_layouts(const nn::StateDict& tensors) {
  json layouts = json::object();
  for (const auto& [name, tensor] : tensors) {
    // After its step a value's sharding is the layout its data came out in.
    if (tensor.defined() && tensor.impl()->sharding() >= 0) {
      layouts[name] = encode_sharding(interned_sharding(tensor.impl()->sharding()));
    }
  }
  return layouts;
}

ShardingSpec data_layout(const Tensor& tensor) {
  const IntrusivePtr<DeviceData>& data = tensor.impl()->data();
  return data && data->sharded() && data->sharding() >= 0 ? interned_sharding(data->sharding())
                                                          : ShardingSpec::replicated();
}

json tile_layouts(const nn::StateDict& tensors) {
  json out = json::array();
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) continue;  // named by the save that reads it
    const std::span<const int64_t> dims = tensor.shape().dims();
    out.push_back({name, std::vector<int64_t>(dims.begin(), dims.end()),
                   encode_sharding(data_layout(tensor))});
  }
  return out;
}

json saved_layouts(const json& host_state) {
  return host_state.value("spmd_layouts", json::object());
}

namespace {

// How a restored value is laid out over the mesh: as the tensor it replaces, or, for one not
// created yet, as it was saved when the saving mesh had as many devices as this one (-1:
// replicated, the compiler lays it out from its first use on).
int64_t restored_sharding(const std::string& name, const Tensor* target, const json& layouts,
                          const Shape& shape, const fs::path& file) {
  if (target && target->impl()->sharding() >= 0) return target->impl()->sharding();
  const auto saved = layouts.find(name);
  if (saved == layouts.end()) return -1;
  ShardingSpec sharding;
  try {
    sharding = decode_sharding(saved->get<std::vector<int64_t>>());
    check_sharding(shape, sharding, "CheckpointManager.restore");
  } catch (const std::exception& e) {
    throw FileError(file, fmt::format("key \"{}\": a damaged layout ({})", name, e.what()));
  }
  const auto devices = static_cast<std::size_t>(LazySystem::get().spmd_device_count());
  return sharding.devices.size() == devices ? intern_sharding(sharding) : -1;
}

}  // namespace

Tensor restored_tensor(const std::string& name, const CpuTensor& saved, const Tensor* target,
                       const json& layouts, const fs::path& file) {
  const Device device = target ? target->device() : Device{};
  Tensor t =
      LazySystem::get().spmd()
          ? tensor_from_bytes_sharded(saved.bytes, saved.dtype, saved.shape, device,
                                      restored_sharding(name, target, layouts, saved.shape, file))
          : tensor_from_bytes(saved.bytes, saved.dtype, saved.shape, device);
  (void)t.impl()->data()->wait();  // on the device before the next tensor comes to the host
  return t;
}

std::unordered_map<std::string, const Tensor*> defined_by_name(const nn::StateDict& targets) {
  std::unordered_map<std::string, const Tensor*> target_of;
  for (const auto& [name, tensor] : targets) {
    if (tensor.defined()) target_of.emplace(name, &tensor);
  }
  return target_of;
}

// The saved tensors in the file's order, each on the device of the value it will replace (the
// replica's default device for optimizer state, which may not exist yet).
nn::StateDict read_tensors(const fs::path& file, const nn::StateDict& targets,
                           const json& layouts) {
  const std::unordered_map<std::string, const Tensor*> target_of = defined_by_name(targets);
  nn::StateDict out;
  CheckpointReader in(file);
  while (std::optional<CheckpointEntry> entry = in.next()) {
    const auto found = target_of.find(entry->name);
    Tensor t = restored_tensor(entry->name, entry->tensor,
                               found == target_of.end() ? nullptr : found->second, layouts, file);
    out.emplace_back(std::move(entry->name), std::move(t));
  }
  return out;
}

void adopt_layouts(const nn::StateDict& targets, const nn::StateDict& restored) {
  if (!LazySystem::get().spmd()) return;
  std::unordered_map<std::string_view, const Tensor*> by_name;
  for (const auto& [name, value] : restored) by_name.emplace(name, &value);
  for (const auto& [name, target] : targets) {
    const auto value = by_name.find(name);
    if (value == by_name.end() || !target.defined() || target.impl()->sharding() >= 0) continue;
    const int64_t layout = value->second->impl()->sharding();
    if (layout >= 0) target.impl()->set_sharding(layout);
  }
}

// The entries of `saved` under `prefix`, without it.
nn::StateDict part(const nn::StateDict& saved, std::string_view prefix) {
  nn::StateDict out;
  for (const auto& [name, tensor] : saved) {
    if (name.starts_with(prefix)) out.emplace_back(name.substr(prefix.size()), tensor);
  }
  return out;
}

// The caller's tensors of one kind ("extra", "per_replica") in its order, each replaced by its
// saved value; throws when the names differ.
nn::StateDict restored_entries(std::string_view kind, const nn::StateDict& mine,
                               const nn::StateDict& saved, const fs::path& file) {
  nn::StateDict out;
  for (const auto& [name, tensor] : mine) {
    const Tensor* value = nn::find(saved, name);
    if (!value) does_not_fit(file, fmt::format("has no {} entry \"{}\"", kind, name));
    out.emplace_back(name, *value);
  }
  for (const auto& [name, tensor] : saved) {
    if (!nn::find(mine, name)) {
      does_not_fit(file, fmt::format("has {} entry \"{}\", which the state lacks", kind, name));
    }
  }
  return out;
}

// Each per_replica value of the caller's, in its order, replaced by its saved value; throws when
// the names, a shape or a dtype differ.
nn::StateDict read_replica_tensors(const nn::StateDict& targets, const fs::path& file) {
  const bool saved = fs::exists(file);
  if (targets.empty()) {
    if (saved) {
      does_not_fit(file,
                   "holds this replica's own tensors (per_replica, or a sharded model), which the "
                   "state lacks");
    }
    return {};
  }
  if (!saved) {
    does_not_fit(file,
                 "is missing: the step holds no tensors of this replica's own (per_replica, or a "
                 "sharded model), or was saved by fewer replicas");
  }
  return read_tensors(file, targets, json::object());
}

nn::StateDict restored_per_replica(const nn::StateDict& per_replica, const nn::StateDict& saved,
                                   const fs::path& file) {
  nn::StateDict out = restored_entries("per_replica", per_replica, part(saved, kPerReplica), file);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Tensor& target = per_replica[i].second;
    const Tensor& value = out[i].second;
    if (target.shape() != value.shape() || target.dtype() != value.dtype()) {
      does_not_fit(file, fmt::format("holds \"{}\" as {} {}, for a tensor of {} {}", out[i].first,
                                     dtype_name(value.dtype()), value.shape().to_string(),
                                     dtype_name(target.dtype()), target.shape().to_string()));
    }
  }
  return out;
}

HostState read_host_state(const json& saved, const fs::path& file, const TrainingState& state) {
  HostState out;
  if (saved.value("sharded", false) != state.sharded) {
    does_not_fit(file, state.sharded
                           ? "holds the master's model, for a sharded state"
                           : "holds each replica's shards, for a state that is not sharded");
  }
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

ReplicaHostState read_replica_host_state(const fs::path& file, const TrainingState& state) {
  const json saved = read_json(file);
  ReplicaHostState out;
  try {
    for (const json& device : saved.at("devices")) {
      out.streams[device.at("device").get<int>()] = {.seed = device.at("seed").get<uint64_t>(),
                                                     .offset = device.at("offset").get<uint64_t>()};
    }
    if (state.data_loader) {
      if (!saved.contains("data_loader")) does_not_fit(file, "holds no data loader position");
      const json& at = saved.at("data_loader");
      out.data_loader = DataLoaderState{.epoch = at.at("epoch").get<int64_t>(),
                                        .batch = at.at("batch").get<int64_t>(),
                                        .batches = at.at("batches").get<int64_t>(),
                                        .samples = at.at("samples").get<int64_t>(),
                                        .batch_size = at.at("batch_size").get<int64_t>(),
                                        .shuffle = at.at("shuffle").get<bool>(),
                                        .seed = at.at("seed").get<uint64_t>()};
    }
  } catch (const json::exception& e) {
    throw FileError(file, fmt::format("not a random-stream file: {}", e.what()));
  }
  if (out.data_loader) {
    const std::string why = state.data_loader->state_mismatch(*out.data_loader);
    if (!why.empty())
      does_not_fit(file, "holds a data loader position that does not apply: " + why);
  }
  return out;
}

}  // namespace axle::checkpoint_step
