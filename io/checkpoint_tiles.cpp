// io: CheckpointManager's steps saved as tiles under SPMD (io/checkpoint_tiles.h).
#include "axle/io/checkpoint_tiles.h"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "axle/actors/host/lazy_system.h"
#include "axle/engine/metrics.h"
#include "axle/graph/device_data.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/sharding.h"
#include "axle/graph/tensor_runtime.h"
#include "axle/io/checkpoint_step.h"
#include "axle/io/tiled_value.h"

namespace axle::checkpoint_step {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One saved value as state.json's "spmd_tiles" describes it, put together from its tiles.
struct SavedValue {
  std::string name;
  TiledValue value;
};

std::vector<SavedValue> saved_values(const json& host_state, const fs::path& file) {
  std::vector<SavedValue> values;
  for (const json& entry : host_state.at("spmd_tiles")) {
    try {
      Shape shape(entry.at(1).get<std::vector<int64_t>>());
      ShardingSpec sharding = decode_sharding(entry.at(2).get<std::vector<int64_t>>());
      check_sharding(shape, sharding, "CheckpointManager.restore");
      values.push_back({entry.at(0).get<std::string>(), TiledValue(shape, std::move(sharding))});
    } catch (const std::exception& e) {
      throw FileError(file, fmt::format("a damaged tile layout {} ({})", entry.dump(), e.what()));
    }
  }
  return values;
}

// The devices' tile files in `dir` (tiles.<d>.ckpt), by device.
std::map<int64_t, fs::path> tile_files(const fs::path& dir) {
  constexpr std::string_view kPrefix = "tiles.", kSuffix = ".ckpt";
  std::map<int64_t, fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    const std::string_view digits(name.data() + kPrefix.size(),
                                  name.size() - kPrefix.size() - kSuffix.size());
    int64_t device = -1;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) continue;
    files.emplace(device, entry.path());
  }
  return files;
}

}  // namespace

std::vector<DeviceTiles> read_local_tiles(const nn::StateDict& tensors, const fs::path& file) {
  TensorRuntime& runtime = require_tensor_runtime("CheckpointManager");
  const LazySystem& system = LazySystem::get();
  const int64_t devices = system.spmd_device_count();
  const int64_t first = system.first_spmd_device();
  struct Read {
    std::size_t local;  // this process's device, from `first`
    std::string name;
    DType dtype;
    Shape shape;
    Future<std::vector<std::byte>> bytes;
  };
  std::vector<Read> reads;
  std::size_t turn = 0;  // the same count on every process: the tensors come in one order
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw FileError(file, fmt::format("key \"{}\" is undefined", name));
    const IntrusivePtr<DeviceData>& data = tensor.impl()->data();
    const ShardingSpec sharding = data_layout(tensor);
    // Each tile is written once, by one of the devices holding it, in turn: with the mesh's
    // replicas each writes its share rather than the first writing all.
    std::map<std::vector<int64_t>, std::vector<int64_t>> holders;
    for (int64_t d = 0; d < (data->sharded() ? devices : 1); ++d) {
      holders[sharding.tile_of(d)].push_back(d);
    }
    for (const auto& [coordinates, held_by] : holders) {
      const int64_t d = held_by[turn++ % held_by.size()];
      if (d < first || d >= first + system.device_count()) continue;  // another process's
      const IntrusivePtr<DeviceData>& held =
          data->sharded() ? data->shards()[static_cast<std::size_t>(d - data->first_shard())]
                          : data;
      reads.push_back({static_cast<std::size_t>(d - first), name, held->dtype(), held->shape(),
                       runtime.read(held)});
    }
  }
  std::vector<DeviceTiles> tiles(static_cast<std::size_t>(system.device_count()));
  for (std::size_t i = 0; i < tiles.size(); ++i) tiles[i].device = first + static_cast<int64_t>(i);
  for (Read& read : reads) {
    std::vector<std::byte> bytes = read.bytes.get();
    AXLE_METRIC_ADD("CheckpointHostBytes", MetricKind::kBytes, static_cast<double>(bytes.size()));
    tiles[read.local].values.emplace_back(std::move(read.name),
                                          CpuTensor(read.dtype, read.shape, std::move(bytes)));
  }
  return tiles;
}

bool saved_as_tiles(const json& host_state) { return host_state.contains("spmd_tiles"); }

nn::StateDict read_tile_tensors(const fs::path& dir, const nn::StateDict& targets,
                                const json& host_state) {
  std::vector<SavedValue> values = saved_values(host_state, dir / kStateFile);
  std::unordered_map<std::string, SavedValue*> by_name;
  for (SavedValue& saved : values) by_name.emplace(saved.name, &saved);
  for (const auto& [device, file] : tile_files(dir)) {
    CheckpointReader in(file);
    while (std::optional<CheckpointEntry> entry = in.next()) {
      const auto saved = by_name.find(entry->name);
      if (saved == by_name.end()) {
        throw FileError(file, fmt::format("key \"{}\" has no layout in {}", entry->name,
                                          (dir / kStateFile).string()));
      }
      try {
        saved->second->value.place(entry->tensor, device);
      } catch (const std::exception& e) {
        throw FileError(file, fmt::format("key \"{}\": {}", entry->name, e.what()));
      }
    }
  }
  const std::unordered_map<std::string, const Tensor*> target_of = defined_by_name(targets);
  const json layouts = saved_layouts(host_state);
  nn::StateDict out;
  for (auto& [name, value] : values) {
    if (value.placed() != value.tiles()) {
      throw FileError(dir, fmt::format("key \"{}\": {} of its {} tiles were saved", name,
                                       value.placed(), value.tiles()));
    }
    const auto target = target_of.find(name);
    Tensor t = restored_tensor(name, value.host(),
                               target == target_of.end() ? nullptr : target->second, layouts, dir);
    value.release();  // on the device now
    out.emplace_back(name, std::move(t));
  }
  return out;
}

}  // namespace axle::checkpoint_step
