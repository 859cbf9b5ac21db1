// samples: --checkpoint_dir, --checkpoint_every, --keep and --resume, as the trainers share them:
// the run's state saved through CheckpointManager every N steps, and a run started again with
// --resume going on from the newest good checkpoint.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "axle/io/checkpoint_manager.h"
#include "samples/flag_checks.h"

namespace axle::samples {

struct CheckpointFlags {
  std::string dir;      // CheckpointManager's directory (empty: no checkpoints)
  int64_t every = 100;  // steps between checkpoints
  int64_t keep = 0;     // checkpoints kept, the newest (0: all)
  bool resume = false;  // start from the newest good checkpoint in dir
};

inline void add_checkpoint_flags(CLI::App& app, CheckpointFlags& flags) {
  CLI::Option* dir = app.add_option(
      "--checkpoint_dir", flags.dir,
      "save the run's state (weights, the optimizer, the schedule, the random streams; each "
      "replica's shards under --fsdp; each value's layout over the mesh under --spmd) in "
      "DIR/<step>/");
  app.add_option("--checkpoint_every", flags.every,
                 "steps between checkpoints (with --checkpoint_dir)")
      ->check(positive());
  app.add_option("--keep", flags.keep, "checkpoints kept, the newest (0: all)")
      ->check(non_negative());
  app.add_flag("--resume", flags.resume,
               "start from the newest good checkpoint in --checkpoint_dir (or from scratch when "
               "there is none)")
      ->needs(dir);
}

/// A run's checkpoints: the manager (none without --checkpoint_dir), what it saves, and the step
/// the run was restored from (0 for a fresh start).
struct Resumable {
  std::unique_ptr<CheckpointManager> manager;
  TrainingState state;
  int64_t first_step = 0;

  /// Saves step `step` when it is one to save — a multiple of --checkpoint_every, or the step at
  /// which the job was preempted (SIGTERM) — asynchronously: the loop goes on while a writer
  /// actor writes it (the manager waits for it when it goes). Returns whether the job was
  /// preempted: the loop then ends, every replica at this step.
  bool save(int64_t step) const {
    if (!manager) return false;
    manager->save_async(step, state);
    return manager->reached_preemption(step);
  }
};

/// With --checkpoint_dir, the manager of `state`; with --resume, `state` restored from the newest
/// good checkpoint first.
inline Resumable resumable(const CheckpointFlags& flags, TrainingState state) {
  Resumable r;
  if (flags.dir.empty()) return r;
  r.manager = std::make_unique<CheckpointManager>(flags.dir, flags.every, flags.keep);
  r.state = std::move(state);
  if (flags.resume) r.first_step = r.manager->restore_latest(r.state).value_or(0);
  return r;
}

}  // namespace axle::samples
