// io: CheckpointManager's writer — a step's directory written beside its name and committed
// (commit file, fsyncs, rename, the oldest steps beyond max_to_keep removed), and the actor that
// does it for asynchronous saves: the steps' values, already on the host, written one step at a
// time on a thread of its own, below the steps' threads. CheckpointManager's own part, not
// installed as API.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "axle/engine/actor.h"
#include "axle/graph/formats/step_commit.h"
#include "axle/graph/tensor.h"

namespace axle::checkpoint_step {

/// Runs `action` on a std::error_code and throws FileError naming `path` ("cannot <what>: <the
/// system's reason>") when it sets one.
void on_disk(const std::filesystem::path& path, std::string_view what,
             const std::function<void(std::error_code&)>& action);

/// Values on the host by name, in a file's order.
using HostValues = std::vector<std::pair<std::string, CpuTensor>>;

/// `values` written to `file` (the checkpoint codec), each host copy released once written; the
/// file's size and CRC-32, summed as it was written, so that the commit file need not read it
/// back.
StepFileSummary write_host_tensors(const std::filesystem::path& file, HostValues& values);

/// Under SPMD, the tiles of a step's values that one mesh device writes (io/checkpoint_tiles.h),
/// on the host.
struct DeviceTiles {
  int64_t device = 0;
  HostValues values;
};

/// Writes each device's tiles into its file in `partial` (tiles_file), each host copy released
/// once written; the files' summaries by name.
[[nodiscard]] std::map<std::string, StepFileSummary> write_tiles(
    const std::filesystem::path& partial, std::vector<DeviceTiles>& tiles);

/// Where a manager's steps go: its directory and how many to keep (0: all).
struct StepDirectory {
  std::filesystem::path path;
  int64_t max_to_keep = 0;
};

/// The committed steps under `path`, oldest first (a step without its commit file, or a directory
/// that is not a step, is not one); FileError when the directory cannot be listed.
[[nodiscard]] std::vector<int64_t> committed_steps(const std::filesystem::path& path);

/// Commits step `step` written in `partial`: lists its files (those in `known` as they were
/// written, the others read back), writes the commit file, fsyncs, renames the directory to the
/// step's name (a step saved before is replaced whole) and removes the steps beyond max_to_keep.
/// FileError naming the path and the cause.
void commit_step(const StepDirectory& where, int64_t step, const std::filesystem::path& partial,
                 int replicas, const std::map<std::string, StepFileSummary>& known = {});

/// Under SPMD, where every process writes its part of a step (its devices' tiles): this process's
/// part of step `step` in `partial` is written (`written`: its files' summaries). Leaves a hidden
/// note of it there, and when all `processes` notes are, commits the step with commit_step: once,
/// by the process that writes the last part (the notes tell it every file's summary). FileError
/// naming the path and the cause.
void finish_part(const StepDirectory& where, int64_t step, const std::filesystem::path& partial,
                 int process, int processes, const std::map<std::string, StepFileSummary>& written);

/// A step's values on the host, as the writer writes them.
struct HostStep {
  int64_t step = 0;
  std::filesystem::path partial;     ///< the hidden directory it is written in
  std::string host_state;            ///< state.json
  std::vector<std::string> streams;  ///< each replica's host state (rng.<ordinal>.json)
  HostValues values;                 ///< tensors.ckpt
  /// Each replica's per_replica values, by ordinal (empty without any).
  std::vector<HostValues> per_replica;
  /// Under SPMD: this process's part, its devices' tiles instead of `values` (the first
  /// process's part also holds state.json and the streams), and finish_part commits the step.
  bool as_tiles = false;
  std::vector<DeviceTiles> tiles;
  int process = 0;
  int processes = 1;
};

/// Why a write failed, as a value: the caller throws an error of its own thread from it (an
/// exception object handed between threads would be shared with the actor's thread).
struct WriteFailure {
  std::filesystem::path file;  ///< empty when the failure names no file
  std::string cause;
};

/// Writes a step and commits it; the reply is its failure, if any (the partial directory is then
/// gone, and the earlier steps are as they were).
struct WriteStep {
  using Reply = std::optional<WriteFailure>;
  HostStep step;
};

/// Writes the steps it is sent, in order, one at a time. Its thread runs only when a core is
/// otherwise idle (SCHED_IDLE; nice 10 where that is refused), so that the checksums and the
/// copies into the page cache take what the steps leave of the cores.
class CheckpointWriterActor : public Actor<CheckpointWriterActor, WriteStep> {
 public:
  explicit CheckpointWriterActor(StepDirectory where) : where_(std::move(where)) {}
  void on_start() override;
  std::optional<WriteFailure> handle(WriteStep& message);

 private:
  StepDirectory where_;
};

}  // namespace axle::checkpoint_step
