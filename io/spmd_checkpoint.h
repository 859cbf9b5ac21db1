// io: distributed checkpoints of SPMD state, as torch_xla's torch.distributed.checkpoint with
// SPMDSavePlanner / SPMDLoadPlanner — each device's shards are written as they are laid out, and
// loading lays each value out as the tensor it is loaded into is, whatever mesh saved it.
#pragma once

#include <filesystem>

#include "axle/graph/nn/module.h"

namespace axle {

/// Writes `state` into directory `dir` (created if missing): one safetensors file per device of
/// the mesh, `shard-<d>-of-<n>.safetensors`, holding the tiles device d is the first to hold
/// (each tile once), with each tensor's global shape and sharding in its metadata. Values not
/// laid out over a mesh are one tile, in device 0's file. Each file is written whole or not at
/// all. Under SPMD in a job of several processes (mpirun), `d` is the device's global ordinal and
/// each process writes the files of its own devices into `dir` (a directory every process sees);
/// every process calls it, and it returns once every file is written.
void save_spmd_checkpoint(const nn::StateDict& state, const std::filesystem::path& dir);

/// Loads `dir`'s checkpoint into `state`'s tensors, in place: each value is put together from
/// its saved tiles (whatever mesh shape saved them) and laid out as the tensor it goes into is
/// (its SPMD sharding, or replicated); in a job of several processes each process reads the
/// files and places its own devices' tiles. Throws FileError naming the directory and the key for a
/// missing directory, a key the checkpoint lacks, a tile missing, or a shape that differs.
void load_spmd_checkpoint(const nn::StateDict& state, const std::filesystem::path& dir);

}  // namespace axle
