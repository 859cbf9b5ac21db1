// io: consolidating FSDP's sharded checkpoints: the files are put together on the host by
// graph/formats/shard_metadata.h, then moved onto the device.
#include "axle/io/sharded_checkpoint.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/graph/formats/shard_metadata.h"
#include "axle/graph/tensor.h"
#include "axle/io/checkpoint.h"

namespace axle {
namespace {

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

}  // namespace

nn::StateDict consolidate_sharded_model_checkpoints(const std::string& ckpt_prefix,
                                                    const std::string& ckpt_suffix,
                                                    const std::string& save_path, Device device) {
  const std::string pattern = ckpt_prefix + ckpt_suffix;
  std::vector<ShardFile> shards;
  for (const auto& path : matching_files(pattern)) shards.push_back(read_shard_file(path));
  const auto [full, order] = consolidate_shards(shards, pattern);

  // Written from the host copies, without the device: the master alone consolidates, inside
  // spawn too, where axle::save would wait for the other replicas.
  if (!save_path.empty() && std::filesystem::path(save_path).extension() == ".safetensors") {
    save_safetensors(save_path, full);
  } else if (!save_path.empty()) {
    CheckpointWriter out(save_path, order.size());
    for (const std::string& name : order) out.add(name, full.at(name));
    out.commit();
  }
  nn::StateDict state;
  for (const std::string& name : order) {
    const CpuTensor& t = full.at(name);
    state.emplace_back(name, tensor_from_bytes(t.bytes, t.dtype, t.shape, device));
  }
  return state;
}

}  // namespace axle
