// train_step_bench: one training step of the MNIST samples' models.
//   step_ms              — median time per step of the MLP (batch 128) and the CNN (batch 64),
//                          forward + backward + SGD momentum, steps issued back to back (trace
//                          and device overlap), compile excluded
//   samples_per_s        — batch / step time
//   fusion_speedup       — step time with fusion off (AXLE_DISABLE_PASSES=fusion) / on
//   mlp_step_over_gemm   — the MLP step's time / the time of its eight GEMMs (three forward,
//                          three weight gradients, two input gradients) run directly through Eigen
//                          on one thread
//   mlp_step_over_split_gemm — the same over those GEMMs split into row or column blocks over as
//                          many threads as the device computes on (as the CPU backend splits them)
//   intra_op_threads     — the compute threads of the benchmark's device
//   with --num_devices 1,2,4: samples_per_s with "devices" — data-parallel training (spawn, one
//                          replica per device, each stepping a full batch, optimizer_step)
//   with --num_devices and --ddp: ddp_speedup — samples_per_s of that data-parallel training
//                          through DistributedDataParallel (gradients averaged in buckets of
//                          --bucket_cap_mb during backward) / with optimizer_step averaging after
//                          backward, both run alternately in one process
//   with --model gpt: step_ms and tokens_per_s of train_gpt's default model and recipe (batch
//                          32 × 128 bytes, AdamW, clipping); --model mlp,cnn is the default
//   with --model resnet18: step_ms and images_per_s of train_resnet's default (torchvision's
//                          ResNet-18, batch 8 × 3 × 224 × 224, SGD momentum 0.9, weight decay
//                          1e-4, BatchNorm in training mode)
//   with --amp none,bf16: each figure once per precision, "amp" naming it (bf16: the forward
//                          pass and loss in a bf16 autocast region), and amp_speedup — the
//                          step time in f32 / in bf16 — when both run: both models step in one
//                          system in alternate rounds, and amp_speedup is the median of the
//                          rounds' ratios ("pairs"), so the machine's drift between the two
//                          precisions' runs does not move it
//   with --pytorch PYTHON: PyTorch eager's step of the same model, batch and recipe
//                          (benchmarks/pytorch_step.py, run by PYTHON, e.g. /usr/bin/python3 with
//                          Debian's python3-torch) right after axle's step of it in the same
//                          precision (bf16: under torch.autocast), PyTorch as fast as it goes on
//                          as many threads as the process may use (its faster thread split,
//                          OpenBLAS's AVX-512 kernels where they check out): pytorch_step_ms, and
//                          over_pytorch — PyTorch's step time / axle's (axle's speed-up), for
//                          mlp, cnn, gpt and resnet18 (f32); with --repeat N, axle's step and
//                          PyTorch's measured in turn N times: the median of each, and
//                          over_pytorch as the median of the N pairs' ratios ("pairs")
//   with --mpi, under mpirun (--model mlp,cnn): data-parallel training across the job's processes
//                          (each with CPU_NUM_DEVICES replicas, each stepping a full batch)
//                          against one device of the first process training alone while the
//                          others idle, in rounds taken in turn: samples_per_s with "devices" 1,
//                          and with "devices" = the job's world size and "processes";
//                          dp_efficiency — the job's samples/s over one device's (the target on
//                          this 2-core machine: ≥ 0.9 with two replicas). Only process 0 prints.
// JSON lines on stdout (see benchmarks/README.md).
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/device_settings.h"
#include "axle/engine/config.h"
#include "axle/engine/cores.h"
#include "benchmarks/gpt_step.h"
#include "benchmarks/pytorch_anchor.h"
#include "benchmarks/report.h"
#include "samples/flag_checks.h"
#include "samples/mnist_models.h"
#include "samples/resnet_model.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One SGD-momentum training step of a sample model on a random batch, on the calling thread's
// device: gradients averaged across replicas (optimizer_step, a plain step with one replica),
// then the step marked.
class TrainingStep {
 public:
  /// With `ddp_bucket_cap_mb`, the model trains through DistributedDataParallel with buckets of
  /// that size, and optimizer_step only steps.
  /// `alone`: the step never all-reduces, even where the calling thread is a replica of a job
  /// (outside spawn under mpirun, each process is one).
  TrainingStep(const std::string& model_name, int64_t batch, bool amp = false,
               std::optional<double> ddp_bucket_cap_mb = std::nullopt, bool alone = false)
      : amp_(amp),
        alone_(alone),
        model_((set_rng_state(1), samples::make_mnist_model(model_name))),
        optimizer_(model_->parameters(), {.lr = 0.01, .momentum = 0.9}),
        images_(rand({batch, 1, 28, 28})),
        labels_(randint(0, 10, {batch})) {
    if (ddp_bucket_cap_mb) {
      model_ = std::make_shared<DistributedDataParallel>(
          model_, DistributedDataParallelOptions{.bucket_cap_mb = *ddp_bucket_cap_mb});
    }
  }
  void operator()() {
    optimizer_.zero_grad();
    Tensor loss;
    {
      const autocast region(Device{}, DType::kBFloat16, amp_);
      loss = nn::nll_loss((*model_)(images_), labels_);
    }
    loss.backward();
    if (alone_) {
      optimizer_.step();
      mark_step();
    } else {
      optimizer_step(optimizer_, /*barrier=*/true);
    }
  }

