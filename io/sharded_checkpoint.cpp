// io: consolidating FSDP's sharded checkpoints on the host, one replica's file at a time.
#include "io/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "actors/fully_sharded_data_parallel.h"
#include "io/checkpoint.h"
#include "io/formats/checkpoint_codec.h"
#include "io/formats/safetensors.h"

namespace axle {
namespace {

constexpr std::string_view kWrapped = "_fsdp_wrapped_module.";

std::vector<std::filesystem::path> matching_files(const std::string& pattern) {
  const std::filesystem::path full(pattern);
  std::filesystem::path dir = full.parent_path();
  if (dir.empty()) dir = ".";
  const std::string name = full.filename().string();
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (!entry.is_regular_file()) continue;
    if (fnmatch(name.c_str(), entry.path().filename().string().c_str(), 0) == 0) {
      files.push_back(entry.path());
    }
  }
  std::ranges::sort(files);
  return files;
}

std::string strip_wrapper(std::string name) {
  for (std::size_t at; (at = name.find(kWrapped)) != std::string::npos;) {
    name.erase(at, kWrapped.size());
  }
  return name;
}

// One replica's file: its metadata and tensors, on the host.
struct Shard {
  std::filesystem::path path;
  ShardMetadata metadata;
  std::map<std::string, CpuTensor> tensors;
  std::vector<std::string> order;  // names as saved
};

Shard read_shard(const std::filesystem::path& path) {
  Shard shard{.path = path};
  CheckpointReader in(path);
  std::optional<CpuTensor> text;
  while (std::optional<CheckpointEntry> entry = in.next()) {
    if (entry->name == "shard_metadata") {
      text = std::move(entry->tensor);
      continue;
    }
    shard.order.push_back(entry->name);
    shard.tensors.emplace(std::move(entry->name), std::move(entry->tensor));
  }
  if (!text || text->dtype != DType::kI32) {
    throw std::invalid_argument(
        fmt::format("consolidate_sharded_checkpoints: {} has no \"shard_metadata\" (save "
                    "FullyShardedDataParallel::sharded_checkpoint())",
                    path.string()));
  }
  const std::vector<int32_t> chars = text->values<int32_t>();
  try {
    shard.metadata = ShardMetadata::from_text(std::string(chars.begin(), chars.end()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(
        fmt::format("consolidate_sharded_checkpoints: {}: {}", path.string(), e.what()));
  }
  return shard;
}

}  // namespace

nn::StateDict consolidate_sharded_checkpoints(const std::string& ckpt_prefix,
                                              const std::string& ckpt_suffix,
                                              const std::string& save_path, Device device) {
  const std::string pattern = ckpt_prefix + ckpt_suffix;
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("consolidate_sharded_checkpoints: " + what);
  };
  const std::vector<std::filesystem::path> files = matching_files(pattern);
  if (files.empty()) fail(fmt::format("no file matches \"{}\"", pattern));
  std::vector<Shard> shards;
  for (const auto& path : files) shards.push_back(read_shard(path));
  const int world = shards.front().metadata.world_size;
  std::vector<const Shard*> by_rank(static_cast<std::size_t>(world), nullptr);
  for (const Shard& shard : shards) {
    if (shard.metadata.world_size != world) {
      fail(fmt::format("{} is of {} replicas, {} of {}", shard.path.string(),
                       shard.metadata.world_size, shards.front().path.string(), world));
    }
    const Shard*& slot = by_rank[static_cast<std::size_t>(shard.metadata.rank)];
    if (slot) {
      fail(fmt::format("{} and {} are both rank {}", slot->path.string(), shard.path.string(),
                       shard.metadata.rank));
    }
    slot = &shard;
  }
  for (int r = 0; r < world; ++r) {
    if (!by_rank[static_cast<std::size_t>(r)]) {
      fail(fmt::format("no file of rank {} of {} matches \"{}\"", r, world, pattern));
    }
  }

  CpuTensorMap full;
  std::vector<std::string> order;
  std::unordered_set<std::string> flat_names;
  for (const FlatParameterInfo& flat : by_rank[0]->metadata.flat_params) {
    flat_names.insert(flat.name);
    // The shards in rank order are the padded flat value (rows of it, for dim 0).
    std::vector<std::byte> bytes;
    for (const Shard* shard : by_rank) {
      const auto it = shard->tensors.find(flat.name);
      if (it == shard->tensors.end()) {
        fail(fmt::format("{} has no \"{}\"", shard->path.string(), flat.name));
      }
      const std::vector<int64_t> dims(it->second.shape.dims().begin(),
                                      it->second.shape.dims().end());
      if (it->second.dtype != flat.dtype || dims != flat.shard_shape) {
        fail(fmt::format("\"{}\" of {} is not the shard its metadata describes", flat.name,
                         shard->path.string()));
      }
      bytes.insert(bytes.end(), it->second.bytes.begin(), it->second.bytes.end());
    }
    const std::size_t size = dtype_size(flat.dtype);
    if (bytes.size() != static_cast<std::size_t>(flat.padded_numel) * size) {
      fail(fmt::format("the shards of \"{}\" hold {} bytes, not {} elements", flat.name,
                       bytes.size(), flat.padded_numel));
    }
    for (const ShardedParameterInfo& p : flat.params) {
      if (p.offset < 0 || p.numel < 0 || p.offset + p.numel > flat.padded_numel) {
        fail(fmt::format("\"{}\" lies outside \"{}\"", p.names.front(), flat.name));
      }
      CpuTensor t(flat.dtype, Shape(p.shape));
      const auto begin = bytes.begin() + static_cast<std::ptrdiff_t>(p.offset * size);
      t.bytes.assign(begin, begin + static_cast<std::ptrdiff_t>(p.numel * size));
      for (const std::string& name : p.names) {
        order.push_back(name);
        full.emplace(name, t);
      }
    }
  }
  // Buffers, from rank 0.
  for (const std::string& name : by_rank[0]->order) {
    if (flat_names.contains(name)) continue;
    const std::string own = strip_wrapper(name);
    order.push_back(own);
    full.emplace(own, by_rank[0]->tensors.at(name));
  }

  if (!save_path.empty() && std::filesystem::path(save_path).extension() == ".safetensors") {
    save_safetensors(save_path, full);
  }
  nn::StateDict state;
  for (const std::string& name : order) {
    const CpuTensor& t = full.at(name);
    state.emplace_back(name, tensor_from_bytes(t.bytes, t.dtype, t.shape, device));
  }
  if (!save_path.empty() && std::filesystem::path(save_path).extension() != ".safetensors") {
    save(state, save_path, /*master_only=*/false);
  }
  return state;
}

}  // namespace axle
