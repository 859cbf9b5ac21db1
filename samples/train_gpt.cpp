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

#include "axle.h"
#include "graph/formats/safetensors.h"
#include "io/checkpoint.h"
#include "io/data_loader.h"
#include "io/parallel_loader.h"
#include "io/sharded_checkpoint.h"
#include "io/summary_writer.h"
#include "samples/char_corpus.h"
#include "samples/char_dataset.h"
#include "samples/flag_checks.h"
#include "samples/gpt_model.h"
#include "samples/trainer_log.h"

namespace axle::samples {
namespace {

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
  std::string amp = "none";  // "bf16": forward and loss in an autocast region
  bool fsdp = false;         // FullyShardedDataParallel, each block a unit of its own
  bool ddp = false;          // DistributedDataParallel averages the gradients during backward
};

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
  const autocast region(inputs.device(), DType::kBF16, flags.amp == "bf16");
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
  Tensor total = zeros(Shape{}, DType::kF32, device);
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

void load_weights(nn::Module& model, const std::string& path, Device device) {
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

void save_weights(const nn::Module& model, const std::string& path) {
  if (std::filesystem::path(path).extension() != ".safetensors") {
    save(model.state_dict(), path);  // written by the master replica
    return;
  }
  // Under SPMD in a job of several processes, reading a value whose tiles are on other processes
  // is a collective: every process reads, the master writes.
  if (!is_spmd() && !is_master_ordinal(/*local=*/false)) return;
  CpuTensorMap host;
  for (const auto& [name, t] : model.state_dict()) host.emplace(name, t.to_cpu());
  if (is_master_ordinal(/*local=*/false) && process_index() == 0) save_safetensors(path, host);
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

// One replica's training: its own model (the same start on every replica, from the seed), its
// own rows of every batch, gradients averaged across replicas before clipping.
void train_replica(const Flags& flags,
                   const std::shared_ptr<const std::vector<uint8_t>>& train_split,
                   const std::vector<uint8_t>& val_split, Summary& summary) {
  const int world = world_size();
  const int ordinal = global_ordinal();
  const Device device = xla_device();
  set_rng_state(flags.seed, device);
  auto gpt =
      std::make_shared<Gpt>(GptConfig{.block_size = flags.block_size,
                                      .n_layer = flags.n_layer,
                                      .n_head = flags.n_head,
                                      .n_embd = flags.n_embd,
                                      .checkpoint_activations = flags.checkpoint_activations},
                            device);
  if (!flags.init.empty()) load_weights(*gpt, flags.init, device);
  int64_t parameter_bytes = 0;  // the whole model's (FSDP takes the parameters out of it)
  for (const Tensor& p : gpt->parameters()) {
    parameter_bytes += p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
  }
  std::optional<spmd::Mesh> mesh;
  if (flags.spmd) {
    const std::vector<int64_t> shape = mesh_shape(flags.mesh);
    std::vector<int64_t> ids(static_cast<std::size_t>(shape[0] * shape[1]));
    std::iota(ids.begin(), ids.end(), 0);
    mesh.emplace(ids, shape, std::vector<std::string>{"data", "model"});
    shard_megatron(*gpt, *mesh);
  }
  // With --fsdp each replica keeps 1/N of every parameter, sharded along dim 0 so that matrices
  // stay matrices (the weight-decay groups below go by dims); each block is a unit of its own.
  std::shared_ptr<FullyShardedDataParallel> fsdp;
  if (flags.fsdp) {
    // The initial values, then the shards, each computed on its own: one graph computing the
    // whole model, its shards and the first step would hold all of it at once.
    mark_step();
    fsdp = std::make_shared<FullyShardedDataParallel>(
        gpt, FsdpOptions{.flatten_parameters = false,
                         .shard_param_on_dim_0 = true,
                         .auto_wrap_policy = transformer_auto_wrap_policy<GptBlock>()});
  }
  if (fsdp) mark_step();
  nn::Module& model = fsdp ? static_cast<nn::Module&>(*fsdp) : *gpt;
  // With --ddp, training goes through DistributedDataParallel (evaluation, sampling and saving use
  // the model itself, so the weights keep their names).
  std::shared_ptr<DistributedDataParallel> ddp;
  if (flags.ddp) ddp = std::make_shared<DistributedDataParallel>(gpt);
  nn::Module& trained = ddp ? static_cast<nn::Module&>(*ddp) : model;
  // Weight decay on matrices and embeddings (≥ 2 dims), none on biases and LayerNorms.
  std::vector<Tensor> decayed, undecayed;
  for (const auto& [name, p] : model.named_parameters()) {
    (p.shape().rank() >= 2 ? decayed : undecayed).push_back(p);
  }
  optim::AdamW optimizer({{.params = decayed, .weight_decay = flags.weight_decay},
                          {.params = undecayed, .weight_decay = 0.0}},
                         {.lr = flags.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  optim::LambdaLR scheduler(optimizer, [&flags](int64_t s) { return lr_factor(flags, s); });
  const std::vector<Tensor> params = model.parameters();

  const std::string device_name = fmt::format("{}/{}", device.to_string(), ordinal);
  const int64_t tokens_per_step = flags.batch_size * flags.block_size * world;
  // (Under SPMD every process is ordinal 0 of a world of 1: the first process reports.)
  const bool master = is_master_ordinal(/*local=*/false) && process_index() == 0;
  // Tokens per second since the last report, smoothed, and since the start (PyTorch/XLA's
  // RateTracker), and the first loss logged; used from the closure thread only.
  struct Progress {
    double first_loss = -1;
    int64_t logged_step = 0;
    RateTracker tokens;
  };
  auto progress = std::make_shared<Progress>();
  // TensorBoard summaries (tensorboard --logdir DIR), from the master replica.
  std::shared_ptr<SummaryWriter> summaries;
  if (master && !flags.logdir.empty()) summaries = std::make_shared<SummaryWriter>(flags.logdir);
  // Step time: from the end of the second step (the first two compile: Adam's state appears in
  // the second) to the end of the last, without the evaluations.
  const int64_t warm = flags.max_steps > 2 ? 2 : 0;
  Clock::time_point timed_from = Clock::now();
  double eval_seconds = 0;
  double val_loss = 0;
  Tensor loss;
  // Batches reach the device ahead of the step that reads them, as in train_mnist; the loader
  // also keeps the host from running more than a few steps ahead of the device.
  DataLoader train_loader(
      std::make_shared<CharRows>(
          train_split, flags.block_size, flags.batch_size,
          flags.max_steps * world * flags.batch_size,
          flags.shuffle != 0 ? std::optional<uint64_t>(flags.seed) : std::nullopt),
      DataLoaderOptions{.batch_size = flags.batch_size,
                        .num_workers = 0,
                        .sampler = std::make_shared<ReplicaBatches>(
                            flags.max_steps, flags.batch_size, world, ordinal)});
  ParallelLoaderOptions loader_options;
  if (mesh) loader_options.input_sharding = InputSharding{*mesh, {"data", std::nullopt}};
  MpDeviceLoader device_loader(train_loader, device, loader_options);
  int64_t step = 0;
  for (const DeviceBatch& batch : device_loader) {
    ++step;
    const Tensor& inputs = batch[0];
    const Tensor& targets = batch[1];
    optimizer.zero_grad();
    loss = loss_of(trained, inputs, targets, flags);
    loss.backward();
    // As torch_xla's xm.reduce_gradients: clipping needs the averaged gradient (DDP and FSDP
    // have averaged it in backward).
    if (world > 1 && !fsdp && !ddp) {
      const NoGradGuard no_grad;
      std::vector<Tensor> grads;
      for (const Tensor& p : params) grads.push_back(p.grad());
      const std::vector<Tensor> averaged = all_reduce(ReduceType::kSum, grads, 1.0 / world);
      for (std::size_t i = 0; i < params.size(); ++i) params[i].set_grad(averaged[i]);
    }
    if (flags.grad_clip > 0) {
      // Under FSDP each replica holds shards of averaged gradients: the norm is the job's.
      (void)(fsdp ? fsdp->clip_grad_norm_(flags.grad_clip)
                  : optim::clip_grad_norm_(params, flags.grad_clip));
    }
    optimizer.step();
    // Added before the step is marked, so it runs once this step's device work is done.
    if (flags.log_steps > 0 && (step % flags.log_steps == 0 || step == 1)) {
      if (summaries) summaries->add_step_breakdown(step);
      add_step_closure(
          [progress, loss, step, device_name, tokens_per_step, &flags, master, summaries,
           lr = optimizer.param_groups().front().lr] {
            const double value = loss.item();
            Progress& p = *progress;
            if (p.first_loss < 0) p.first_loss = value;
            p.tokens.add(tokens_per_step * (step - p.logged_step));
            p.logged_step = step;
            if (process_index() != 0) return;
            fmt::print(
                "| Training Device={} Step={} Loss={:.5f} Rate={:.0f} GlobalRate={:.0f} tokens/s "
                "Lr={:.6f} Time={}\n",
                device_name, step, value, p.tokens.rate(), p.tokens.global_rate(), lr, now_text());
            std::fflush(stdout);
            if (master) {
              log_json(flags, fmt::format(R"({{"step":{},"train_loss":{:.6f},"lr":{:.8f}}})", step,
                                          value, lr));
            }
            if (summaries) {
              summaries->add_scalar("train/loss", value, step);
              summaries->add_scalar("train/lr", lr, step);
              summaries->add_scalar("train/tokens_per_s", p.tokens.rate(), step);
            }
          },
          /*run_async=*/true);
    }
    scheduler.step();
    mark_step();
    if (step == warm) {
      wait_device_ops({device});
      timed_from = Clock::now();
    }
    if ((flags.eval_interval > 0 && step % flags.eval_interval == 0) || step == flags.max_steps) {
      wait_device_ops({device});
      const auto eval_start = Clock::now();
      val_loss = validation_loss(model, val_split, flags, device);
      if (step > warm) eval_seconds += seconds_since(eval_start);
      if (master) {
        const int64_t compiles = counter_value("UncachedCompile").value_or(0);
        fmt::print(
            "| Eval Device={} Step={} ValLoss={:.5f} BitsPerByte={:.4f} Compiles={} Time={}\n",
            device_name, step, val_loss, val_loss / std::numbers::ln2, compiles, now_text());
        std::fflush(stdout);
        if (summaries) summaries->add_scalar("val/loss", val_loss, step);
        log_json(flags, fmt::format(R"({{"step":{},"val_loss":{:.6f},"compiles":{}}})", step,
                                    val_loss, compiles));
      }
    }
  }
  wait_device_ops();
  const double timed = seconds_since(timed_from) - eval_seconds;
  const int64_t timed_steps = flags.max_steps - warm;
  const double final_loss = loss.defined() ? loss.item() : 0;
  const int64_t compiles = counter_value("UncachedCompile").value_or(0);
  if (!flags.save.empty()) {
    if (fsdp) {
      // Every replica's shards, then the master puts them together into the model's file.
      const std::filesystem::path shards = flags.save + ".shards";
      if (is_master_ordinal(/*local=*/false)) std::filesystem::create_directories(shards);
      rendezvous("train_gpt shards dir");
      save(fsdp->sharded_checkpoint(),
           shards / fmt::format("rank-{}-of-{}.ckpt", global_ordinal(), world),
           /*master_only=*/false);
      if (is_master_ordinal(/*local=*/false)) {
        (void)consolidate_sharded_checkpoints((shards / "rank-").string(),
                                              fmt::format("*-of-{}.ckpt", world), flags.save);
      }
      rendezvous("train_gpt consolidated");
    } else {
      save_weights(model, flags.save);
    }
  }
  std::string text;
  if (flags.sample > 0) text = generate(model, flags, device);
  const MemoryInfo memory = get_memory_info(device);
  wait_device_ops();
  // What this replica's device holds of the model's state (under SPMD, its shard of each).
  auto held_bytes = [](const Tensor& t) -> uint64_t {
    if (!t.defined()) return 0;
    const DeviceData* data = t.impl()->data().get();
    if (data != nullptr && data->sharded()) return data->shards()[0]->bytes();
    return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
  };
  uint64_t state_bytes = 0;
  for (const Tensor& p : params) state_bytes += held_bytes(p) + held_bytes(p.grad());
  for (const auto& [name, t] : optimizer.state_dict()) state_bytes += held_bytes(t);
  const uint64_t most_state_bytes =
      mesh_reduce("replica_state_bytes", state_bytes,
                  [](const std::vector<uint64_t>& all) { return std::ranges::max(all); });
  std::vector<uint64_t> peaks = mesh_reduce("peak_device_bytes", memory.peak_bytes,
                                            [](const std::vector<uint64_t>& all) { return all; });
  if (master) {
    summary.parameter_bytes = parameter_bytes;
    for (const Tensor& p : params) {
      summary.parameter_bytes_per_device += static_cast<int64_t>(held_bytes(p));
    }
    summary.first_loss = progress->first_loss;
    summary.final_train_loss = final_loss;
    summary.final_val_loss = val_loss;
    summary.step_ms = timed_steps > 0 ? 1000 * timed / static_cast<double>(timed_steps) : 0;
    summary.compiles = compiles;
    summary.peak_device_bytes = memory.peak_bytes;
    summary.peak_bytes_by_ordinal = std::move(peaks);
    summary.replica_state_bytes = most_state_bytes;
    summary.sample = std::move(text);
  }
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
      "\"parameter_bytes\":{},\"parameter_bytes_per_device\":{},\"replica_state_bytes\":{}}}\n",
      summary.final_train_loss, summary.final_val_loss, summary.final_val_loss / std::numbers::ln2,
      summary.step_ms > 0 ? 1000.0 * static_cast<double>(tokens_per_step) / summary.step_ms : 0.0,
      summary.step_ms, summary.compiles, summary.peak_device_bytes, summary.first_loss,
      flags.max_steps, corpus.files, corpus.bytes.size(),
      flags.spmd ? global_device_count() : flags.num_devices,
      flags.spmd ? 1 : flags.num_devices * process_count(), flags.amp, flags.ddp,
      fmt::join(summary.peak_bytes_by_ordinal, ","), flags.spmd, flags.spmd ? flags.mesh : "",
      summary.parameter_bytes, summary.parameter_bytes_per_device, summary.replica_state_bytes);
  return 0;
}

}  // namespace
}  // namespace axle::samples

int main(int argc, char** argv) {
  axle::samples::Flags flags;
  CLI::App app{"train_gpt: a character-level GPT (nanoGPT's) on Debian's fortunes"};
  app.add_option("--n_layer", flags.n_layer)->check(axle::samples::positive());
  app.add_option("--n_head", flags.n_head)->check(axle::samples::positive());
  app.add_option("--n_embd", flags.n_embd)->check(axle::samples::positive());
  app.add_option("--block_size", flags.block_size)->check(axle::samples::positive());
  app.add_option("--batch_size", flags.batch_size, "rows per replica")
      ->check(axle::samples::positive());
  app.add_option("--max_steps", flags.max_steps)->check(axle::samples::positive());
  app.add_option("--lr", flags.lr, "peak learning rate")->check(axle::samples::non_negative());
  app.add_option("--min_lr", flags.min_lr, "the cosine ends here at --max_steps")
      ->check(axle::samples::non_negative());
  app.add_option("--warmup_steps", flags.warmup_steps)->check(axle::samples::positive());
  app.add_option("--weight_decay", flags.weight_decay, "AdamW's, on parameters of 2 dims or more")
      ->check(axle::samples::non_negative());
  app.add_option("--grad_clip", flags.grad_clip, "global gradient norm (0: no clipping)")
      ->check(axle::samples::non_negative());
  app.add_option("--eval_interval", flags.eval_interval, "steps between validation losses")
      ->check(axle::samples::non_negative());
  app.add_option("--eval_iters", flags.eval_iters, "validation batches per evaluation")
      ->check(axle::samples::positive());
  app.add_option("--seed", flags.seed);
  app.add_option("--shuffle", flags.shuffle,
                 "0 (default) takes rows in order; 1 draws them from the seed");
  app.add_option("--init", flags.init,
                 "start from these weights (.safetensors, or an axle checkpoint)");
  app.add_option("--save", flags.save,
                 "write the trained weights here (.safetensors, or else an axle checkpoint)");
  app.add_option("--num_devices", flags.num_devices,
                 "train data-parallel on this many devices (default: CPU_NUM_DEVICES, or 1); "
                 "--batch_size is per device")
      ->check(axle::samples::positive());
  app.add_option("--log_steps", flags.log_steps, "print the loss every this many steps")
      ->check(axle::samples::non_negative());
  app.add_option("--logdir", flags.logdir,
                 "write TensorBoard summaries (loss, lr, tokens/s, validation loss) to DIR, and "
                 "JSON lines of them to DIR/train_gpt.jsonl");
  app.add_option("--sample", flags.sample, "generate this many bytes after training")
      ->check(axle::samples::non_negative());
  app.add_option("--temperature", flags.temperature)->check(axle::samples::positive());
  app.add_option("--top_k", flags.top_k, "sample among the k likeliest bytes (0: all)")
      ->check(axle::samples::non_negative());
  app.add_option("--data_dir", flags.data_dir, "the directory of fortune files");
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
  CLI11_PARSE(app, argc, argv);
  try {
    if (flags.spmd) {
      // The mesh spans the job: under mpirun each process holds its share of the devices.
      const std::vector<int64_t> mesh = axle::samples::mesh_shape(flags.mesh);
      const int processes = axle::process_count();
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
