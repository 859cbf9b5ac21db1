// samples/train_resnet: torchvision's ResNet-18 or ResNet-50 trained on fake ImageNet-shaped data,
// as PyTorch/XLA's test_train_mp_imagenet --fake_data: one device, or data-parallel on several
// (--num_devices), spawn running one replica per device. Each replica draws one batch of random
// images and labels over 1000 classes at the start and is served it again every step (as
// SampleGenerator does), through a DataLoader and MpDeviceLoader so the batch reaches the device
// ahead of its step. The whole step (forward with BatchNorm's running statistics, backward,
// gradients averaged across replicas, SGD) traces into one graph; losses are printed by
// asynchronous step closures, so logging never waits for the device. With --checkpoint_dir the
// run's state (the master's weights and SGD's momentum, every replica's BatchNorm statistics and
// random streams) is saved every --checkpoint_every steps, and --resume goes on from the newest.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "axle/axle.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/summary_writer.h"
#include "samples/flag_checks.h"
#include "samples/resnet_model.h"
#include "samples/resume.h"
#include "samples/trainer_log.h"
#include "samples/weights.h"

namespace axle::samples {
namespace {

struct Flags {
  std::string model = "resnet18";
  int64_t image_size = 224;
  int64_t batch_size = 8;  // per replica
  int64_t max_steps = 100;
  int num_devices = 0;  // replicas, one per device (0: as many as axle starts with)
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  int64_t log_steps = 20;
  bool fake_data = false;  // accepted; fake data is the only data
  uint64_t seed = 42;
  bool eval = true;
  std::string logdir;           // TensorBoard summaries
  std::string save;             // the trained weights (empty: not written)
  CheckpointFlags checkpoints;  // --checkpoint_dir, --checkpoint_every, --keep, --resume
};

constexpr int64_t kClasses = 1000;

// PyTorch/XLA's xu.SampleGenerator over torchvision-like FakeData: `count` samples drawn once,
// then served again and again (sample i is sample i mod count) for `size` samples in all.
class RepeatedSamples final : public Dataset {
 public:
  RepeatedSamples(const Dataset& source, int64_t count, int64_t size) : size_(size) {
    for (int64_t i = 0; i < count; ++i) samples_.push_back(source.get(i));
  }
  [[nodiscard]] int64_t size() const override { return size_; }
  [[nodiscard]] Sample get(int64_t index) const override {
    if (index < 0 || index >= size_) {
      throw std::out_of_range(fmt::format("fake data: sample {} of {}", index, size_));
    }
    return samples_[static_cast<std::size_t>(index % static_cast<int64_t>(samples_.size()))];
  }

 private:
  std::vector<Sample> samples_;
  int64_t size_;
};

struct Summary {
  double first_loss = 0;
  double final_loss = 0;
  double step_ms = 0;
  int64_t warmup_compiles = 0;
  int64_t compiles = 0;
  uint64_t peak_device_bytes = 0;
  double eval_loss = 0;
  double eval_accuracy = 0;
  int64_t parameters = 0;
  int64_t resumed_from_step = 0;
};

// What a replica reports: images per second since the last report, smoothed, and since the
// start (PyTorch/XLA's RateTracker), the first loss logged, the evaluation. The step closures
// use it from their thread only.
struct Progress {
  std::string device_name;
  std::shared_ptr<SummaryWriter> summaries;  // TensorBoard, from the master replica
  RateTracker images;
  double first_loss = -1;

  // The closure of a logged step: RateTracker times it by when the step's device work was done,
  // however late the closure runs.
  void train_step(int64_t step, int64_t batch_images, const Tensor& loss, double lr) {
    images.add(batch_images);
    const double value = loss.item();
    if (first_loss < 0) first_loss = value;
    if (summaries) {
      summaries->add_scalar("train/loss", value, step);
      summaries->add_scalar("train/lr", lr, step);
      summaries->add_scalar("train/images_per_s", images.rate(), step);
    }
    if (process_index() != 0) return;
    fmt::print(
        "| Training Device={} Step={} Loss={:.5f} Rate={:.2f} GlobalRate={:.2f} images/s "
        "Time={}\n",
        device_name, step, value, images.rate(), images.global_rate(), now_text());
    std::fflush(stdout);
  }

