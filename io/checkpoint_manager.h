// io: CheckpointManager, as torch_xla's (torch_xla.experimental.distributed_checkpoint): a run's
// state saved every `save_interval` steps into a directory of its own per step, the newest
// `max_to_keep` kept, and the newest good one restored after the run was killed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "axle/io/training_state.h"

namespace axle {

/// Saves a run's state every `save_interval` steps and restores it, as torch_xla's
/// CheckpointManager. Step s goes to `path/s/` (the tensors, the host state, every replica's
/// random streams, and last a commit file with every file's size and CRC-32): it is written in
/// a hidden directory beside, fsynced and renamed, so a crash at any moment leaves the earlier
/// steps as they were and no half-written step under its name. Inside spawn each replica makes a
/// manager of its own over the same path and calls save() and restore() alike; the master
/// writes, each replica adds its random streams, and all return once the step is committed.
/// Under SPMD (use_spmd()) every process of the job makes a manager and calls alike; the step is
/// a distributed checkpoint: each mesh device's tiles in a file of their own, each tile written
/// once, each process reading and writing its own devices' (io/checkpoint_tiles.h), and the step
/// committed by the process that finishes its part last. It records each value's shape and layout
/// over the mesh; a restore puts each value together from its tiles (whatever mesh, and however
/// many processes, saved it) and lays it out as the tensor it replaces is (the optimizer's state,
/// which a fresh optimizer lacks, as it was saved when the mesh has as many devices, else
/// replicated), so a parameter marked on another mesh takes that layout.
/// Errors throw FileError naming the file and the cause.
class CheckpointManager {
 public:
  /// What save_async does while `max_pending_async` saves are still being written: wait for the
  /// oldest (torch_xla's behaviour), or skip this step's save and go on.
  enum class WhenBusy {
    kWait,  ///< wait for the oldest save in flight
    kSkip   ///< skip this step's save
  };

  /// Manages the steps under `path` (created if missing). With `max_to_keep` > 0, a save
  /// removes the oldest steps beyond that many; otherwise every step is kept. With
  /// `chkpt_on_preemption`, SIGTERM (what schedulers and mpirun send first) no longer ends the
  /// process: it is a preemption, which reached_preemption reports and should_save saves at.
  /// Throws std::invalid_argument for `save_interval` < 1.
  /// At most `max_pending_async` asynchronous saves are in flight: beyond that many, save_async
  /// waits for the oldest, or with WhenBusy::kSkip saves nothing.
  CheckpointManager(std::filesystem::path path, int64_t save_interval, int64_t max_to_keep = 0,
                    int64_t max_pending_async = 1, bool chkpt_on_preemption = true,
                    WhenBusy when_busy = WhenBusy::kWait);
  /// Waits for the saves in flight (join()), logging a failure instead of throwing it.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  /// Whether step `step` is one to save: a multiple of save_interval, or, with
  /// chkpt_on_preemption, the step at which a preemption was reached (then a collective, as
  /// reached_preemption).
  [[nodiscard]] bool should_save(int64_t step);
  /// Whether the job was preempted (a process of it got SIGTERM) before step `step`, the same
  /// answer on every replica of every process: a collective that every replica calls at the same
  /// step (asked twice for one step, it meets once). The loop then saves that step and ends, so
  /// that all stop at one step.
  [[nodiscard]] bool reached_preemption(int64_t step);
  /// Saves `state` as step `step` when should_save(step) or `force`; returns whether it did. A
  /// step saved before is replaced whole. Waits for the asynchronous saves in flight first.
  bool save(int64_t step, const TrainingState& state, bool force = false);
  /// As save, but the loop goes on while the step is written: the master copies the step's
  /// values to the host as they leave the devices (after the step's mark_step, which this calls
  /// for a pending value), each replica's random streams and data loader position go to it, and
  /// the master sends the step to its writer actor, which writes the steps in order on a thread
  /// of its own. Neither this call nor the next mark_step waits for the disk; the master waits
  /// for its step's device-to-host copies. Under SPMD every process does so with its devices'
  /// tiles, to a writer of its own (a failure is then thrown by that process's next save,
  /// save_async or join; its step is never committed). The writer's thread runs when a core is
  /// otherwise idle (SCHED_IDLE), so that it takes what the steps leave of the cores. Host memory:
  /// one copy of the state while it is written (CheckpointAsyncHostBytes in the metrics),
  /// max_pending_async copies at most. A failed save is thrown by the next save, save_async or
  /// join, naming the file and the cause; the earlier steps stay as they were. With WhenBusy::kSkip
  /// and max_pending_async saves still being written, returns false on every replica and saves
  /// nothing (CheckpointAsyncSkipped counts them); a step skipped at a preemption is saved all the
  /// same.
  bool save_async(int64_t step, const TrainingState& state, bool force = false);
  /// Waits for every asynchronous save in flight; throws the first one's failure.
  void join();
  /// The committed steps under the path, oldest first (a step without its commit file, or a
  /// directory that is not a step, is not one).
  [[nodiscard]] std::vector<int64_t> all_steps() const;
  /// Loads step `step` into `state`. Every file is checked against the commit file before
  /// anything changes: a missing, truncated or damaged step throws FileError naming the file,
  /// and `state` is as it was. A step that does not fit `state` (an extra name, a group count,
  /// a scheduler the step lacks; the model's and the optimizer's load_state_dict checks) throws
  /// nn::StateDictError naming the file and the key; only a model or optimizer mismatch is found
  /// after the model may have taken the step's weights.
  void restore(int64_t step, TrainingState& state);
  /// Restores the newest step that reads back whole, skipping (with a warning naming what is
  /// wrong) a newer damaged one; returns it, or nullopt when no step restores (a fresh start:
  /// `state` untouched). A step that does not fit `state` is not skipped: its
  /// nn::StateDictError is thrown.
  std::optional<int64_t> restore_latest(TrainingState& state);

  /// The directory the steps are saved under.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  // The writer actor of the asynchronous saves and the saves it holds (checkpoint_manager.cpp):
  // made at the first save_async of the replica that writes.
  struct Writer;

  std::filesystem::path path_;
  int64_t save_interval_;
  int64_t max_to_keep_;
  int64_t max_pending_async_;
  bool chkpt_on_preemption_;
  WhenBusy when_busy_;
  std::unique_ptr<Writer> writer_;
  // reached_preemption's last answer, so that should_save and it meet once a step.
  std::optional<std::pair<int64_t, bool>> preemption_checked_;
};

}  // namespace axle