 private:
  bool amp_;
  bool alone_;
  std::shared_ptr<nn::Module> model_;
  optim::SGD optimizer_;
  Tensor images_;
  Tensor labels_;
};

// --observers none: systems start with no observer attached (no metrics, timeline or breakdown).
// One step of train_resnet's recipe on its default model: torchvision's ResNet-18 on a random
// batch of 8 images of 224 × 224 and labels over 1000 classes, SGD with momentum 0.9 and weight
// decay 1e-4 (optimizer_step, then the step marked).
class ResNetTrainingStep {
 public:
  ResNetTrainingStep()
      : model_((set_rng_state(1), samples::make_resnet("resnet18"))),
        optimizer_(model_->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}),
        images_(rand({kBatch, 3, kImageSize, kImageSize})),
        labels_(randint(0, 1000, {kBatch})) {}
  void operator()() {
    optimizer_.zero_grad();
    nn::cross_entropy((*model_)(images_), labels_).backward();
    optimizer_step(optimizer_, /*barrier=*/true);
  }
  static constexpr int64_t kBatch = 8;
  static constexpr int64_t kImageSize = 224;

 private:
  std::shared_ptr<samples::ResNet> model_;
  optim::SGD optimizer_;
  Tensor images_;
  Tensor labels_;
};

bool g_observers = true;

LazySystemOptions system_options(int devices = 0) {
  LazySystemOptions options{.cpu_devices = devices};
  if (!g_observers) options.observers.emplace();
  return options;
}

// Median ms per step over `rounds` rounds of `steps` back-to-back steps, after three steps that
// compile (the first steps differ: the optimizer's state starts).
template <class Step>
double median_step_ms(Step& step, int steps, int rounds) {
  for (int i = 0; i < 3; ++i) step();
  wait_device_ops();
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    wait_device_ops();
    ms.push_back(seconds_since(start) * 1e3 / steps);
  }
  return quantile(ms, 0.5);
}

double step_ms(const std::string& model_name, int64_t batch, int steps, int rounds, bool amp,
               bool alone = false) {
  LazySystem::restart(system_options());
  TrainingStep step(model_name, batch, amp, std::nullopt, alone);
  return median_step_ms(step, steps, rounds);
}

double gpt_step_ms(int steps, int rounds, bool amp) {
  LazySystem::restart(system_options());
  GptTrainingStep step(amp);
  return median_step_ms(step, steps, rounds);
}

// The f32 step's time over the bf16 step's, both models stepped in one system in alternate rounds
// of `steps` steps: the median of the `rounds` pairs' ratios, so that a machine that speeds up or
// slows down between the two precisions' runs does not move the ratio.
template <class MakeStep>
double alternated_amp_speedup(MakeStep&& make_step, int steps, int rounds) {
  LazySystem::restart(system_options());
  auto f32 = make_step(false);
  auto bf16 = make_step(true);
  for (int i = 0; i < 3; ++i) {
    (*f32)();
    (*bf16)();
  }
  wait_device_ops();
  auto round_ms = [&](auto& step) {
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    wait_device_ops();
    return seconds_since(start) * 1e3 / steps;
  };
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const double f32_ms = round_ms(*f32);
    ratios.push_back(f32_ms / round_ms(*bf16));
  }
  return quantile(ratios, 0.5);
}

