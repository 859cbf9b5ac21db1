// samples/train_mnist: trains an MLP or a CNN on Fashion-MNIST (or synthetic data) on one device
// or data-parallel on several (--num_devices), as PyTorch/XLA's test_train_mp_mnist does: spawn
// runs one replica per device, each on its share of the data; the whole step (forward,
// backward, gradients averaged across replicas, SGD) traces into one graph, and losses are
// printed by asynchronous step closures, so logging never waits for the device.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>

#include "axle/axle.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/fashion_mnist.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/shard.h"
#include "axle/io/summary_writer.h"
#include "samples/flag_checks.h"
#include "samples/mnist_models.h"
#include "samples/resume.h"
#include "samples/trainer_log.h"
#include "samples/weights.h"

namespace axle::samples {
namespace {

struct Flags {
  std::string model = "mlp";
  int64_t batch_size = 128;
  int num_epochs = 1;
  int64_t max_steps = 0;  // 0: no limit
  double lr = 0.01;
  double momentum = 0.9;
  int shuffle = 1;
  bool fake_data = false;
  uint64_t seed = 1;
  int64_t log_steps = 20;
  std::string init;
  std::string save;
  bool metrics_debug = false;
  std::string data_dir = std::string(FashionMnist::kDefaultDir);
  int num_workers = 1;
  int num_devices = 0;  // replicas, one per device (0: as many as axle starts with)
  std::string trace;    // a Chrome trace of the first trace_steps steps
  int64_t trace_steps = 20;
  bool ddp = false;             // DistributedDataParallel averages the gradients during backward
  bool fsdp = false;            // FullyShardedDataParallel: each replica keeps 1/N of the model
  bool spmd = false;            // one program over a data x model mesh of every device (use_spmd)
  std::string mesh = "4,1";     // --spmd's mesh shape: data, model
  std::string logdir;           // TensorBoard summaries
  CheckpointFlags checkpoints;  // --checkpoint_dir, --checkpoint_every, --keep, --resume
};

std::shared_ptr<const Dataset> dataset(const Flags& flags, Split split) {
  if (flags.fake_data) {
    return std::make_shared<FakeData>(FakeDataOptions{
        .size = split == Split::kTrain ? 60000 : 10000, .seed = split == Split::kTrain ? 1u : 2u});
  }
  return std::make_shared<FashionMnist>(split, flags.data_dir);
}

Tensor to_device(const CpuTensor& host, Device device) {
  return tensor_from_bytes(host.bytes, host.dtype, host.shape, device);
}

// This replica's share of the test set, classified: {correct, seen}. The count accumulates on
// the device.
std::pair<int64_t, int64_t> test_counts(nn::Module& model, const Flags& flags, Device device) {
  model.eval();
  NoGradGuard no_grad;
  DataLoader loader(
      std::make_shared<ShardedDataset>(dataset(flags, Split::kTest), world_size(),
                                       global_ordinal()),
      DataLoaderOptions{.batch_size = flags.batch_size, .num_workers = flags.num_workers});
  Tensor correct = zeros(Shape{}, DType::kInt64, device);
  int64_t seen = 0;
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    const Batch& batch = *it;
    const Tensor predicted = argmax(model(to_device(batch[0], device)), 1);
    correct = correct + sum(cast(eq(predicted, to_device(batch[1], device)), DType::kInt64));
    seen += batch[1].shape[0];
    mark_step();
  }
  model.train();
  return {static_cast<int64_t>(correct.item()), seen};
}

// A digest of every parameter's bytes, to tell whether replicas hold the same model.
uint64_t parameters_digest(const nn::Module& model) {
  uint64_t digest = 1469598103934665603ULL;  // FNV-1a
  for (const auto& [name, t] : model.state_dict()) {
    for (std::byte b : t.cpu().bytes) {
      digest = (digest ^ static_cast<uint64_t>(b)) * 1099511628211ULL;
    }
  }
  return digest;
}

// The same digest of an FSDP model's whole parameters, gathered from every replica's shards (in
// the shards' order, with their padding).
uint64_t gathered_digest(const FullyShardedDataParallel& fsdp) {
  uint64_t digest = 1469598103934665603ULL;  // FNV-1a
  const NoGradGuard no_grad;
  for (const Tensor& shard : fsdp.parameters()) {
    for (std::byte b : all_gather(reshape(shard, {shard.numel()}), 0).cpu().bytes) {
      digest = (digest ^ static_cast<uint64_t>(b)) * 1099511628211ULL;
    }
  }
  return digest;
}

struct Summary {
  double accuracy = 0;
  int64_t samples = 0;  // across replicas
  bool replicas_identical = true;
  int64_t resumed_from_step = 0;
};

// The model as this replica trains it: itself, one FullyShardedDataParallel unit (--fsdp: each
// replica keeps 1/N of its parameters and of the momentum, gathers them for each forward and gets
// its shard of the averaged gradients from backward), or through DistributedDataParallel (--ddp:
// backward averages the gradients, optimizer_step only steps). Testing and saving use the model
// itself (FSDP's parameters through it).
struct Trainee {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<FullyShardedDataParallel> fsdp;
  std::shared_ptr<nn::Module> trained;

