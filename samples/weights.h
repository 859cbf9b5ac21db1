// samples: what the trainers' --init and --save share — weights read from a .safetensors file
// (PyTorch's, or a trainer's) or axle's checkpoint format, and written the same ways; under FSDP
// every replica's shards first, which the master puts together into the model's file.
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "axle/axle.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/io/checkpoint.h"
#include "axle/io/sharded_checkpoint.h"

namespace axle::samples {

/// A .safetensors file (from PyTorch, or --save), or else axle's checkpoint format.
inline void load_weights(nn::Module& model, const std::string& path, Device device) {
  nn::StateDict state;
  if (std::filesystem::path(path).extension() == ".safetensors") {
    for (const auto& [name, host] : load_safetensors(path)) {
      state.emplace_back(name, tensor_from_bytes(host.bytes, host.dtype, host.shape, device));
    }
  } else {
    state = load(path, device);
  }
  model.load_state_dict(state);
}

/// A .safetensors file (PyTorch loads it), or else axle's checkpoint format.
inline void save_weights(const nn::Module& model, const std::string& path) {
  if (std::filesystem::path(path).extension() != ".safetensors") {
    save(model.state_dict(), path);  // written by the master replica
    return;
  }
  // Under SPMD in a job of several processes, reading a value whose tiles are on other processes
  // is a collective: every process reads, the master writes.
  if (!is_spmd() && !is_master_ordinal(/*local=*/false)) return;
  CpuTensorMap host;
  for (const auto& [name, t] : model.state_dict()) host.emplace(name, t.cpu());
  if (is_master_ordinal(/*local=*/false) && process_index() == 0) save_safetensors(path, host);
}

/// The model FSDP shards, saved whole to `path`: every replica writes its shards beside it (in
/// PATH.shards/), then the master consolidates them into the model's file and removes them.
inline void save_fsdp_weights(const FullyShardedDataParallel& fsdp, const std::string& path) {
  const int world = world_size();
  const std::filesystem::path shards = path + ".shards";
  if (is_master_ordinal(/*local=*/false)) std::filesystem::create_directories(shards);
  rendezvous("save_fsdp_weights: shards directory");
  save(fsdp.sharded_checkpoint(),
       shards / fmt::format("rank-{}-of-{}.ckpt", global_ordinal(), world),
       /*master_only=*/false);
  if (is_master_ordinal(/*local=*/false)) {
    (void)consolidate_sharded_model_checkpoints((shards / "rank-").string(),
                                                fmt::format("*-of-{}.ckpt", world), path);
    std::filesystem::remove_all(shards);
  }
  rendezvous("save_fsdp_weights: consolidated");
}

}  // namespace axle::samples
