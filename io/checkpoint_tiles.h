// io: CheckpointManager's steps under SPMD, as torch_xla's distributed checkpoints — each mesh
// device's tiles of the step's values in a file of its own (tiles.<d>.ckpt), read from the
// devices by the process that holds them (no collective) and written by it, and each value put
// together again from its tiles on restore, whatever mesh saved it. The writing and the commit
// are the writer's (io/checkpoint_writer.h: write_tiles, finish_part). CheckpointManager's own
// part, not installed as API.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <vector>

#include "axle/graph/nn/module.h"
#include "axle/io/checkpoint_writer.h"

namespace axle::checkpoint_step {

/// The tiles of `tensors` this process's mesh devices write, read to the host (every read asked
/// before the first is awaited). Each tile is written once, by the devices holding it in turn, so
/// that the mesh's replicas share the writing; a value held whole is device 0's.
/// FileError naming `file` for an undefined tensor.
[[nodiscard]] std::vector<DeviceTiles> read_local_tiles(const nn::StateDict& tensors,
                                                        const std::filesystem::path& file);

/// Whether a step's state.json says its values were saved as tiles.
[[nodiscard]] bool saved_as_tiles(const nlohmann::json& host_state);

/// The values of the step in `dir` saved as tiles, each put together whole on the host from the
/// tiles of every device, in the saved order; each made as read_tensors makes it (restored_tensor:
/// on its target's device, laid out as its target is). FileError naming the file and the key for a
/// tile that does not fit its value, a value without a layout, or a tile missing.
[[nodiscard]] nn::StateDict read_tile_tensors(const std::filesystem::path& dir,
                                              const nn::StateDict& targets,
                                              const nlohmann::json& host_state);

}  // namespace axle::checkpoint_step