double resnet_step_ms(int steps, int rounds) {
  LazySystem::restart(system_options());
  ResNetTrainingStep step;
  return median_step_ms(step, steps, rounds);
}

// Samples per second of data-parallel training on `devices` replicas (spawn), each stepping
// `batch` samples with gradients averaged by optimizer_step: the median of `rounds` rounds.
// With `ddp_bucket_cap_mb`, through DistributedDataParallel.
// Under mpirun, `devices` 0: every device of every process of the job (process 0 returns the
// rates; the others, nothing).
std::vector<double> parallel_rates(const std::string& model_name, int64_t batch, int devices,
                                   int steps, int rounds,
                                   std::optional<double> ddp_bucket_cap_mb = std::nullopt) {
  LazySystem::restart(system_options(devices));
  std::vector<double> rates;
  spawn(
      [&](int) {
        TrainingStep step(model_name, batch, false, ddp_bucket_cap_mb);
        for (int i = 0; i < 3; ++i) step();
        wait_device_ops();
        for (int r = 0; r < rounds; ++r) {
          rendezvous("round");
          const auto start = Clock::now();
          for (int i = 0; i < steps; ++i) step();
          wait_device_ops();
          rendezvous("round done");  // the slowest replica ends the round
          if (global_ordinal() == 0) {
            rates.push_back(static_cast<double>(batch * steps * world_size()) /
                            seconds_since(start));
          }
        }
      },
      LazySystem::get().device_count());
  return rates;
}

double parallel_samples_per_s(const std::string& model_name, int64_t batch, int devices, int steps,
                              int rounds, std::optional<double> ddp_bucket_cap_mb = std::nullopt) {
  std::vector<double> rates =
      parallel_rates(model_name, batch, devices, steps, rounds, ddp_bucket_cap_mb);
  return quantile(rates, 0.5);
}

