// io: distributed checkpoints of SPMD state (see spmd_checkpoint.h).
#include "axle/io/spmd_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replicas.h"
#include "axle/graph/autograd.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/graph/sharding.h"
#include "axle/graph/tensor_runtime.h"
#include "axle/io/tiled_value.h"

namespace axle {
namespace {

// A tensor's metadata entry: its global dims, then its sharding's ints ("4,8|2,2,1,0,0,1,2,3").
std::string describe(const Shape& shape, const ShardingSpec& sharding) {
  const std::span<const int64_t> dims = shape.dims();
  return fmt::format("{}|{}", fmt::join(dims, ","), fmt::join(encode_sharding(sharding), ","));
}

std::vector<int64_t> ints_of(const std::string& text) {
  std::vector<int64_t> ints;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) ints.push_back(std::stoll(item));
  }
  return ints;
}

struct Saved {
  Shape shape;
  ShardingSpec sharding;
};

Saved parse(const std::filesystem::path& file, const std::string& key, const std::string& text) {
  const auto bar = text.find('|');
  try {
    if (bar == std::string::npos) throw std::invalid_argument("no '|'");
    const std::vector<int64_t> dims = ints_of(text.substr(0, bar));
    Saved saved{Shape(std::span<const int64_t>(dims)),
                decode_sharding(ints_of(text.substr(bar + 1)))};
    check_sharding(saved.shape, saved.sharding, "load_spmd_checkpoint");
    return saved;
  } catch (const std::exception& e) {
    throw FileError(file, fmt::format("key {}: a damaged layout '{}' ({})", key, text, e.what()));
  }
}

}  // namespace

void save_spmd_checkpoint(const nn::StateDict& state, const std::filesystem::path& dir) {
  TensorRuntime& runtime = require_tensor_runtime("save_spmd_checkpoint");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw FileError(dir, fmt::format("cannot create the directory: {}", error.message()));
  // Every value's data first: a pending value is computed once, for all of them.
  std::vector<Tensor> pending;
  for (const auto& [name, t] : state) {
    if (t.impl()->pending_ir()) pending.push_back(t);
  }
  if (!pending.empty())
    runtime.sync(pending, SyncReason::kValueAccess, std::source_location::current());
  // The mesh's devices, and the ones this process holds (under SPMD in a job of several
  // processes, each writes the files of its own devices).
  LazySystem& system = LazySystem::get();
  std::size_t devices = 1;
  for (const auto& [name, t] : state) {
    devices =
        std::max(devices, t.impl()->data()->sharded() ? t.impl()->data()->shards().size() : 1);
  }
  std::size_t first = 0;
  std::size_t local = devices;
  if (system.spmd()) {
    devices = static_cast<std::size_t>(system.spmd_device_count());
    first = static_cast<std::size_t>(system.first_spmd_device());
    local = static_cast<std::size_t>(system.device_count());
  }
  std::vector<CpuTensorMap> tiles(devices);
  std::vector<SafetensorsMetadata> layouts(devices);
  for (const auto& [name, t] : state) {
    const IntrusivePtr<DeviceData>& data = t.impl()->data();
    const ShardingSpec sharding = data->sharded() && data->sharding() >= 0
                                      ? interned_sharding(data->sharding())
                                      : ShardingSpec::replicated();
    // Each tile goes to the file of the first device holding it.
    std::set<std::vector<int64_t>> written;
    const std::size_t holders = data->sharded() ? devices : 1;
    for (std::size_t d = 0; d < holders; ++d) {
      if (!written.insert(sharding.tile_of(static_cast<int64_t>(d))).second) continue;
      if (d < first || d >= first + local) continue;  // another process's
      const IntrusivePtr<DeviceData> shard = data->sharded() ? data->shards()[d - first] : data;
      tiles[d].emplace(name, CpuTensor(shard->dtype(), shard->shape(), runtime.read(shard).get()));
      layouts[d].emplace(name, describe(data->shape(), sharding));
    }
  }
  for (std::size_t d = first; d < first + local && d < devices; ++d) {
    save_safetensors(dir / fmt::format("shard-{}-of-{}.safetensors", d, devices), tiles[d],
                     layouts[d]);
  }
  // Loading needs every process's files: the save ends when all are written.
  if (system.spmd() && process_count() > 1) (void)rendezvous("save_spmd_checkpoint");
}

void load_spmd_checkpoint(const nn::StateDict& state, const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) throw FileError(dir, "no such checkpoint directory");
  // The files of one save: shard-<d>-of-<n>.
  const std::regex pattern(R"(shard-(\d+)-of-(\d+)\.safetensors)");
  std::map<int64_t, std::filesystem::path> files;
  int64_t count = -1;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, pattern)) continue;
    const int64_t of = std::stoll(match[2]);
    if (count >= 0 && of != count) {
      throw FileError(dir,
                      fmt::format("files of saves over {} and {} devices are mixed", count, of));
    }
    count = of;
    files.emplace(std::stoll(match[1]), entry.path());
  }
  if (files.empty()) throw FileError(dir, "no shard-<d>-of-<n>.safetensors files");
  for (int64_t d = 0; d < count; ++d) {
    if (!files.contains(d)) {
      throw FileError(dir, fmt::format("shard-{}-of-{}.safetensors is missing", d, count));
    }
  }
  // Each value's tiles, put together on the host.
  std::map<std::string, TiledValue> values;
  for (const auto& [device, file] : files) {
    const SafetensorsMetadata layouts = load_safetensors_metadata(file);
    CpuTensorMap tiles = load_safetensors(file);
    for (auto& [name, tile] : tiles) {
      const auto layout = layouts.find(name);
      if (layout == layouts.end()) throw FileError(file, fmt::format("key {} has no layout", name));
      auto it = values.find(name);
      if (it == values.end()) {
        Saved saved = parse(file, name, layout->second);
        it = values.emplace(name, TiledValue(saved.shape, std::move(saved.sharding))).first;
      }
      try {
        it->second.place(tile, device);
      } catch (const std::exception& e) {
        throw FileError(file, fmt::format("key {}: {}", name, e.what()));
      }
    }
  }
  const NoGradGuard no_grad;
  for (const auto& [name, t] : state) {
    const auto it = values.find(name);
    if (it == values.end()) throw FileError(dir, fmt::format("the checkpoint has no key {}", name));
    const TiledValue& value = it->second;
    if (value.placed() != value.tiles()) {
      throw FileError(dir, fmt::format("key {}: {} of its {} tiles were saved", name,
                                       value.placed(), value.tiles()));
    }
    if (!(value.shape() == t.shape())) {
      throw FileError(dir, fmt::format("key {}: the checkpoint holds {}, the tensor is {}", name,
                                       value.shape().to_string(), t.shape().to_string()));
    }
    const CpuTensor& host = value.host();
    const Tensor loaded = tensor_from_bytes_sharded(host.bytes, host.dtype, host.shape, t.device(),
                                                    t.impl()->sharding());
    t.copy_(loaded);
  }
}

}  // namespace axle
