// graph/formats: FSDP's sharded checkpoint files on the host. Each replica saves its
// FullyShardedDataParallel's sharded_checkpoint() (actors/parallel/fully_sharded_data_parallel.h)
// as a checkpoint file whose "shard_metadata" tensor holds a ShardMetadata as text; consolidation
// (io/sharded_checkpoint.h) reads every replica's file here and puts the full tensors together,
// with no device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle {

/// Where one original parameter lives in a flat shard.
struct ShardedParameterInfo {
  std::vector<std::string> names;  ///< its names in the unwrapped model (tied ones: each)
  /// Its shape in the unwrapped model.
  std::vector<int64_t> shape;
  int64_t offset = 0;  ///< first element in the unsharded flat parameter
  /// Its number of elements (the product of `shape`).
  int64_t numel = 0;
};

/// One flat parameter: its shard's state_dict name and what it holds.
struct FlatParameterInfo {
  std::string name;  ///< "…flat_param_0" in the wrapper's state_dict
  /// The element type of the flat parameter and its shards.
  DType dtype = DType::kFloat32;
  int64_t padded_numel = 0;          ///< shard numel × world size
  std::vector<int64_t> shard_shape;  ///< the shard's own shape
  bool dim_0 = false;                ///< sharded along dim 0 of its only parameter, not flattened
  /// The original parameters it holds, in order.
  std::vector<ShardedParameterInfo> params;
};

/// What consolidate_sharded_model_checkpoints needs to put the shards together, as torch_xla's
/// get_shard_metadata(): one per replica, saved with its state_dict().
struct ShardMetadata {
  /// Replicas the parameters are sharded over.
  int world_size = 1;
  /// The replica that saved this metadata, in [0, world_size).
  int rank = 0;
  std::vector<FlatParameterInfo> flat_params;  ///< every unit's, nested ones too
  /// A line-based text form, stored in a checkpoint as the I32 tensor "shard_metadata".
  [[nodiscard]] std::string to_text() const;
  /// Parses to_text()'s form; throws std::invalid_argument naming what is wrong.
  [[nodiscard]] static ShardMetadata from_text(const std::string& text);
};

/// One replica's sharded checkpoint file, read whole onto the host.
struct ShardFile {
  /// The file read.
  std::filesystem::path path;
  /// Its "shard_metadata", parsed.
  ShardMetadata metadata;
  std::map<std::string, CpuTensor> tensors;  ///< every tensor but "shard_metadata"
  std::vector<std::string> order;            ///< their names as saved
};

/// Reads the replica's file at `path`. Throws FileError for a missing or damaged checkpoint
/// file, std::invalid_argument naming the file when it has no valid "shard_metadata".
[[nodiscard]] ShardFile read_shard_file(const std::filesystem::path& path);

/// The unwrapped model's full tensors, by name in state_dict order.
struct ConsolidatedState {
  /// The full tensors, by name.
  std::map<std::string, CpuTensor> tensors;
  /// Their names in state_dict order.
  std::vector<std::string> order;
};

/// Puts the replicas' files together, as torch_xla's consolidate_sharded_model_checkpoints: each
/// parameter unflattened from its flat parameter's shards, unpadded and under each of its names,
/// buffers from rank 0 with "_fsdp_wrapped_module." taken out. `pattern` names the files in
/// errors. Throws std::invalid_argument naming the files for shards that do not add up (a rank
/// missing or twice, another world size, a shard of another shape, a parameter outside its
/// flat parameter).
[[nodiscard]] ConsolidatedState consolidate_shards(const std::vector<ShardFile>& shards,
                                                   std::string_view pattern);

}  // namespace axle