// Process 0 lets the others go on from here; they wait without spinning, leaving the cores to
// process 0 meanwhile (MPI's own barrier polls).
void release_from_process_0(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int go = 1;
  if (rank == 0) {
    for (int to = 1; to < size; ++to) MPI_Send(&go, 1, MPI_INT, to, 0, comm);
    return;
  }
  MPI_Request request;
  MPI_Irecv(&go, 1, MPI_INT, 0, 0, comm, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// The --mpi run: for each model, one device of process 0 alone and then the job's data-parallel
// training, in turn, `turns` times; the medians of every round of each.
int run_mpi(const std::vector<std::string>& models, int steps, int rounds, int turns) {
  if (process_count() < 2) {
    std::fprintf(stderr, "train_step_bench --mpi: run it under mpirun with at least 2 processes\n");
    return 2;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);  // axle started MPI for the job
  if (!initialized) return 2;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  for (const auto& [model, batch] : {std::pair<std::string, int64_t>{"mlp", 128}, {"cnn", 64}}) {
    if (std::ranges::find(models, model) == models.end()) continue;
    std::vector<double> alone, job;
    int world = 0;
    for (int turn = 0; turn < turns; ++turn) {
      if (process_index() == 0) {
        // As one device of a process started alone: every core of this host is its own.
        axle::config::set("AXLE_CPU_INTRA_OP_THREADS", std::to_string(axle::usable_cores()));
        axle::config::set("CPU_NUM_DEVICES", "1");
        const double ms = step_ms(model, batch, steps, rounds, false, /*alone=*/true);
        axle::config::unset("AXLE_CPU_INTRA_OP_THREADS");
        axle::config::unset("CPU_NUM_DEVICES");
        alone.push_back(static_cast<double>(batch) / ms * 1e3);
      }
      release_from_process_0(comm);
      const std::vector<double> rates = parallel_rates(model, batch, 0, steps, rounds);
      job.insert(job.end(), rates.begin(), rates.end());
      world = process_count() * LazySystem::get().device_count();
    }
    if (process_index() != 0) continue;
    const double one = quantile(alone, 0.5), all = quantile(job, 0.5);
    emit("train_step", "samples_per_s", one, "samples/s",
         {{"model", model}, {"batch", batch}, {"devices", int64_t{1}}});
    emit("train_step", "samples_per_s", all, "samples/s",
         {{"model", model},
          {"batch", batch},
          {"devices", int64_t{world}},
          {"processes", int64_t{process_count()}}});
    emit("train_step", "dp_efficiency", all / one, "ratio",
         {{"model", model},
          {"batch", batch},
          {"devices", int64_t{world}},
          {"processes", int64_t{process_count()}}});
  }
  MPI_Comm_free(&comm);
  axle::LazySystem::restart();
  return 0;
}

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// out = a * b on `pool`: the larger side of out cut into one block per thread, each an Eigen
// product, as the CPU backend splits products of at least a million multiply-adds.
template <class A, class B>
void split_product(axle::cpu::ComputePool& pool, Matrix& out, const A& a, const B& b) {
  if (out.rows() * out.cols() * a.cols() < (int64_t{1} << 20)) {
    out.noalias() = a * b;
  } else if (out.rows() > out.cols()) {
    axle::cpu::parallel_for(
        pool, out.rows(), 4,
        [&](int64_t r0, int64_t r1, int) {
          out.middleRows(r0, r1 - r0).noalias() = a.middleRows(r0, r1 - r0) * b;
        },
        4, 1);
  } else {
    axle::cpu::parallel_for(
        pool, out.cols(), 8,
        [&](int64_t c0, int64_t c1, int) {
          out.middleCols(c0, c1 - c0).noalias() = a * b.middleCols(c0, c1 - c0);
        },
        8, 1);
  }
}

// Median ms of the MLP step's GEMMs through Eigen, row-major as axle stores tensors, on
// `threads` threads (1: plain Eigen products on this thread).
double mlp_gemm_ms(int64_t batch, int rounds, int threads) {
  axle::cpu::ComputePool pool(threads);
  const Matrix x = Matrix::Random(batch, 784);
  const Matrix w1 = Matrix::Random(512, 784), w2 = Matrix::Random(512, 512),
               w3 = Matrix::Random(10, 512);
  Matrix h1(batch, 512), h2(batch, 512), out(batch, 10);
  const Matrix d_out = Matrix::Random(batch, 10);
  Matrix d_h2(batch, 512), d_h1(batch, 512), g1(512, 784), g2(512, 512), g3(10, 512);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < 10; ++i) {
      split_product(pool, h1, x, w1.transpose());
      split_product(pool, h2, h1, w2.transpose());
      split_product(pool, out, h2, w3.transpose());
      split_product(pool, g3, d_out.transpose(), h2);
      split_product(pool, d_h2, d_out, w3);
      split_product(pool, g2, d_h2.transpose(), h1);
      split_product(pool, d_h1, d_h2, w2);
      split_product(pool, g1, d_h1.transpose(), x);
    }
    ms.push_back(seconds_since(start) * 1e3 / 10);
  }
  if (out(0, 0) + g1(0, 0) + g2(0, 0) + g3(0, 0) == 12345.f) std::fprintf(stderr, "unlikely\n");
  return quantile(ms, 0.5);
}

// What the command line asked for.
struct Options {
  bool quick = false;
  std::vector<int> device_counts;
  bool ddp = false;
  double bucket_cap_mb = 25;
  std::vector<std::string> models = {"mlp", "cnn"};
  std::vector<std::string> amps = {"none"};
  std::string observers = "standard";
  bool mpi = false;
  std::string python;
  int repeat = 1;  // with python: axle's and PyTorch's steps measured in turn this many times
  int steps = 20, rounds = 7;  // for the MLP and the CNN

  [[nodiscard]] bool chosen(const char* model) const {
    return std::find(models.begin(), models.end(), model) != models.end();
  }
};