  // The master replica's report of the evaluation.
  void evaluation(int64_t step, std::pair<double, double> eval) const {
    if (!is_master_ordinal(/*local=*/false)) return;
    fmt::print("| Test Device={} Loss={:.5f} Accuracy={:.2f}% Time={}\n", device_name, eval.first,
               100 * eval.second, now_text());
    if (summaries) {
      summaries->add_scalar("test/loss", eval.first, step);
      summaries->add_scalar("test/accuracy", eval.second, step);
    }
  }
};

// The model in eval mode (BatchNorm on its running statistics) on this replica's fixed batch:
// {loss, accuracy}, averaged over the replicas.
std::pair<double, double> evaluate(ResNet& model, const Tensor& images, const Tensor& labels) {
  model.eval();
  const NoGradGuard no_grad;
  const Tensor logits = model(images);
  const Tensor loss = nn::cross_entropy(logits, labels);
  const Tensor correct = sum(cast(eq(argmax(logits, 1), labels), DType::kInt64));
  mark_step();
  model.train();
  const double n = static_cast<double>(labels.size(0));
  const std::pair<double, double> mine{loss.item(), correct.item() / n};
  return mesh_reduce("eval", mine, [](const std::vector<std::pair<double, double>>& all) {
    std::pair<double, double> mean{0, 0};
    for (const auto& [l, a] : all) mean = {mean.first + l, mean.second + a};
    const auto k = static_cast<double>(all.size());
    return std::pair<double, double>{mean.first / k, mean.second / k};
  });
}

// This replica's fake images, the same batch each step (its own per replica), max_steps of them.
DataLoader fake_loader(const Flags& flags, int ordinal) {
  const FakeData fake(FakeDataOptions{.size = flags.batch_size,
                                      .sample_shape = {3, flags.image_size, flags.image_size},
                                      .num_classes = kClasses,
                                      .seed = flags.seed + static_cast<uint64_t>(ordinal)});
  return DataLoader(
      std::make_shared<RepeatedSamples>(fake, flags.batch_size, flags.max_steps * flags.batch_size),
      DataLoaderOptions{.batch_size = flags.batch_size});
}

std::shared_ptr<Progress> make_progress(const Flags& flags, const Device& device, int ordinal) {
  auto progress = std::make_shared<Progress>();
  progress->device_name = fmt::format("{}/{}", device.to_string(), ordinal);
  if (!flags.logdir.empty() && is_master_ordinal(/*local=*/false)) {
    progress->summaries = std::make_shared<SummaryWriter>(flags.logdir);
  }
  return progress;
}

// What the training loop leaves for the summary.
struct TrainedRun {
  int64_t steps = 0;
  int64_t warm = 0;  // steps before the timing starts
  double timed_seconds = 0;
  int64_t warmup_compiles = 0;
  Tensor loss, images, labels;  // the last step's
};

// The steps, as the script's train_loop_fn, from the step the run was restored at, with a
// checkpoint every --checkpoint_every steps. Step time: from the end of the second step run (the
// first two compile: the momentum buffers appear in the second) to the end of the last.
TrainedRun train_steps(const Flags& flags, ResNet& model, optim::SGD& optimizer,
                       DataLoader& train_loader, const Resumable& resume,
                       const std::shared_ptr<Progress>& progress) {
  const Device device = xla_device();
  TrainedRun run{.steps = resume.first_step};
  const int64_t to_run = flags.max_steps - resume.first_step;
  run.warm = resume.first_step + (to_run > 2 ? 2 : 0);
  // The run is one epoch of --max_steps batches; a loader restored after its last has none left.
  if (train_loader.epoch() > 0) train_loader.resume_at(0, train_loader.size());
  Clock::time_point timed_from = Clock::now();
  int64_t logged_step = resume.first_step;
  for (const DeviceBatch& batch : MpDeviceLoader(train_loader, device)) {
    const int64_t step = ++run.steps;
    run.images = batch[0];
    run.labels = batch[1];
    optimizer.zero_grad();
    run.loss = nn::cross_entropy(model(run.images), run.labels);
    run.loss.backward();
    optimizer_step(optimizer);  // averages the gradients across replicas
    if (flags.log_steps > 0 && (step == 1 || step % flags.log_steps == 0)) {
      const int64_t batch_images = flags.batch_size * (step - logged_step);
      logged_step = step;
      add_step_closure([progress, loss = run.loss, step, batch_images,
                        lr = flags.lr] { progress->train_step(step, batch_images, loss, lr); },
                       /*run_async=*/true);
      if (progress->summaries) progress->summaries->add_step_breakdown(step);
    }
    if (step == run.warm) {
      mark_step();
      wait_device_ops({device});
      rendezvous("warm");  // every replica's first graphs are compiled
      timed_from = Clock::now();
      run.warmup_compiles = counter_value("UncachedCompile").value_or(0);
    }
    if (resume.save(step)) {  // preempted: saved at this step, as every replica
      mark_step();            // leaving the loop early does not mark the last step
      break;
    }
  }
  wait_device_ops();
  run.timed_seconds = seconds_since(timed_from);
  return run;
}

// One replica's training, as test_train_mp_imagenet's _mp_fn: its own model (the same start on
// every replica, from the seed, then the master's parameters broadcast as the script does), its
// own fake batch, gradients averaged across replicas by optimizer_step. BatchNorm's running
// statistics stay each replica's own, as in PyTorch/XLA.
void train_replica(const Flags& flags, Summary& summary) {
  const int ordinal = global_ordinal();
  const Device device = xla_device();
  set_rng_state(flags.seed, device);
  const std::shared_ptr<ResNet> model = make_resnet(flags.model, device);
  broadcast_master_param(*model);
  optim::SGD optimizer(
      model->parameters(),
      {.lr = flags.lr, .momentum = flags.momentum, .weight_decay = flags.weight_decay});
  DataLoader train_loader = fake_loader(flags, ordinal);
  const std::shared_ptr<Progress> progress = make_progress(flags, device, ordinal);
  // The master's weights and momentum; each replica's own BatchNorm statistics.
  const Resumable resume = resumable(flags.checkpoints, {.model = model.get(),
                                                         .optimizer = &optimizer,
                                                         .data_loader = &train_loader,
                                                         .per_replica = model->named_buffers()});
  const TrainedRun run = train_steps(flags, *model, optimizer, train_loader, resume, progress);
  const double final_loss = run.loss.defined() ? run.loss.item() : 0;
  // Counted once every replica's training graphs are compiled, and before any replica compiles
  // its evaluation graph (a replica past the first rendezvous could otherwise be first).
  rendezvous("trained");
  const int64_t compiles = counter_value("UncachedCompile").value_or(0);
  rendezvous("counted");
  const MemoryInfo memory = get_memory_info(device);
  std::pair<double, double> eval{0, 0};
  if (flags.eval && run.images.defined()) {
    eval = evaluate(*model, run.images, run.labels);
    progress->evaluation(run.steps, eval);
  }
  if (!flags.save.empty()) save_weights(*model, flags.save);
  if (!is_master_ordinal(/*local=*/false)) return;
  const int64_t timed_steps = run.steps - run.warm;
  summary = Summary{.first_loss = progress->first_loss,
                    .final_loss = final_loss,
                    .step_ms = timed_steps > 0 ? 1000 * run.timed_seconds / timed_steps : 0,
                    .warmup_compiles = run.warmup_compiles,
                    .compiles = compiles,
                    .peak_device_bytes = memory.peak_bytes,
                    .eval_loss = eval.first,
                    .eval_accuracy = eval.second,
                    .resumed_from_step = resume.first_step};
  for (const Tensor& p : model->parameters()) summary.parameters += p.numel();
}

int train(const Flags& flags) {
  Summary summary;
  spawn([&](int) { train_replica(flags, summary); }, flags.num_devices);
  if (process_index() != 0) return 0;
  const int64_t world = static_cast<int64_t>(flags.num_devices) * process_count();
  const double images_per_step = static_cast<double>(flags.batch_size * world);
  fmt::print(
      "{{\"model\":\"{}\",\"final_loss\":{:.5f},\"first_logged_loss\":{:.5f},"
      "\"images_per_s\":{:.2f},\"step_ms\":{:.2f},\"compiles\":{},\"warmup_compiles\":{},"
      "\"peak_device_bytes\":{},\"eval_loss\":{:.9g},\"eval_accuracy\":{:.4f},\"parameters\":{},"
      "\"steps\":{},\"batch_size\":{},\"image_size\":{},\"devices\":{},\"world_size\":{},"
      "\"resumed_from_step\":{}}}\n",
      flags.model, summary.final_loss, summary.first_loss,
      summary.step_ms > 0 ? 1000.0 * images_per_step / summary.step_ms : 0.0, summary.step_ms,
      summary.compiles, summary.warmup_compiles, summary.peak_device_bytes, summary.eval_loss,
      summary.eval_accuracy, summary.parameters, flags.max_steps, flags.batch_size,
      flags.image_size, flags.num_devices, world, summary.resumed_from_step);
  return 0;
}

}  // namespace
}  // namespace axle::samples