  [[nodiscard]] nn::Module& held() const { return fsdp ? *fsdp : *model; }
};

Trainee make_trainee(const Flags& flags, Device device) {
  Trainee t;
  set_rng_state(flags.seed, device);  // every replica starts from the same weights
  t.model = make_mnist_model(flags.model, device);
  if (!flags.init.empty()) load_weights(*t.model, flags.init, device);
  t.trained = t.model;
  if (flags.fsdp) {
    mark_step();  // the initial weights, then their shards
    t.fsdp = std::make_shared<FullyShardedDataParallel>(t.model);
    mark_step();
    t.trained = t.fsdp;
  }
  if (flags.ddp) t.trained = std::make_shared<DistributedDataParallel>(t.model);
  return t;
}

// What a replica reports as it trains, from the step closures' thread.
struct Reporter {
  std::string device_name;
  std::shared_ptr<SummaryWriter> summaries;  // TensorBoard, from the master replica
  RateTracker tracker;

  // The closure of a logged step: RateTracker times it by when the step's device work was done,
  // however late the closure runs.
  void train_step(int epoch, int64_t step, int64_t samples, const Tensor& loss_value, double lr) {
    tracker.add(samples);
    // Every replica reads its loss (the same step graph everywhere); the replicas of the first
    // process print it (in a job of several processes, only those).
    const double loss = loss_value.item();
    if (summaries) {
      summaries->add_scalar("train/loss", loss, step);
      summaries->add_scalar("train/lr", lr, step);
      summaries->add_scalar("train/samples_per_s", tracker.rate(), step);
    }
    if (process_index() != 0) return;
    fmt::print(
        "| Training Device={} Epoch={} Step={} Loss={:.5f} Rate={:.2f} GlobalRate={:.2f} "
        "Time={}\n",
        device_name, epoch, step, loss, tracker.rate(), tracker.global_rate(), now_text());
    std::fflush(stdout);
  }
};

// The job's test accuracy after `epoch`, printed by the master replica.
double test_accuracy(const Trainee& t, const Flags& flags, Device device, int epoch,
                     const Reporter& reporter, int64_t step) {
  const auto [correct, seen] = test_counts(t.held(), flags, device);
  const auto total = mesh_reduce("test_accuracy", std::pair<int64_t, int64_t>(correct, seen),
                                 [](const std::vector<std::pair<int64_t, int64_t>>& all) {
                                   std::pair<int64_t, int64_t> sum{0, 0};
                                   for (const auto& [c, s] : all) {
                                     sum = {sum.first + c, sum.second + s};
                                   }
                                   return sum;
                                 });
  const double accuracy =
      total.second == 0 ? 0 : static_cast<double>(total.first) / static_cast<double>(total.second);
  if (is_master_ordinal(/*local=*/false)) {
    fmt::print("| Test Device={} Epoch={} Accuracy={:.2f}% Time={}\n", reporter.device_name, epoch,
               100 * accuracy, now_text());
  }
  if (reporter.summaries) reporter.summaries->add_scalar("test/accuracy", accuracy, step);
  return accuracy;
}

// One step on `batch`: forward, backward, and the update — FSDP's shards step on the gradients
// backward gave them; otherwise optimizer_step averages the gradients across replicas (unless
// DDP did). The loss.
Tensor train_step(const Trainee& t, optim::SGD& optimizer, const DeviceBatch& batch) {
  optimizer.zero_grad();
  const Tensor loss = nn::nll_loss((*t.trained)(batch[0]), batch[1]);
  loss.backward();
  if (t.fsdp) {
    optimizer.step();
  } else {
    optimizer_step(optimizer);
  }
  return loss;
}

// Whether every replica ends with the same parameters, and the samples the job trained on.
std::pair<bool, int64_t> job_outcome(const Trainee& t, int64_t samples) {
  const int64_t all_samples = mesh_reduce("samples", samples, [](const std::vector<int64_t>& all) {
    int64_t sum = 0;
    for (int64_t n : all) sum += n;
    return sum;
  });
  const bool identical =
      mesh_reduce("parameters", t.fsdp ? gathered_digest(*t.fsdp) : parameters_digest(*t.model),
                  [](const std::vector<uint64_t>& all) {
                    return std::ranges::all_of(all, [&](uint64_t d) { return d == all.front(); });
                  });
  return {identical, all_samples};
}

// What a replica's epochs leave: the steps (counted from the first) and samples trained, and the
// last test accuracy.
struct EpochsRun {
  int64_t step = 0;
  int64_t samples = 0;
  double accuracy = 0;
};

// The epochs from the step the run was restored at: batches reach the device ahead of the step
// that reads them (iterating marks the step), a checkpoint every --checkpoint_every steps, the
// test accuracy after each epoch.
EpochsRun train_epochs(const Flags& flags, const Trainee& t, optim::SGD& optimizer,
                       DataLoader& train_loader, const Resumable& resume,
                       const std::shared_ptr<Reporter>& reporter) {
  const Device device = xla_device();
  EpochsRun run{.step = resume.first_step};
  // A restored loader goes on where the run stood: inside an epoch, or at the next one.
  const int first_epoch = static_cast<int>(train_loader.epoch()) + 1;
  bool done = flags.max_steps > 0 && run.step >= flags.max_steps;
  for (int epoch = first_epoch; epoch <= flags.num_epochs && !done; ++epoch) {
    train_loader.set_epoch(epoch - 1);
    // One per epoch: a resumed epoch has fewer batches than the others.
    for (const DeviceBatch& batch : MpDeviceLoader(train_loader, device)) {
      // The loader marked the last traced step as it handed out this batch.
      if (!flags.trace.empty() && run.step == flags.trace_steps && is_master_ordinal(false)) {
        wait_device_ops({device});  // this replica's traced steps (others may be ahead)
        fmt::print(stderr, "train_mnist: {} spans of {} steps in {}\n", stop_trace(), run.step,
                   flags.trace);
      }
      const Tensor loss = train_step(t, optimizer, batch);
      const int64_t step = ++run.step;
      const int64_t batch_samples = batch[1].size(0);
      run.samples += batch_samples;
      if (flags.log_steps > 0 && step % flags.log_steps == 0) {
        if (reporter->summaries) reporter->summaries->add_step_breakdown(step);
        add_step_closure([reporter, loss, step, epoch, logged = batch_samples * flags.log_steps,
                          lr = flags.lr] { reporter->train_step(epoch, step, logged, loss, lr); },
                         /*run_async=*/true);
      }
      const bool preempted = resume.save(step);  // then saved at this step, as every replica
      if (preempted || (flags.max_steps > 0 && step >= flags.max_steps)) {
        mark_step();  // leaving the loop early does not mark the last step
        done = true;
        break;
      }
    }
    wait_device_ops();
    run.accuracy = test_accuracy(t, flags, device, epoch, *reporter, run.step);
  }
  // Restored after its last step: the accuracy of the weights it has.
  if (first_epoch > flags.num_epochs && flags.num_epochs > 0) {
    run.accuracy = test_accuracy(t, flags, device, flags.num_epochs, *reporter, run.step);
  }
  return run;
}

// The training batches of `data` (a replica's share, or the whole set under --spmd).
DataLoader train_loader_of(const Flags& flags, std::shared_ptr<const Dataset> data, uint64_t seed) {
  return DataLoader(std::move(data), DataLoaderOptions{.batch_size = flags.batch_size,
                                                       .shuffle = flags.shuffle != 0,
                                                       .seed = seed,
                                                       .drop_last = true,
                                                       .num_workers = flags.num_workers});
}

// One replica's training, as test_train_mp_mnist's _mp_fn: its own model on its own device, its
// share of the data, and gradients averaged across replicas by optimizer_step.
void train_replica(const Flags& flags, Summary& summary) {
  const int ordinal = global_ordinal();
  const Device device = xla_device();
  const Trainee t = make_trainee(flags, device);
  optim::SGD optimizer(t.held().parameters(), {.lr = flags.lr, .momentum = flags.momentum});
  DataLoader train_loader = train_loader_of(
      flags, std::make_shared<ShardedDataset>(dataset(flags, Split::kTrain), world_size(), ordinal),
      flags.seed + static_cast<uint64_t>(ordinal));
  auto reporter = std::make_shared<Reporter>();
  reporter->device_name = fmt::format("{}/{}", device.to_string(), ordinal);
  if (!flags.logdir.empty() && is_master_ordinal(/*local=*/false)) {
    reporter->summaries = std::make_shared<SummaryWriter>(flags.logdir);
  }
  const Resumable resume = resumable(flags.checkpoints, {.model = &t.held(),
                                                         .optimizer = &optimizer,
                                                         .data_loader = &train_loader,
                                                         .sharded = t.fsdp != nullptr});
  const EpochsRun run = train_epochs(flags, t, optimizer, train_loader, resume, reporter);
  wait_device_ops();
  const auto [identical, all_samples] = job_outcome(t, run.samples);
  if (!flags.save.empty() && t.fsdp) {
    save_fsdp_weights(*t.fsdp, flags.save);
  } else if (!flags.save.empty()) {
    save_weights(*t.model, flags.save);
  }
  if (is_master_ordinal(/*local=*/false)) {
    summary = Summary{run.accuracy, all_samples, identical, resume.first_step};
  }
}

// --mesh as a mesh of every device of the job (global ordinals, process-major under mpirun),
// checked against the job and --batch_size.
spmd::Mesh job_mesh(const Flags& flags) {
  const std::vector<int64_t> shape = mesh_shape(flags.mesh);
  const int64_t devices = shape[0] * shape[1];
  if (devices != global_device_count()) {
    throw std::invalid_argument(fmt::format(
        "--mesh {} holds {} devices, but the job has {} ({} process{} of {})", flags.mesh, devices,
        global_device_count(), process_count(), process_count() == 1 ? "" : "es", device_count()));
  }
  if (flags.batch_size % shape[0] != 0) {
    throw std::invalid_argument(
        fmt::format("--batch_size {} does not split evenly over the mesh's {} data shards",
                    flags.batch_size, shape[0]));
  }
  std::vector<int64_t> ids(static_cast<std::size_t>(devices));
  std::iota(ids.begin(), ids.end(), 0);
  return spmd::Mesh(ids, shape, {"data", "model"});
}

// The MLP's first hidden layer column-parallel and the next row-parallel over "model"
// (Megatron), so one all_reduce joins them.
void shard_over_model_axis(const nn::Module& model, const spmd::Mesh& mesh) {
  constexpr auto None = std::nullopt;
  for (const auto& [name, parameter] : model.named_parameters()) {
    if (name == "fc1.weight") spmd::mark_sharding(parameter, mesh, {"model", None});
    if (name == "fc1.bias") spmd::mark_sharding(parameter, mesh, {"model"});
    if (name == "fc2.weight") spmd::mark_sharding(parameter, mesh, {None, "model"});
  }
}

// The test set classified with the batch split over "data" too: {correct, seen}. Every test
// sample, as the one-device run sees them (the same accuracy and compiles), unless the last,
// short batch does not split evenly over "data": then it is left out.
std::pair<int64_t, int64_t> spmd_test_counts(nn::Module& model, const Flags& flags,
                                             const spmd::Mesh& mesh, Device device,
                                             const ParallelLoaderOptions& sharded) {
  model.eval();
  NoGradGuard no_grad;
  const std::shared_ptr<const Dataset> test_set = dataset(flags, Split::kTest);
  const bool uneven_tail = test_set->size() % flags.batch_size % mesh.mesh_shape()[0] != 0;
  DataLoader test_loader(test_set, DataLoaderOptions{.batch_size = flags.batch_size,
                                                     .drop_last = uneven_tail,
                                                     .num_workers = flags.num_workers});
  Tensor hits = zeros(Shape{}, DType::kInt64, device);
  int64_t seen = 0;
  for (const DeviceBatch& batch : MpDeviceLoader(test_loader, device, sharded)) {
    const Tensor predicted = argmax(model(batch[0]), 1);
    hits = hits + sum(cast(eq(predicted, batch[1]), DType::kInt64));
    seen += batch[1].size(0);
  }
  return {static_cast<int64_t>(hits.item()), seen};
}

// What each device holds of the parameters, and the whole model's: {whole, per device}.
std::pair<int64_t, int64_t> parameter_bytes(const nn::Module& model) {
  int64_t whole_bytes = 0, device_bytes = 0;
  for (const Tensor& p : model.parameters()) {
    const DeviceData& data = *p.impl()->data();
    whole_bytes += static_cast<int64_t>(data.bytes());
    device_bytes += static_cast<int64_t>(data.sharded() ? data.shards()[0]->bytes() : data.bytes());
  }
  return {whole_bytes, device_bytes};
}

// --spmd's training steps, epoch by epoch up to --max_steps, from the step the run was restored
// at (the loader going on where it stood), a checkpoint every --checkpoint_every steps:
// {steps, samples}.
std::pair<int64_t, int64_t> spmd_train_steps(const Flags& flags, nn::Module& model,
                                             optim::SGD& optimizer, DataLoader& train_loader,
                                             const Resumable& resume,
                                             const ParallelLoaderOptions& sharded,
                                             const std::shared_ptr<Reporter>& reporter,
                                             bool reports) {
  const Device device = xla_device();
  int64_t step = resume.first_step, samples = 0;
  bool done = flags.max_steps > 0 && step >= flags.max_steps;
  for (int epoch = static_cast<int>(train_loader.epoch()) + 1; epoch <= flags.num_epochs && !done;
       ++epoch) {
    train_loader.set_epoch(epoch - 1);
    for (const DeviceBatch& batch : MpDeviceLoader(train_loader, device, sharded)) {
      optimizer.zero_grad();
      const Tensor loss = nn::nll_loss(model(batch[0]), batch[1]);
      loss.backward();
      optimizer.step();  // the program holds the gradients' reduction over "data"
      ++step;
      const int64_t batch_samples = batch[1].size(0);
      samples += batch_samples;
      if (flags.log_steps > 0 && step % flags.log_steps == 0) {
        if (reporter->summaries) reporter->summaries->add_step_breakdown(step);
        // Every process keeps the loss (an output of the step: the processes' programs must be
        // the same); the first reads and prints it.
        add_step_closure(
            [reports, reporter, loss, step, epoch, logged = batch_samples * flags.log_steps,
             lr = flags.lr] {
              if (reports) reporter->train_step(epoch, step, logged, loss, lr);
            },
            /*run_async=*/true);
      }
      const bool preempted = resume.save(step);  // then saved at this step, by every process
      if (preempted || (flags.max_steps > 0 && step >= flags.max_steps)) {
        mark_step();
        done = true;
        break;
      }
    }
  }
  wait_device_ops();
  return {step, samples};
}

// With --spmd: one program over a mesh of every device, axes "data" and "model", as torch_xla's
// SPMD samples. The batch is split over "data" as the loader places it; the first hidden layer
// is column-parallel and the next row-parallel over "model" (Megatron), so one all_reduce joins
// them; the compiler adds the collectives the rest needs (the gradients' reduction over "data").
int train_spmd(const Flags& flags) {
  const auto start = Clock::now();
  const spmd::Mesh mesh = job_mesh(flags);
  const bool reports = process_index() == 0;  // every process runs the program; the first reports
  const Device device = xla_device();
  set_rng_state(flags.seed, device);
  std::shared_ptr<nn::Module> model = make_mnist_model(flags.model, device);
  if (!flags.init.empty()) load_weights(*model, flags.init, device);
  shard_over_model_axis(*model, mesh);
  optim::SGD optimizer(model->parameters(), {.lr = flags.lr, .momentum = flags.momentum});
  const ParallelLoaderOptions sharded{
      .input_sharding = InputSharding{mesh, {"data", std::nullopt, std::nullopt, std::nullopt}}};
  auto reporter = std::make_shared<Reporter>();
  reporter->device_name = "xla:0/spmd";
  if (!flags.logdir.empty() && reports) {
    reporter->summaries = std::make_shared<SummaryWriter>(flags.logdir);
  }
  DataLoader train_loader = train_loader_of(flags, dataset(flags, Split::kTrain), flags.seed);
  const Resumable resume =
      resumable(flags.checkpoints,
                {.model = model.get(), .optimizer = &optimizer, .data_loader = &train_loader});
  const auto [step, samples] =
      spmd_train_steps(flags, *model, optimizer, train_loader, resume, sharded, reporter, reports);
  const double train_seconds = seconds_since(start);
  const auto [correct, seen] = spmd_test_counts(*model, flags, mesh, device, sharded);
  if (reporter->summaries && seen > 0) {
    reporter->summaries->add_scalar("test/accuracy", static_cast<double>(correct) / seen, step);
  }
  const auto [whole_bytes, device_bytes] = parameter_bytes(*model);
  if (!flags.save.empty()) save_weights(*model, flags.save);
  if (!reports) return 0;
  if (flags.metrics_debug) fmt::print("{}", metrics_report());
  fmt::print(
      "{{\"final_test_accuracy\":{:.4f},\"train_samples_per_s\":{:.1f},\"compiles\":{},"
      "\"devices\":{},\"spmd\":true,\"mesh\":\"{}\",\"processes\":{},"
      "\"parameter_bytes\":{},\"parameter_bytes_per_device\":{},\"resumed_from_step\":{}}}\n",
      seen == 0 ? 0.0 : static_cast<double>(correct) / seen,
      static_cast<double>(samples) / train_seconds, counter_value("UncachedCompile").value_or(0),
      mesh.device_ids().size(), flags.mesh, process_count(), whole_bytes, device_bytes,
      resume.first_step);
  return 0;
}

int train(const Flags& flags) {
  if (flags.spmd) return train_spmd(flags);
  const auto start = Clock::now();
  Summary summary;
  if (!flags.trace.empty()) start_trace(flags.trace);
  spawn([&](int) { train_replica(flags, summary); }, flags.num_devices);
  const double train_seconds = seconds_since(start);
  if (trace_recording()) (void)stop_trace();  // fewer steps than --trace_steps
  // In a job of several processes (mpirun), the global master's process reports.
  if (process_index() != 0) return 0;
  if (flags.metrics_debug) fmt::print("{}", metrics_report());
  fmt::print(
      "{{\"final_test_accuracy\":{:.4f},\"train_samples_per_s\":{:.1f},\"compiles\":{},"
      "\"devices\":{},\"processes\":{},\"world_size\":{},\"replicas_identical\":{},"
      "\"ddp\":{},\"fsdp\":{},\"resumed_from_step\":{}}}\n",
      summary.accuracy, static_cast<double>(summary.samples) / train_seconds,
      counter_value("UncachedCompile").value_or(0), flags.num_devices, process_count(),
      flags.num_devices * process_count(), summary.replicas_identical, flags.ddp, flags.fsdp,
      summary.resumed_from_step);
  return 0;
}

// train_mnist's command line.
void add_flags(CLI::App& app, Flags& flags) {
  app.add_option("--model", flags.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--batch_size", flags.batch_size)->check(positive());
  app.add_option("--num_epochs", flags.num_epochs)->check(non_negative());
  app.add_option("--max_steps", flags.max_steps, "stop after this many steps (0: no limit)")
      ->check(non_negative());
  app.add_option("--lr", flags.lr)->check(non_negative());
  app.add_option("--momentum", flags.momentum)->check(non_negative());
  app.add_option("--shuffle", flags.shuffle, "1 shuffles the training set each epoch");
  CLI::Option* ddp_flag = app.add_flag(
      "--ddp", flags.ddp,
      "train through DistributedDataParallel (gradients averaged in buckets during backward)");
  CLI::Option* fsdp_flag =
      app.add_flag("--fsdp", flags.fsdp,
                   "train through FullyShardedDataParallel (parameters, gradients and momentum "
                   "sharded 1/N across the replicas)")
          ->excludes(ddp_flag);
  app.add_flag("--spmd", flags.spmd,
               "one program over a mesh of every device (use_spmd): the batch split over "
               "\"data\", the hidden layers over \"model\"")
      ->excludes(ddp_flag)
      ->excludes(fsdp_flag);
  app.add_option("--mesh", flags.mesh,
                 "--spmd's mesh shape, data,model (e.g. 4,1 data-parallel, 1,4 model-parallel); "
                 "sets the device count");
  app.add_flag("--fake_data", flags.fake_data, "synthetic data instead of Fashion-MNIST");
  app.add_option("--seed", flags.seed);
  app.add_option("--log_steps", flags.log_steps, "print the loss every this many steps")
      ->check(non_negative());
  app.add_option("--init", flags.init,
                 "start from these weights (.safetensors, or an axle checkpoint)");
  app.add_option("--save", flags.save,
                 "write the trained weights here (.safetensors, or else an axle checkpoint)");
  app.add_option("--logdir", flags.logdir,
                 "write TensorBoard summaries (loss, lr, samples/s, test accuracy) to DIR");
  app.add_flag("--metrics_debug", flags.metrics_debug, "print the metrics report at the end");
  app.add_option("--data_dir", flags.data_dir, "where the Fashion-MNIST files are");
  app.add_option("--num_workers", flags.num_workers, "data loader worker threads per replica")
      ->check(non_negative());
  app.add_option("--num_devices", flags.num_devices,
                 "train data-parallel on this many devices (default: CPU_NUM_DEVICES, or 1); "
                 "--batch_size is per device")
      ->check(positive());
  app.add_option("--trace", flags.trace,
                 "write a Chrome trace (Perfetto, chrome://tracing) of the first steps here");
  app.add_option("--trace_steps", flags.trace_steps, "steps the --trace covers")->check(positive());
  add_checkpoint_flags(app, flags.checkpoints);
}

// The devices are made on first use, from CPU_NUM_DEVICES: the device count (--num_devices, or
// --mesh's under --spmd) sets it first; the dataset falls back to --fake_data when missing.
void set_up_devices(Flags& flags) {
  if (flags.spmd) {
    // The mesh spans the job: under mpirun each process holds its share of the devices.
    const std::vector<int64_t> mesh = mesh_shape(flags.mesh);
    const int processes = process_count();
    if ((mesh[0] * mesh[1]) % processes != 0) {
      throw std::invalid_argument(
          fmt::format("--mesh {} does not split over {} processes", flags.mesh, processes));
    }
    flags.num_devices = static_cast<int>(mesh[0] * mesh[1] / processes);
  }
  if (flags.num_devices > 0) {
    setenv("CPU_NUM_DEVICES", std::to_string(flags.num_devices).c_str(), /*overwrite=*/1);
  }
  if (flags.spmd) use_spmd();
  flags.num_devices = device_count();
  if (!flags.fake_data && !std::filesystem::exists(flags.data_dir)) {
    std::fprintf(stderr, "train_mnist: no dataset in %s; training on --fake_data\n",
                 flags.data_dir.c_str());
    flags.fake_data = true;
  }
}

}  // namespace
}  // namespace axle::samples

int main(int argc, char** argv) {
  axle::samples::Flags flags;
  CLI::App app{"train_mnist: an MLP or CNN on Fashion-MNIST, as PyTorch/XLA's MNIST sample"};
  axle::samples::add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    axle::samples::set_up_devices(flags);
    return axle::samples::train(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mnist: %s\n", e.what());
    return 1;
  }
}