void add_options(CLI::App& app, Options& o) {
  app.add_flag("--quick", o.quick, "a short run");
  app.add_option("--num_devices", o.device_counts,
                 "also train data-parallel on each of these device counts (e.g. 1,2,4): "
                 "samples_per_s with \"devices\"")
      ->delimiter(',');
  app.add_flag("--ddp", o.ddp,
               "with --num_devices: also train through DistributedDataParallel and report "
               "ddp_speedup over optimizer_step");
  app.add_option("--bucket_cap_mb", o.bucket_cap_mb, "DistributedDataParallel's bucket cap (MiB)")
      ->check(axle::samples::positive());
  app.add_option("--model", o.models,
                 "models to step: mlp, cnn, gpt (train_gpt's default model), resnet18 "
                 "(train_resnet's default)")
      ->delimiter(',')
      ->check(CLI::IsMember({"mlp", "cnn", "gpt", "resnet18"}));
  app.add_option("--amp", o.amps,
                 "precisions to step in: none (f32), bf16 (forward and loss in a bf16 autocast "
                 "region); e.g. none,bf16")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "bf16"}));
  app.add_option("--observers", o.observers,
                 "standard (metrics, timeline, step breakdown) or none: what watches the actors")
      ->check(CLI::IsMember({"standard", "none"}));
  app.add_flag("--mpi", o.mpi,
               "under mpirun: data-parallel training across the job's processes against one "
               "device alone (dp_efficiency)");
  app.add_option("--pytorch", o.python,
                 "run PyTorch eager's step of each model with this Python (e.g. /usr/bin/python3 "
                 "with Debian's python3-torch) right after axle's: pytorch_step_ms, over_pytorch");
  app.add_option("--repeat", o.repeat,
                 "with --pytorch: measure axle's step and PyTorch's in turn this many times; "
                 "the medians, and over_pytorch as the median of each pair's ratio")
      ->check(CLI::Range(1, 20));
}

std::map<std::string, Param> labels(const char* model, int64_t batch, const std::string& amp) {
  std::map<std::string, Param> l{{"model", std::string(model)}, {"batch", batch}};
  if (amp != "none") l.emplace("amp", amp);
  return l;
}

// amp_speedup: the step in f32 over the step in bf16 (alternated_amp_speedup), when both ran.
template <class MakeStep>
void emit_amp_speedup(const Options& o, const char* model, int64_t batch, int steps,
                      MakeStep&& make_step) {
  if (std::ranges::find(o.amps, "none") == o.amps.end() ||
      std::ranges::find(o.amps, "bf16") == o.amps.end()) {
    return;
  }
  const int rounds = o.quick ? 3 : 7;
  emit("train_step", "amp_speedup", alternated_amp_speedup(make_step, steps, rounds), "ratio",
       {{"model", std::string(model)}, {"batch", batch}, {"pairs", int64_t{rounds}}});
}

template <class AxleStep>
double against_pytorch(const Options& o, const char* model, int64_t batch, int steps, int rounds,
                       const std::string& amp, AxleStep&& axle_step) {
  return versus_pytorch({o.python, o.repeat}, {model, batch, steps, rounds, amp},
                        std::forward<AxleStep>(axle_step));
}

void run_gpt(const Options& o) {
  for (const std::string& amp : o.amps) {
    const double ms = against_pytorch(
        o, "gpt", GptTrainingStep::kBatch, 3, o.quick ? 2 : 3, amp,
        [&] { return gpt_step_ms(o.quick ? 3 : 5, o.quick ? 2 : 3, amp == "bf16"); });
    const int64_t tokens = GptTrainingStep::kBatch * GptTrainingStep::kBlock;
    emit("train_step", "step_ms", ms, "ms", labels("gpt", GptTrainingStep::kBatch, amp));
    emit("train_step", "tokens_per_s", static_cast<double>(tokens) / ms * 1e3, "tokens/s",
         labels("gpt", GptTrainingStep::kBatch, amp));
  }
  emit_amp_speedup(o, "gpt", GptTrainingStep::kBatch, o.quick ? 2 : 3,
                   [](bool amp) { return std::make_unique<GptTrainingStep>(amp); });
}

void run_resnet(const Options& o) {
  // A step takes seconds here: fewer steps and rounds than the small models.
  const double ms =
      against_pytorch(o, "resnet18", ResNetTrainingStep::kBatch, 2, o.quick ? 2 : 3, "none",
                      [&] { return resnet_step_ms(o.quick ? 2 : 3, o.quick ? 2 : 3); });
  const std::map<std::string, Param> resnet{{"model", std::string("resnet18")},
                                            {"batch", ResNetTrainingStep::kBatch},
                                            {"image_size", ResNetTrainingStep::kImageSize}};
  emit("train_step", "step_ms", ms, "ms", resnet);
  emit("train_step", "images_per_s", static_cast<double>(ResNetTrainingStep::kBatch) / ms * 1e3,
       "images/s", resnet);
}

struct Case {
  const char* model;
  int64_t batch;
};
constexpr Case kSmallModels[] = {{"mlp", 128}, {"cnn", 64}};

