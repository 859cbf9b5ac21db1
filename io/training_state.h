// io: what a checkpoint of a run holds (CheckpointManager's TrainingState).
#pragma once

#include "axle/graph/nn/module.h"
#include "axle/graph/optim/lr_scheduler.h"
#include "axle/graph/optim/optimizer.h"
#include "axle/io/data_loader.h"

namespace axle {

/// What a checkpoint of a run holds, by reference: whatever is set is saved and restored. Every
/// device's random streams on the calling replica (seed and position, so that dropout draws the
/// same masks after a resume) and the step are always part of it.
struct TrainingState {
  nn::Module* model = nullptr;              ///< its state_dict (parameters and buffers)
  optim::Optimizer* optimizer = nullptr;    ///< its state_dict and its groups' rates
  optim::LRScheduler* scheduler = nullptr;  ///< its state_dict
  /// Tensors of the caller's own, by name. restore() replaces each value with the saved one
  /// (on the device it had) and refuses a name the checkpoint lacks or has in excess.
  nn::StateDict extra;
  /// The loader the loop takes its batches from (iterated itself, or through a ParallelLoader or
  /// MpDeviceLoader): each replica's position in it (DataLoader::state_dict: the epoch and the
  /// batches the loop has taken, not those read ahead) is saved, and restore() makes its next
  /// epoch go on from there (load_state_dict), so that no batch is lost or repeated.
  DataLoader* data_loader = nullptr;
  /// Tensors each replica holds a value of its own of, by name: under data parallelism,
  /// BatchNorm's running statistics (`model->named_buffers()`), which stay each replica's as in
  /// PyTorch/XLA. Every replica's are saved (the model and the rest are the master's), and
  /// restore() gives each replica its own back in place (Tensor::copy_, so the module's handles
  /// see them). Every replica lists the same names, shapes and dtypes.
  nn::StateDict per_replica;
  /// Whether the model and the optimizer are each replica's own shards (a model wrapped in
  /// FullyShardedDataParallel, the optimizer over its shards): then every replica's model,
  /// optimizer and extra tensors are saved, and each replica restores its own, onto a job of as
  /// many replicas. Otherwise they are the master's, and every replica restores them.
  /// Under SPMD (use_spmd()) the model's and the optimizer's values are global values laid out
  /// over the mesh: neither `sharded` nor `per_replica` applies there.
  bool sharded = false;
};

}  // namespace axle
