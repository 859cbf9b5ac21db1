// samples/train_gpt: a character-level GPT (nanoGPT's model, parameter names and recipe) trained
// on Debian's fortunes, on one device or data-parallel on several (--num_devices). The whole step
// (forward, backward, gradients averaged across replicas, clipping, AdamW) traces into one graph;
// losses are printed by asynchronous step closures, so logging never waits for the device.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <numbers>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "axle/io/checkpoint.h"
#include "axle/io/data_loader.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/summary_writer.h"
#include "samples/char_corpus.h"
#include "samples/char_dataset.h"
#include "samples/flag_checks.h"
#include "samples/gpt_flags.h"
#include "samples/gpt_model.h"
#include "samples/trainer_log.h"
#include "samples/weights.h"

namespace axle::samples {
namespace {

// Appends JSON lines to logdir/train_gpt.jsonl (from the master replica only).
void log_json(const Flags& flags, const std::string& line) {
  if (flags.logdir.empty()) return;
  std::filesystem::create_directories(flags.logdir);
  std::FILE* f = std::fopen((std::filesystem::path(flags.logdir) / "train_gpt.jsonl").c_str(), "a");
  if (f == nullptr) return;
  std::fputs((line + "\n").c_str(), f);
  std::fclose(f);
}

// nanoGPT's schedule as a factor of the peak lr: linear warm-up (s+1)/warmup, then a cosine down
// to min_lr at max_steps, then min_lr.
double lr_factor(const Flags& flags, int64_t s) {
  const double floor = flags.min_lr / flags.lr;
  if (s < flags.warmup_steps) return static_cast<double>(s + 1) / flags.warmup_steps;
  if (s >= flags.max_steps) return floor;
  const double progress =
      static_cast<double>(s - flags.warmup_steps) /
      static_cast<double>(std::max<int64_t>(flags.max_steps - flags.warmup_steps, 1));
  return floor + (1 - floor) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

// Validation batch `index` on `device`, by the unshuffled rule.
std::pair<Tensor, Tensor> batch_on(const std::vector<uint8_t>& split, int64_t index,
                                   const Flags& flags, Device device) {
  const auto length = static_cast<int64_t>(split.size());
  std::vector<int64_t> starts;
  for (int64_t j = 0; j < flags.batch_size; ++j) {
    starts.push_back(batch_row_start(index, j, flags.batch_size, flags.block_size, length));
  }
  const TokenBatch batch = token_batch(split, starts, flags.block_size);
  const Shape shape{flags.batch_size, flags.block_size};
  return {tensor(batch.inputs, shape, device), tensor(batch.targets, shape, device)};
}

// The forward pass and the loss, in a bf16 autocast region with --amp bf16 (backward() traces
// outside it, in the dtypes the forward pass used; parameters and their gradients stay f32).
// `model` is the Gpt, its FullyShardedDataParallel with --fsdp, or the DistributedDataParallel
// around it with --ddp.
Tensor loss_of(nn::Module& model, const Tensor& inputs, const Tensor& targets, const Flags& flags) {
  const autocast region(inputs.device(), DType::kBFloat16, flags.amp == "bf16");
  const Tensor logits = model(inputs);
  const int64_t rows = inputs.size(0) * inputs.size(1);
  return nn::cross_entropy(reshape(logits, {rows, logits.size(2)}), reshape(targets, {rows}));
}

// The validation loss: the mean over batches 0 … eval_iters−1 of the validation split (unshuffled),
// shared among the replicas (replica r evaluates batches r, r + world, ...). The sum accumulates
// on the device; one value is read at the end.
double validation_loss(nn::Module& model, const std::vector<uint8_t>& val, const Flags& flags,
                       Device device) {
  model.eval();
  const NoGradGuard no_grad;
  Tensor total = zeros(Shape{}, DType::kFloat32, device);
  int64_t batches = 0;
  // Under FSDP every replica's forward gathers with the others: each evaluates as many batches,
  // eval_iters rounded up to a multiple of the replicas.
  const int64_t world = world_size();
  const int64_t iters =
      flags.fsdp ? (flags.eval_iters + world - 1) / world * world : flags.eval_iters;
  for (int64_t k = global_ordinal(); k < iters; k += world) {
    const auto [inputs, targets] = batch_on(val, k, flags, device);
    total = total + loss_of(model, inputs, targets, flags);
    ++batches;
    mark_step();
  }
  model.train();
  const auto [sum, count] =
      mesh_reduce("val_loss", std::pair<double, int64_t>(batches > 0 ? total.item() : 0.0, batches),
                  [](const std::vector<std::pair<double, int64_t>>& all) {
                    std::pair<double, int64_t> s{0, 0};
                    for (const auto& [v, n] : all) s = {s.first + v, s.second + n};
                    return s;
                  });
  return count == 0 ? 0 : sum / static_cast<double>(count);
}

// N bytes generated from a newline with temperature and top-k, one graph for every position:
// the context is always block_size long (padded at the end, which causal attention never lets
// earlier positions see) and the position read is an index tensor, not a traced constant.
std::string generate(nn::Module& model, const Flags& flags, Device device) {
  model.eval();
  const NoGradGuard no_grad;
  const int64_t block = flags.block_size;
  const int64_t vocab = GptConfig{}.vocab_size;
  const int64_t k = flags.top_k > 0 ? std::min(flags.top_k, vocab) : vocab;
  std::vector<int64_t> context{'\n'};
  std::string text;
  for (int64_t n = 0; n < flags.sample; ++n) {
    const int64_t used = std::min<int64_t>(static_cast<int64_t>(context.size()), block);
    std::vector<int64_t> window(context.end() - used, context.end());
    window.resize(block, 0);
    const Tensor logits = model(tensor(window, Shape{1, block}, device));
    const Tensor position = tensor(std::vector<int64_t>{used - 1}, Shape{1}, device);
    const Tensor last =
        reshape(index_select(logits, 1, position), {1, vocab}) / std::max(flags.temperature, 1e-6);
    const TopK best = topk(last, k, -1);
    const Tensor choice = multinomial(softmax(best.values, -1), 1);
    const auto token = static_cast<int64_t>(gather(best.indices, 1, choice).item());
    context.push_back(token);
    text.push_back(static_cast<char>(token));
    mark_step();
  }
  model.train();
  return text;
}

// --spmd: Megatron-style tensor parallelism over "model" — in each block, c_attn (the heads'
// q, k and v) and c_fc column-parallel, the c_proj after each row-parallel — so every block's
// attention and MLP end in one all_reduce. Embeddings, LayerNorms and the c_proj biases stay
// replicated; the batch is split over "data" by the loader.
void shard_megatron(const nn::Module& gpt, const spmd::Mesh& mesh) {
  constexpr auto None = std::nullopt;
  for (const auto& [name, p] : gpt.named_parameters()) {
    if (name.ends_with("attn.c_attn.weight") || name.ends_with("mlp.c_fc.weight")) {
      spmd::mark_sharding(p, mesh, {"model", None});
    } else if (name.ends_with("attn.c_attn.bias") || name.ends_with("mlp.c_fc.bias")) {
      spmd::mark_sharding(p, mesh, {"model"});
    } else if (name.ends_with("c_proj.weight")) {
      spmd::mark_sharding(p, mesh, {None, "model"});
    }
  }
}

struct Summary {
  int64_t parameter_bytes = 0;             // the whole model's
  int64_t parameter_bytes_per_device = 0;  // what the master device holds (--spmd, --fsdp)
  double first_loss = 0;
  int64_t resumed_from_step = 0;
  double final_train_loss = 0;
  double final_val_loss = 0;
  double step_ms = 0;
  int64_t compiles = 0;
  uint64_t peak_device_bytes = 0;
  std::vector<uint64_t> peak_bytes_by_ordinal;
  // Parameters, their gradients and the optimizer's state on the replica holding the most.
  uint64_t replica_state_bytes = 0;
  std::string sample;
};

// The model on `device`, the same start on every replica (from the seed, or --init).
std::shared_ptr<Gpt> make_model(const Flags& flags, Device device) {
  set_rng_state(flags.seed, device);
  auto gpt =
      std::make_shared<Gpt>(GptConfig{.block_size = flags.block_size,
                                      .n_layer = flags.n_layer,
                                      .n_head = flags.n_head,
                                      .n_embd = flags.n_embd,
                                      .checkpoint_activations = flags.checkpoint_activations},
                            device);
  if (!flags.init.empty()) load_weights(*gpt, flags.init, device);
  return gpt;
}

// With --spmd: the data x model mesh of every device, the model's weights laid out over it.
std::optional<spmd::Mesh> shard_over_mesh(const Flags& flags, const Gpt& gpt) {
  if (!flags.spmd) return std::nullopt;
  const std::vector<int64_t> shape = mesh_shape(flags.mesh);
  std::vector<int64_t> ids(static_cast<std::size_t>(shape[0] * shape[1]));
  std::iota(ids.begin(), ids.end(), 0);
  spmd::Mesh mesh(ids, shape, std::vector<std::string>{"data", "model"});
  shard_megatron(gpt, mesh);
  return mesh;
}

// The model as it trains: itself, or wrapped in FSDP (--fsdp) or DDP (--ddp).
struct Wrapped {
  std::shared_ptr<Gpt> gpt;
  std::shared_ptr<FullyShardedDataParallel> fsdp;
  std::shared_ptr<DistributedDataParallel> ddp;

  // What holds the parameters the optimizer updates (FSDP's shards under --fsdp).
  [[nodiscard]] nn::Module& model() const { return fsdp ? *fsdp : static_cast<nn::Module&>(*gpt); }
  // What the step runs: DDP under --ddp (evaluation, sampling and saving use the model itself,
  // so the weights keep their names).
  [[nodiscard]] nn::Module& trained() const { return ddp ? *ddp : model(); }
};

Wrapped wrap(const Flags& flags, std::shared_ptr<Gpt> gpt) {
  Wrapped w{.gpt = std::move(gpt)};
  // With --fsdp each replica keeps 1/N of every parameter, sharded along dim 0 so that matrices
  // stay matrices (the weight-decay groups go by dims); each block is a unit of its own. The
  // initial values, then the shards, each computed on its own: one graph computing the whole
  // model, its shards and the first step would hold all of it at once.
  if (flags.fsdp) {
    mark_step();
    w.fsdp = std::make_shared<FullyShardedDataParallel>(
        w.gpt, FsdpOptions{.flatten_parameters = false,
                           .shard_param_on_dim_0 = true,
                           .auto_wrap_policy = transformer_auto_wrap_policy<GptBlock>()});
    mark_step();
  }
  if (flags.ddp) w.ddp = std::make_shared<DistributedDataParallel>(w.gpt);
  return w;
}

// AdamW with weight decay on matrices and embeddings (≥ 2 dims), none on biases and LayerNorms.
std::unique_ptr<optim::AdamW> make_optimizer(nn::Module& model, const Flags& flags) {
  std::vector<Tensor> decayed, undecayed;
  for (const auto& [name, p] : model.named_parameters()) {
    (p.shape().rank() >= 2 ? decayed : undecayed).push_back(p);
  }
  return std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{.params = decayed, .weight_decay = flags.weight_decay},
                                     {.params = undecayed, .weight_decay = 0.0}},
      optim::AdamWOptions{.lr = flags.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
}

// This replica's rows of each step's batch (a loader keeps the host from running more than a
// few steps ahead of the device).
std::unique_ptr<DataLoader> make_train_loader(
    const Flags& flags, const std::shared_ptr<const std::vector<uint8_t>>& train_split) {
  const int world = world_size();
  return std::make_unique<DataLoader>(
      std::make_shared<CharRows>(
          train_split, flags.block_size, flags.batch_size,
          flags.max_steps * world * flags.batch_size,
          flags.shuffle != 0 ? std::optional<uint64_t>(flags.seed) : std::nullopt),
      DataLoaderOptions{.batch_size = flags.batch_size,
                        .num_workers = 0,
                        .sampler = std::make_shared<ReplicaBatches>(
                            flags.max_steps, flags.batch_size, world, global_ordinal())});
}

// As torch_xla's xm.reduce_gradients: the replicas' gradients averaged (clipping needs the
// average; DDP and FSDP have averaged them in backward).
void average_gradients(const std::vector<Tensor>& params, int world) {
  const NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  const std::vector<Tensor> averaged = all_reduce(ReduceType::kSum, grads, 1.0 / world);
  for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(averaged[i]);
}

// What a replica reports as it trains: where, to whom, and tokens per second since the last
// report, smoothed, and since the start (PyTorch/XLA's RateTracker). The closures use it from
// the closure thread only.
struct Reporter {
  std::string device_name;
  int64_t tokens_per_step = 0;
  bool master = false;  // (under SPMD every process is ordinal 0 of a world of 1: process 0)
  std::shared_ptr<SummaryWriter> summaries;  // TensorBoard, from the master replica
  double first_loss = -1;
  int64_t logged_step = 0;
  RateTracker tokens;

  void train_step(const Flags& flags, int64_t step, double loss, double lr) {
    if (first_loss < 0) first_loss = loss;
    tokens.add(tokens_per_step * (step - logged_step));
    logged_step = step;
    if (process_index() != 0) return;
    fmt::print(
        "| Training Device={} Step={} Loss={:.5f} Rate={:.0f} GlobalRate={:.0f} tokens/s "
        "Lr={:.6f} Time={}\n",
        device_name, step, loss, tokens.rate(), tokens.global_rate(), lr, now_text());
    std::fflush(stdout);
    if (master) {
      log_json(flags,
               fmt::format(R"({{"step":{},"train_loss":{:.6f},"lr":{:.8f}}})", step, loss, lr));
    }
    if (summaries) {
      summaries->add_scalar("train/loss", loss, step);
      summaries->add_scalar("train/lr", lr, step);
      summaries->add_scalar("train/tokens_per_s", tokens.rate(), step);
    }
  }

  void evaluation(const Flags& flags, int64_t step, double val_loss) const {
    if (!master) return;
    const int64_t compiles = counter_value("UncachedCompile").value_or(0);
    fmt::print("| Eval Device={} Step={} ValLoss={:.5f} BitsPerByte={:.4f} Compiles={} Time={}\n",
               device_name, step, val_loss, val_loss / std::numbers::ln2, compiles, now_text());
    std::fflush(stdout);
    if (summaries) summaries->add_scalar("val/loss", val_loss, step);
    log_json(flags, fmt::format(R"({{"step":{},"val_loss":{:.6f},"compiles":{}}})", step, val_loss,
                                compiles));
  }
};

std::shared_ptr<Reporter> make_reporter(const Flags& flags, Device device) {
  auto reporter = std::make_shared<Reporter>();
  reporter->device_name = fmt::format("{}/{}", device.to_string(), global_ordinal());
  reporter->tokens_per_step = flags.batch_size * flags.block_size * world_size();
  reporter->master = is_master_ordinal(/*local=*/false) && process_index() == 0;
  if (reporter->master && !flags.logdir.empty()) {
    reporter->summaries = std::make_shared<SummaryWriter>(flags.logdir);
  }
  return reporter;
}

// --save: the model's weights (under FSDP, consolidated from every replica's shards).
void save_model(const Flags& flags, const Wrapped& w) {
  if (flags.save.empty()) return;
  if (w.fsdp) return save_fsdp_weights(*w.fsdp, flags.save);
  save_weights(w.model(), flags.save);
}

// What this replica's device holds of `t` (under SPMD, its shard).
uint64_t held_bytes(const Tensor& t) {
  if (!t.defined()) return 0;
  const DeviceData* data = t.impl()->data().get();
  if (data != nullptr && data->sharded()) return data->shards()[0]->bytes();
  return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
}

// The parameters, their gradients and the optimizer's state on the replica holding the most.
uint64_t most_state_bytes(const std::vector<Tensor>& params, const optim::Optimizer& optimizer) {
  uint64_t state_bytes = 0;
  for (const Tensor& p : params) state_bytes += held_bytes(p) + held_bytes(p.grad());
  for (const auto& [name, t] : optimizer.state_dict()) state_bytes += held_bytes(t);
  return mesh_reduce("replica_state_bytes", state_bytes,
                     [](const std::vector<uint64_t>& all) { return std::ranges::max(all); });
}

// One step's forward, backward, gradients averaged and clipped, and AdamW update; every
// --log_steps, a closure reporting the loss once the step's device work is done. The loss.
Tensor train_step(const Flags& flags, const Wrapped& w, optim::AdamW& optimizer,
                  const std::vector<Tensor>& params, const DeviceBatch& batch, int64_t step,
                  const std::shared_ptr<Reporter>& reporter) {
  const int world = world_size();
  optimizer.zero_grad();
  Tensor loss = loss_of(w.trained(), batch[0], batch[1], flags);
  loss.backward();
  if (world > 1 && !w.fsdp && !w.ddp) average_gradients(params, world);
  if (flags.grad_clip > 0) {
    // Under FSDP each replica holds shards of averaged gradients: the norm is the job's.
    (void)(w.fsdp ? w.fsdp->clip_grad_norm_(flags.grad_clip)
                  : nn::utils::clip_grad_norm_(params, flags.grad_clip));
  }
  optimizer.step();
  // Added before the step is marked, so it runs once this step's device work is done.
  if (flags.log_steps > 0 && (step % flags.log_steps == 0 || step == 1)) {
    if (reporter->summaries) reporter->summaries->add_step_breakdown(step);
    add_step_closure(
        [reporter, loss, step, &flags, lr = optimizer.param_groups().front().lr] {
          reporter->train_step(flags, step, loss.item(), lr);
        },
        /*run_async=*/true);
  }
  return loss;
}

// What the training loop leaves for the summary.
struct TrainedRun {
  int64_t warm = 0;          // steps before the timing starts
  double timed_seconds = 0;  // from the end of step `warm` to the end, without the evaluations
  double val_loss = 0;       // the last evaluation's
  Tensor loss;               // the last step's
};

// The steps, evaluating every --eval_interval and at the last. Step time: from the end of the
// second step (the first two compile: Adam's state appears in the second) to the end of the
// last, without the evaluations.
TrainedRun train_steps(const Flags& flags, const Wrapped& w, optim::AdamW& optimizer,
                       optim::LambdaLR& scheduler, const Resumable& resume,
                       const std::vector<Tensor>& params, const std::optional<spmd::Mesh>& mesh,
                       DataLoader& train_loader, const std::vector<uint8_t>& val_split,
                       const std::shared_ptr<Reporter>& reporter) {
  const Device device = xla_device();
  TrainedRun run;
  int64_t step = resume.first_step;
  run.warm = flags.max_steps - step > 2 ? step + 2 : step;
  Clock::time_point timed_from = Clock::now();
  double eval_seconds = 0;
  ParallelLoaderOptions loader_options;
  if (mesh) loader_options.input_sharding = InputSharding{*mesh, {"data", std::nullopt}};
  // The run is one epoch of --max_steps batches: restored after its last step, it has none left
  // to train, only the last step's evaluation to give again.
  if (step >= flags.max_steps) {
    train_loader.resume_at(0, train_loader.size());
    run.val_loss = validation_loss(w.model(), val_split, flags, device);
    reporter->evaluation(flags, step, run.val_loss);
  }
  for (const DeviceBatch& batch : MpDeviceLoader(train_loader, device, loader_options)) {
    ++step;
    run.loss = train_step(flags, w, optimizer, params, batch, step, reporter);
    scheduler.step();
    mark_step();
    if (resume.save(step)) break;  // preempted: this step saved, as on every replica
    if (step == run.warm) {
      wait_device_ops({device});
      timed_from = Clock::now();
    }
    if ((flags.eval_interval > 0 && step % flags.eval_interval == 0) || step == flags.max_steps) {
      wait_device_ops({device});
      const auto eval_start = Clock::now();
      run.val_loss = validation_loss(w.model(), val_split, flags, device);
      if (step > run.warm) eval_seconds += seconds_since(eval_start);
      reporter->evaluation(flags, step, run.val_loss);
    }
  }
  wait_device_ops();
  run.timed_seconds = seconds_since(timed_from) - eval_seconds;
  return run;
}

// One replica's training: its own model (the same start on every replica, from the seed), its
// own rows of every batch, gradients averaged across replicas before clipping.
void train_replica(const Flags& flags,
                   const std::shared_ptr<const std::vector<uint8_t>>& train_split,
                   const std::vector<uint8_t>& val_split, Summary& summary) {
  const Device device = xla_device();
  std::shared_ptr<Gpt> gpt = make_model(flags, device);
  int64_t parameter_bytes = 0;  // the whole model's (FSDP takes the parameters out of it)
  for (const Tensor& p : gpt->parameters()) parameter_bytes += static_cast<int64_t>(held_bytes(p));
  const std::optional<spmd::Mesh> mesh = shard_over_mesh(flags, *gpt);
  const Wrapped w = wrap(flags, std::move(gpt));
  const std::unique_ptr<optim::AdamW> optimizer = make_optimizer(w.model(), flags);
  optim::LambdaLR scheduler(*optimizer, [&flags](int64_t s) { return lr_factor(flags, s); });
  const std::vector<Tensor> params = w.model().parameters();
  const std::shared_ptr<Reporter> reporter = make_reporter(flags, device);
  const std::unique_ptr<DataLoader> train_loader = make_train_loader(flags, train_split);
  const Resumable resume = resumable(flags.checkpoints, {.model = &w.model(),
                                                         .optimizer = optimizer.get(),
                                                         .scheduler = &scheduler,
                                                         .data_loader = train_loader.get(),
                                                         .sharded = w.fsdp != nullptr});
  const TrainedRun run = train_steps(flags, w, *optimizer, scheduler, resume, params, mesh,
                                     *train_loader, val_split, reporter);
  const int64_t timed_steps = flags.max_steps - run.warm;
  const double final_loss = run.loss.defined() ? run.loss.item() : 0;
  const int64_t compiles = counter_value("UncachedCompile").value_or(0);
  save_model(flags, w);
  std::string text;
  if (flags.sample > 0) text = generate(w.model(), flags, device);
  const MemoryInfo memory = get_memory_info(device);
  wait_device_ops();
  const uint64_t most_state = most_state_bytes(params, *optimizer);
  std::vector<uint64_t> peaks = mesh_reduce("peak_device_bytes", memory.peak_bytes,
                                            [](const std::vector<uint64_t>& all) { return all; });
  if (!reporter->master) return;
  summary.parameter_bytes = parameter_bytes;
  for (const Tensor& p : params) {
    summary.parameter_bytes_per_device += static_cast<int64_t>(held_bytes(p));
  }
  summary.first_loss = reporter->first_loss;
  summary.resumed_from_step = resume.first_step;
  summary.final_train_loss = final_loss;
  summary.final_val_loss = run.val_loss;
  summary.step_ms =
      timed_steps > 0 ? 1000 * run.timed_seconds / static_cast<double>(timed_steps) : 0;
  summary.compiles = compiles;
  summary.peak_device_bytes = memory.peak_bytes;
  summary.peak_bytes_by_ordinal = std::move(peaks);
  summary.replica_state_bytes = most_state;
  summary.sample = std::move(text);
}

int train(const Flags& flags) {
  const CharCorpus corpus = read_char_corpus(flags.data_dir);
  const CorpusSplits data = split_corpus(corpus.bytes);
  fmt::print(stderr, "train_gpt: {} files, {} bytes from {} ({} train, {} validation)\n",
             corpus.files, corpus.bytes.size(), flags.data_dir, data.train.size(), data.val.size());
  const auto train_split = std::make_shared<const std::vector<uint8_t>>(data.train);
  Summary summary;
  if (flags.spmd) {
    train_replica(flags, train_split, data.val, summary);  // one program over every device
  } else {
    spawn([&](int) { train_replica(flags, train_split, data.val, summary); }, flags.num_devices);
  }
  if (process_index() != 0) return 0;
  if (flags.sample > 0) {
    fmt::print("| Sample ({} bytes, temperature {}, top_k {}):\n{}\n", flags.sample,
               flags.temperature, flags.top_k, summary.sample);
  }
  const int64_t tokens_per_step =
      flags.batch_size * flags.block_size * (flags.spmd ? 1 : flags.num_devices * process_count());
  fmt::print(
      "{{\"final_train_loss\":{:.5f},\"final_val_loss\":{:.5f},\"val_bits_per_byte\":{:.5f},"
      "\"tokens_per_s\":{:.1f},\"step_ms\":{:.2f},\"compiles\":{},\"peak_device_bytes\":{},"
      "\"first_logged_loss\":{:.5f},\"steps\":{},\"corpus_files\":{},\"corpus_bytes\":{},"
      "\"devices\":{},\"world_size\":{},\"amp\":\"{}\",\"ddp\":{},"
      "\"peak_device_bytes_by_ordinal\":[{}],\"spmd\":{},\"mesh\":\"{}\","
      "\"parameter_bytes\":{},\"parameter_bytes_per_device\":{},\"replica_state_bytes\":{},"
      "\"resumed_from_step\":{}}}\n",
      summary.final_train_loss, summary.final_val_loss, summary.final_val_loss / std::numbers::ln2,
      summary.step_ms > 0 ? 1000.0 * static_cast<double>(tokens_per_step) / summary.step_ms : 0.0,
      summary.step_ms, summary.compiles, summary.peak_device_bytes, summary.first_loss,
      flags.max_steps, corpus.files, corpus.bytes.size(),
      flags.spmd ? global_device_count() : flags.num_devices,
      flags.spmd ? 1 : flags.num_devices * process_count(), flags.amp, flags.ddp,
      fmt::join(summary.peak_bytes_by_ordinal, ","), flags.spmd, flags.spmd ? flags.mesh : "",
      summary.parameter_bytes, summary.parameter_bytes_per_device, summary.replica_state_bytes,
      summary.resumed_from_step);
  return 0;
}

}  // namespace
}  // namespace axle::samples

int main(int argc, char** argv) {
  axle::samples::Flags flags;
  CLI::App app{"train_gpt: a character-level GPT (nanoGPT's) on Debian's fortunes"};
  axle::samples::add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    if (flags.spmd) axle::samples::check_mesh(flags);
    if (flags.num_devices > 0) {
      setenv("CPU_NUM_DEVICES", std::to_string(flags.num_devices).c_str(), /*overwrite=*/1);
    }
    flags.num_devices = axle::device_count();
    if (flags.spmd) axle::use_spmd();
    return axle::samples::train(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
}