// The MLP's or the CNN's step in each precision, fused and not; the MLP's against its products.
void run_small_model(const Options& o, const Case c, int threads) {
  for (const std::string& amp : o.amps) {
    const bool bf16 = amp == "bf16";
    const double fused = against_pytorch(o, c.model, c.batch, o.steps, o.quick ? 3 : 5, amp, [&] {
      return step_ms(c.model, c.batch, o.steps, o.rounds, bf16);
    });
    emit("train_step", "step_ms", fused, "ms", labels(c.model, c.batch, amp));
    emit("train_step", "samples_per_s", static_cast<double>(c.batch) / fused * 1e3, "samples/s",
         labels(c.model, c.batch, amp));
    axle::config::set("AXLE_DISABLE_PASSES", "fusion");
    const double unfused = step_ms(c.model, c.batch, o.steps, o.rounds, bf16);
    axle::config::unset("AXLE_DISABLE_PASSES");
    emit("train_step", "fusion_speedup", unfused / fused, "ratio", labels(c.model, c.batch, amp));
    if (std::string(c.model) == "mlp" && !bf16) {
      emit("train_step", "mlp_step_over_gemm", fused / mlp_gemm_ms(c.batch, o.rounds, 1), "ratio",
           {{"batch", c.batch}});
      emit("train_step", "mlp_step_over_split_gemm",
           fused / mlp_gemm_ms(c.batch, o.rounds, threads), "ratio",
           {{"batch", c.batch}, {"threads", int64_t{threads}}});
    }
  }
  emit_amp_speedup(o, c.model, c.batch, o.steps, [&](bool amp) {
    return std::make_unique<TrainingStep>(c.model, c.batch, amp, std::nullopt, false);
  });
}

// Data-parallel samples per second on `devices` devices, and through DDP with --ddp.
void run_data_parallel(const Options& o, const Case c, int devices) {
  const std::map<std::string, Param> parallel{
      {"model", std::string(c.model)}, {"batch", c.batch}, {"devices", int64_t{devices}}};
  if (!o.ddp) {
    emit("train_step", "samples_per_s",
         parallel_samples_per_s(c.model, c.batch, devices, o.steps, o.rounds), "samples/s",
         parallel);
    return;
  }
  // Alternately, so both see the same load: the median of three runs of each.
  std::vector<double> plain, bucketed;
  for (int run = 0; run < 3; ++run) {
    plain.push_back(parallel_samples_per_s(c.model, c.batch, devices, o.steps, o.rounds));
    bucketed.push_back(
        parallel_samples_per_s(c.model, c.batch, devices, o.steps, o.rounds, o.bucket_cap_mb));
  }
  emit("train_step", "samples_per_s", quantile(plain, 0.5), "samples/s", parallel);
  auto ddp_labels = parallel;
  ddp_labels.emplace("bucket_cap_mb", o.bucket_cap_mb);
  emit("train_step", "ddp_samples_per_s", quantile(bucketed, 0.5), "samples/s", ddp_labels);
  emit("train_step", "ddp_speedup", quantile(bucketed, 0.5) / quantile(plain, 0.5), "ratio",
       ddp_labels);
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle::bench;
  CLI::App app{"train_step_bench: MNIST MLP and CNN training steps on one device"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);
  g_observers = o.observers == "standard";
  o.steps = o.quick ? 5 : 20;
  o.rounds = o.quick ? 3 : 7;
  if (o.mpi) return run_mpi(o.models, o.steps, o.rounds, o.quick ? 1 : 2);
  // What one device of the benchmark's system computes on: the backend's share, from the same
  // settings the lazy system gives it.
  const axle::config::DeviceSettings devices = axle::config::read_device_settings();
  const int threads =
      axle::cpu::intra_op_threads(devices.cpu_num_devices, devices.cpu_intra_op_threads,
                                  axle::config::read_process_settings().host_processes);
  emit("train_step", "intra_op_threads", threads, "threads");
  if (o.chosen("gpt")) run_gpt(o);
  if (o.chosen("resnet18")) run_resnet(o);
  for (const Case c : kSmallModels) {
    if (o.chosen(c.model)) run_small_model(o, c, threads);
  }
  for (const Case c : kSmallModels) {
    if (!o.chosen(c.model)) continue;
    for (int devices : o.device_counts) run_data_parallel(o, c, devices);
  }
  axle::LazySystem::restart();
  return 0;
}