int main(int argc, char** argv) {
  axle::samples::Flags flags;
  CLI::App app{
      "train_resnet: torchvision's ResNet-18 or ResNet-50 on fake ImageNet-shaped data, as "
      "PyTorch/XLA's test_train_mp_imagenet --fake_data. The only data is fake: each replica "
      "draws one batch of random images (uniform in [0, 1)) and random labels over 1000 classes "
      "at the start and trains on it at every step."};
  app.add_option("--model", flags.model, "resnet18 or resnet50")
      ->check(CLI::IsMember({"resnet18", "resnet50"}));
  app.add_option("--image_size", flags.image_size, "images are 3 × image_size × image_size")
      ->check(axle::samples::positive());
  app.add_option("--batch_size", flags.batch_size, "images per replica")
      ->check(axle::samples::positive());
  app.add_option("--max_steps", flags.max_steps)->check(axle::samples::positive());
  app.add_option("--num_devices", flags.num_devices,
                 "train data-parallel on this many devices (default: CPU_NUM_DEVICES, or 1); "
                 "--batch_size is per device")
      ->check(axle::samples::positive());
  app.add_option("--lr", flags.lr, "SGD's learning rate (momentum 0.9, weight decay 1e-4)");
  app.add_option("--momentum", flags.momentum);
  app.add_option("--weight_decay", flags.weight_decay);
  app.add_option("--logdir", flags.logdir,
                 "write TensorBoard summaries (loss, lr, images/s, the step breakdown, test loss "
                 "and accuracy) to DIR");
  app.add_option("--log_steps", flags.log_steps,
                 "print the loss at step 1 and every this many steps (0: never)");
  app.add_flag("--fake_data", flags.fake_data,
               "accepted for PyTorch/XLA's command lines: fake data is the only data source");
  app.add_option("--seed", flags.seed, "the model's initialisation and the fake data");
  app.add_option("--eval", flags.eval,
                 "1 evaluates the fixed batch in eval mode (running statistics) after training");
  app.add_option("--save", flags.save,
                 "write the trained weights here (.safetensors, or else an axle checkpoint)");
  axle::samples::add_checkpoint_flags(app, flags.checkpoints);
  CLI11_PARSE(app, argc, argv);
  try {
    if (flags.num_devices > 0) {
      setenv("CPU_NUM_DEVICES", std::to_string(flags.num_devices).c_str(), /*overwrite=*/1);
    }
    flags.num_devices = axle::device_count();
    return axle::samples::train(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_resnet: %s\n", e.what());
    return 1;
  }
}
