// io: axle's checkpoints, as torch_xla's xm.save / xser — named device tensors (a module's or an
// optimizer's state_dict) written to one protobuf-framed file and read back onto a device.
#pragma once

#include <filesystem>

#include "axle/graph/nn/module.h"

namespace axle {

/// Writes `state` to `path` atomically (a temporary file, fsync, rename): the file is the whole
/// new checkpoint or the old one, never half of one. Tensors move to the host one at a time, so
/// a model larger than half of host memory still saves. With `master_only`, only the master
/// ordinal writes (the local master, or with `global_master` the global one; a process running
/// one replica is both). Inside spawn every replica calls it: a pending value is computed by all
/// (a mark_step), and each returns once the file is written. Errors throw FileError naming the
/// file (and the key, for a tensor that cannot be read).
void save(const nn::StateDict& state, const std::filesystem::path& path, bool master_only = true,
          bool global_master = false);

/// Reads a checkpoint written by save onto `device`, one tensor at a time. A missing, truncated
/// or damaged file (bad magic, a checksum that does not match, an unknown dtype) throws
/// FileError naming the file and the key, and returns nothing: a caller never gets part of a
/// checkpoint. Load the result with Module::load_state_dict, which checks names and shapes
/// before it changes anything.
[[nodiscard]] nn::StateDict load(const std::filesystem::path& path, Device device = {});

}  // namespace axle
