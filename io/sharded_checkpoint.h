// io: FSDP's sharded checkpoints put back together, as torch_xla's
// consolidate_sharded_model_checkpoints: each replica saves its FullyShardedDataParallel's
// sharded_checkpoint() (actors/parallel/fully_sharded_data_parallel.h) with save(..., master_only =
// false); consolidation reads every replica's file on the host and gives the unwrapped model's
// full state_dict.
#pragma once

#include <string>

#include "axle/graph/device.h"
#include "axle/graph/nn/module.h"

namespace axle {

/// The full state_dict of the unwrapped model from the sharded checkpoints matching
/// `ckpt_prefix + ckpt_suffix` (`*` matches any part of a file name: "/ckpt/rank-" and
/// "*-of-4.ckpt"), one per replica, as torch_xla's consolidate_sharded_model_checkpoints:
/// each parameter unflattened from its flat parameter's shards, unpadded and under each of its
/// names (tied ones too), buffers from rank 0 with the wrapper's "_fsdp_wrapped_module." taken
/// out. Load it with Module::load_state_dict into the model without FSDP. The tensors are put on
/// `device`. With `save_path`, the result is also written there: as safetensors (which
/// PyTorch's safetensors.torch.load_file reads) when it ends in ".safetensors", else with
/// save(). Throws std::invalid_argument naming the files for no match, a file without shard
/// metadata, or shards that do not add up (a rank missing or twice, another world size, a
/// shard of another shape); FileError for a damaged file.
nn::StateDict consolidate_sharded_model_checkpoints(const std::string& ckpt_prefix,
                                                    const std::string& ckpt_suffix = "*.ckpt",
                                                    const std::string& save_path = "",
                                                    Device device = {});

/// Deprecated: the old name of consolidate_sharded_model_checkpoints, which it calls.
[[deprecated("use consolidate_sharded_model_checkpoints, torch_xla's name")]] inline nn::StateDict
consolidate_sharded_checkpoints(const std::string& ckpt_prefix,
                                const std::string& ckpt_suffix = "*.ckpt",
                                const std::string& save_path = "", Device device = {}) {
  return consolidate_sharded_model_checkpoints(ckpt_prefix, ckpt_suffix, save_path, device);
}

}  // namespace axle
