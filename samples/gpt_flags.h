// samples/train_gpt: its command line — the flags with what they mean, their defaults and the
// values each takes, and the check of --spmd's mesh against the job.
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "samples/char_corpus.h"
#include "samples/flag_checks.h"
#include "samples/resume.h"

namespace axle::samples {

struct Flags {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;
  int64_t batch_size = 32;  // per replica
  int64_t max_steps = 1000;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
  int64_t eval_interval = 250;
  int64_t eval_iters = 20;
  uint64_t seed = 1;
  int shuffle = 0;  // 0: the deterministic rule, the batches a reference run of it sees
  std::string init;
  std::string save;
  int num_devices = 0;       // replicas, one per device (0: as many as axle starts with)
  bool spmd = false;         // one program over a data x model mesh of every device
  std::string mesh = "2,2";  // --spmd's mesh shape: data, model
  int64_t log_steps = 10;
  std::string logdir;  // TensorBoard events, and a JSON line per logged step and evaluation
  int64_t sample = 0;
  double temperature = 0.8;
  int64_t top_k = 200;
  std::string data_dir = kFortunesDir;
  bool checkpoint_activations = false;
  std::string amp = "none";     // "bf16": forward and loss in an autocast region
  bool fsdp = false;            // FullyShardedDataParallel, each block a unit of its own
  bool ddp = false;             // DistributedDataParallel averages the gradients during backward
  CheckpointFlags checkpoints;  // --checkpoint_dir, --checkpoint_every, --keep, --resume
};

// The model, the optimizer and the data: each flag with what it means and the values it takes.
inline void add_training_flags(CLI::App& app, Flags& flags) {
  app.add_option("--n_layer", flags.n_layer)->check(positive());
  app.add_option("--n_head", flags.n_head)->check(positive());
  app.add_option("--n_embd", flags.n_embd)->check(positive());
  app.add_option("--block_size", flags.block_size)->check(positive());
  app.add_option("--batch_size", flags.batch_size, "rows per replica")->check(positive());
  app.add_option("--max_steps", flags.max_steps)->check(positive());
  app.add_option("--lr", flags.lr, "peak learning rate")->check(non_negative());
  app.add_option("--min_lr", flags.min_lr, "the cosine ends here at --max_steps")
      ->check(non_negative());
  app.add_option("--warmup_steps", flags.warmup_steps)->check(positive());
  app.add_option("--weight_decay", flags.weight_decay, "AdamW's, on parameters of 2 dims or more")
      ->check(non_negative());
  app.add_option("--grad_clip", flags.grad_clip, "global gradient norm (0: no clipping)")
      ->check(non_negative());
  app.add_option("--eval_interval", flags.eval_interval, "steps between validation losses")
      ->check(non_negative());
  app.add_option("--eval_iters", flags.eval_iters, "validation batches per evaluation")
      ->check(positive());
  app.add_option("--seed", flags.seed);
  app.add_option("--shuffle", flags.shuffle,
                 "0 (default) takes rows in order; 1 draws them from the seed");
  app.add_option("--init", flags.init,
                 "start from these weights (.safetensors, or an axle checkpoint)");
  app.add_option("--save", flags.save,
                 "write the trained weights here (.safetensors, or else an axle checkpoint)");
  app.add_option("--data_dir", flags.data_dir, "the directory of fortune files");
}

// Reports and sampling, the devices and how the replicas share the work.
inline void add_run_flags(CLI::App& app, Flags& flags) {
  app.add_option("--num_devices", flags.num_devices,
                 "train data-parallel on this many devices (default: CPU_NUM_DEVICES, or 1); "
                 "--batch_size is per device")
      ->check(positive());
  app.add_option("--log_steps", flags.log_steps, "print the loss every this many steps")
      ->check(non_negative());
  app.add_option("--logdir", flags.logdir,
                 "write TensorBoard summaries (loss, lr, tokens/s, validation loss) to DIR, and "
                 "JSON lines of them to DIR/train_gpt.jsonl");
  app.add_option("--sample", flags.sample, "generate this many bytes after training")
      ->check(non_negative());
  app.add_option("--temperature", flags.temperature)->check(positive());
  app.add_option("--top_k", flags.top_k, "sample among the k likeliest bytes (0: all)")
      ->check(non_negative());
  CLI::Option* fsdp_flag = app.add_flag(
      "--fsdp", flags.fsdp,
      "FullyShardedDataParallel: parameters, gradients and AdamW state sharded 1/N, each "
      "block gathered around its forward and again for its backward");
  CLI::Option* ddp_flag =
      app.add_flag("--ddp", flags.ddp,
                   "train through DistributedDataParallel: gradients averaged in buckets during "
                   "backward instead of after it")
          ->excludes(fsdp_flag);
  app.add_flag("--spmd", flags.spmd,
               "one program over a mesh of every device (use_spmd): the batch split over "
               "\"data\", attention heads and MLP width over \"model\" (Megatron); "
               "--batch_size is the whole batch")
      ->excludes(fsdp_flag)
      ->excludes(ddp_flag);
  app.add_option("--mesh", flags.mesh,
                 "--spmd's mesh shape, data,model (e.g. 2,2); sets the device count");
  app.add_flag("--checkpoint_activations", flags.checkpoint_activations,
               "recompute each block's activations in the backward pass instead of keeping them");
  app.add_option("--amp", flags.amp,
                 "bf16: run the forward pass and the loss in an autocast region (matmuls in bf16, "
                 "accumulated in f32; f32 master weights); none: all in f32")
      ->check(CLI::IsMember({"none", "bf16"}));
}

// The command line.
inline void add_flags(CLI::App& app, Flags& flags) {
  add_training_flags(app, flags);
  add_run_flags(app, flags);
  add_checkpoint_flags(app, flags.checkpoints);
}

// --spmd: the mesh spans the job (under mpirun each process holds its share of the devices) and
// splits the batch over its data shards; sets --num_devices to this process's share.
inline void check_mesh(Flags& flags) {
  const std::vector<int64_t> mesh = mesh_shape(flags.mesh);
  const int processes = process_count();
  if ((mesh[0] * mesh[1]) % processes != 0) {
    throw std::invalid_argument(
        fmt::format("--mesh {} does not split over {} processes", flags.mesh, processes));
  }
  flags.num_devices = static_cast<int>(mesh[0] * mesh[1] / processes);
  if (flags.batch_size % mesh[0] != 0) {
    throw std::invalid_argument(
        fmt::format("--batch_size {} does not split evenly over the mesh's {} data shards",
                    flags.batch_size, mesh[0]));
  }
}

}  // namespace axle::samples
