// samples/train_mnist end to end: one epoch of the MLP (SGD lr 0.01, momentum 0.9, batch 128,
// seed 1) reaches 80% test accuracy on Fashion-MNIST, the bar the training issue sets; two
// epochs of the CNN (same optimizer, batch 64 as in train_step_bench, seed 1) reach 87%; four
// devices with a quarter of the batch each reach the MLP's bar with replicas bit-identical at
// the end; compiling stops after the first steps; and two processes of two devices each (under
// mpirun) train exactly as one process of four: the same accuracy and bit-identical weights,
// reported once, by the global master.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "axle/graph/formats/event_file.h"
#include "trainer_run.h"

#include <unistd.h>

namespace {

using axle::testing::file_bytes;
using axle::testing::TrainerRun;

TrainerRun train(const std::string& flags, const std::string& launcher = "") {
  return axle::testing::run_trainer(launcher + std::string(AXLE_TRAIN_MNIST) + " " + flags);
}

// ./axle.sh deps installs the dataset (Debian's dataset-fashion-mnist).
void require_dataset() {
  ASSERT_TRUE(std::filesystem::exists("/usr/share/datasets/fashion-mnist"))
      << "dataset-fashion-mnist is not installed: run ./axle.sh deps";
}

TEST(TrainMnist, MlpReachesEightyPercentInOneEpoch) {
  require_dataset();
  const TrainerRun run = train(
      "--model mlp --num_epochs 1 --batch_size 128 --lr 0.01 --momentum 0.9 "
      "--seed 1 --log_steps 100");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_GE(run.summary["final_test_accuracy"].get<double>(), 0.80) << run.output;
  EXPECT_LE(run.summary["compiles"].get<int>(), 8) << run.output;
  // Losses come from step closures, in step order.
  EXPECT_NE(run.output.find("| Training Device=xla:0/0 Epoch=1 Step=100 Loss="), std::string::npos)
      << run.output;
  EXPECT_LT(run.output.find("Step=100 "), run.output.find("Step=400 ")) << run.output;
}

TEST(TrainMnist, FourDevicesReachTheSameBarAndEndWithBitIdenticalReplicas) {
  require_dataset();
  // Batch 32 per device: the global batch is one device's 128, and gradients are averaged.
  const TrainerRun run = train(
      "--model mlp --num_devices 4 --num_epochs 1 --batch_size 32 "
      "--lr 0.01 --momentum 0.9 --seed 1 --log_steps 100");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_EQ(run.summary["devices"].get<int>(), 4) << run.output;
  EXPECT_GE(run.summary["final_test_accuracy"].get<double>(), 0.80) << run.output;
  EXPECT_TRUE(run.summary["replicas_identical"].get<bool>()) << run.output;
  EXPECT_LE(run.summary["compiles"].get<int>(), 8) << run.output;
  for (int replica = 0; replica < 4; ++replica) {
    const std::string line = "| Training Device=xla:" + std::to_string(replica) + "/" +
                             std::to_string(replica) + " Epoch=1 Step=100 Loss=";
    EXPECT_NE(run.output.find(line), std::string::npos) << run.output;
  }
}

TEST(TrainMnist, TraceRecordsTheFirstStepsAsChromeTraceJson) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("axle_train_mnist_trace_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  const TrainerRun run = train("--fake_data --max_steps 8 --log_steps 2 --trace " + path.string() +
                               " --trace_steps 4");
  ASSERT_EQ(run.status, 0) << run.output;
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(trace.is_object()) << run.output;
  int executions = 0;
  int closures = 0;
  for (const auto& event : trace["traceEvents"]) {
    executions += event["name"] == "execute";
    closures += event["name"] == "step closure";
  }
  EXPECT_EQ(executions, 4) << trace.dump();
  EXPECT_GE(closures, 1) << trace.dump();
  std::filesystem::remove(path);
}

// Batch 64 gives the CNN 1,874 updates in two epochs; at batch 128 the same two epochs end at
// 85-86%, short of the bar, and seeds 1-4 at batch 64 end at 86.3-87.8%.
TEST(TrainMnist, CnnReachesEightySevenPercentInTwoEpochs) {
  require_dataset();
  const TrainerRun run = train(
      "--model cnn --num_epochs 2 --batch_size 64 --lr 0.01 --momentum 0.9 "
      "--seed 1 --log_steps 0");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_GE(run.summary["final_test_accuracy"].get<double>(), 0.87) << run.output;
  // The second epoch compiles nothing new.
  EXPECT_LE(run.summary["compiles"].get<int>(), 8) << run.output;
}

TEST(TrainMnist, WeightsSavedAsSafetensorsLoadBack) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("axle_train_mnist_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string weights = (dir / "mlp.safetensors").string();
  const TrainerRun trained = train("--fake_data --max_steps 20 --log_steps 0 --save " + weights);
  ASSERT_EQ(trained.status, 0) << trained.output;
  // Learning rate 0: the loaded weights are evaluated unchanged.
  const TrainerRun loaded =
      train("--fake_data --max_steps 1 --lr 0 --log_steps 0 --init " + weights);
  ASSERT_EQ(loaded.status, 0) << loaded.output;
  EXPECT_EQ(loaded.summary["final_test_accuracy"], trained.summary["final_test_accuracy"]);
  const TrainerRun wrong = train("--model cnn --fake_data --max_steps 1 --init " + weights);
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.output.find("conv1.weight"), std::string::npos) << wrong.output;
  std::filesystem::remove_all(dir);
}

// The same seed gives the same bits: every kernel's result depends on its inputs and the
// device's thread count only, never on which engine thread ran it or where the heap put its
// scratch. Three runs of each model, so that a result that flips with timing shows.
TEST(TrainMnist, TheSameSeedTrainsTheSameWeightsBitForBit) {
  // Per process: the same test of another build running at once must not share the files.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("axle_train_mnist_same_seed_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string model : {"mlp", "cnn"}) {
    std::vector<std::string> files;
    for (int run = 0; run < 3; ++run) {
      files.push_back((dir / (model + std::to_string(run) + ".safetensors")).string());
      const TrainerRun trained = train("--model " + model +
                                       " --fake_data --batch_size 64 --max_steps 30 --log_steps 0 "
                                       "--seed 3 --save " +
                                       files.back());
      ASSERT_EQ(trained.status, 0) << trained.output;
    }
    const std::string first = file_bytes(files[0]);
    ASSERT_FALSE(first.empty());
    for (std::size_t run = 1; run < files.size(); ++run) {
      EXPECT_TRUE(file_bytes(files[run]) == first)
          << model << ": run " << run << " differs from run 0";
    }
  }
  std::filesystem::remove_all(dir);
}

// --fsdp: each replica keeps half of the CNN's parameters and momentum, gathers them for each
// forward and gets its half of the averaged gradients from backward. The sums and the SGD step
// are the same arithmetic, element by element, as averaging whole gradients, so the consolidated
// weights are the data-parallel run's, bit for bit (and not the untrained ones).
TEST(TrainMnist, FsdpTrainsTheDataParallelWeightsBitForBit) {
  require_dataset();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_mnist_fsdp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string flags =
      "--model cnn --fake_data --num_epochs 1 --max_steps 20 --batch_size 16 --momentum 0.9 "
      "--seed 1 --log_steps 5 --num_devices 2 --save ";
  const TrainerRun plain = train("--lr 0.01 " + flags + (dir / "plain.safetensors").string());
  const TrainerRun fsdp = train("--fsdp --lr 0.01 " + flags + (dir / "fsdp.safetensors").string());
  const TrainerRun still = train("--fsdp --lr 0 " + flags + (dir / "still.safetensors").string());
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(fsdp.status, 0) << fsdp.output;
  ASSERT_EQ(still.status, 0) << still.output;
  ASSERT_TRUE(fsdp.summary.is_object()) << fsdp.output;
  EXPECT_TRUE(fsdp.summary["fsdp"].get<bool>()) << fsdp.output;
  EXPECT_TRUE(fsdp.summary["replicas_identical"].get<bool>()) << fsdp.output;
  EXPECT_EQ(fsdp.summary["final_test_accuracy"], plain.summary["final_test_accuracy"])
      << fsdp.output;
  const std::string trained = file_bytes(dir / "plain.safetensors");
  EXPECT_FALSE(trained.empty());
  EXPECT_TRUE(trained == file_bytes(dir / "fsdp.safetensors")) << "the weights differ";
  EXPECT_FALSE(trained == file_bytes(dir / "still.safetensors")) << "nothing trained";
  EXPECT_FALSE(std::filesystem::exists(dir / "fsdp.safetensors.shards"));
  std::filesystem::remove_all(dir);
}

}  // namespace

TEST(TrainMnist, TwoProcessesOfTwoDevicesTrainBitForBitAsOneProcessOfFour) {
  require_dataset();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_mnist_mpi_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string flags =
      "--model mlp --num_devices {} --num_epochs 1 --max_steps 150 --batch_size 32 --lr 0.01 "
      "--momentum 0.9 --seed 1 --log_steps 50 --save ";
  auto with = [&](int devices, const std::string& file) {
    std::string f = flags;
    f.replace(f.find("{}"), 2, std::to_string(devices));
    return f + (dir / file).string();
  };
  const TrainerRun one = train(with(4, "one.safetensors"), "CPU_NUM_DEVICES=4 ");
  const TrainerRun two = train(with(2, "two.safetensors"),
                               std::string(AXLE_MPIEXEC) +
                                   " --allow-run-as-root --oversubscribe --bind-to none -np 2 "
                                   "-x CPU_NUM_DEVICES=2 ");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  ASSERT_TRUE(two.summary.is_object()) << two.output;
  EXPECT_EQ(two.summary["processes"].get<int>(), 2) << two.output;
  EXPECT_EQ(two.summary["world_size"].get<int>(), 4) << two.output;
  EXPECT_EQ(one.summary["world_size"].get<int>(), 4) << one.output;
  EXPECT_EQ(two.summary["final_test_accuracy"], one.summary["final_test_accuracy"]) << two.output;
  EXPECT_TRUE(two.summary["replicas_identical"].get<bool>()) << two.output;
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count(two.output, "\"final_test_accuracy\""), 1u) << two.output;  // the master only
  EXPECT_EQ(count(two.output, "| Test Device="), 1u) << two.output;
  const std::string a = file_bytes(dir / "one.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == file_bytes(dir / "two.safetensors")) << "the weights differ";
  std::filesystem::remove_all(dir);
}

// --ddp: DistributedDataParallel averages the gradients in backward instead of optimizer_step
// after it. The sums meet in the same order (by global ordinal), so two processes of two devices
// through DDP train the same weights, bit for bit, as one process of four without it.
TEST(TrainMnist, DdpInTwoProcessesOfTwoDevicesTrainsAsOptimizerStepInOneProcessOfFour) {
  require_dataset();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_mnist_ddp_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string flags =
      "--model cnn --fake_data --num_epochs 1 --max_steps 40 --batch_size 16 --lr 0.01 "
      "--momentum 0.9 --seed 1 --log_steps 0 --save ";
  const TrainerRun plain = train("--num_devices 4 " + flags + (dir / "plain.safetensors").string(),
                                 "CPU_NUM_DEVICES=4 ");
  const TrainerRun ddp =
      train("--ddp --num_devices 2 " + flags + (dir / "ddp.safetensors").string(),
            std::string(AXLE_MPIEXEC) +
                " --allow-run-as-root --oversubscribe --bind-to none -np 2 "
                "-x CPU_NUM_DEVICES=2 ");
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  ASSERT_TRUE(ddp.summary.is_object()) << ddp.output;
  EXPECT_TRUE(ddp.summary["ddp"].get<bool>()) << ddp.output;
  EXPECT_FALSE(plain.summary["ddp"].get<bool>()) << plain.output;
  EXPECT_EQ(ddp.summary["world_size"].get<int>(), 4) << ddp.output;
  EXPECT_TRUE(ddp.summary["replicas_identical"].get<bool>()) << ddp.output;
  const std::string a = file_bytes(dir / "plain.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == file_bytes(dir / "ddp.safetensors")) << "the weights differ";
  std::filesystem::remove_all(dir);
}

namespace {

// The losses logged as "Step=N Loss=X", by step.
std::vector<double> logged_losses(const std::string& output) {
  std::vector<double> losses;
  for (std::size_t at = output.find(" Step="); at != std::string::npos;
       at = output.find(" Step=", at + 1)) {
    const std::size_t loss = output.find("Loss=", at);
    if (loss == std::string::npos) break;
    losses.push_back(std::stod(output.substr(loss + 5)));
  }
  return losses;
}

// --spmd: one program over a mesh of four devices — data-parallel (4,1), model-parallel (1,4:
// fc1 column- and fc2 row-parallel) and both (2,2) — logs the one-device run's losses at every
// one of 20 steps, compiles as often, and keeps a quarter (1,4) or a half (2,2) of the split
// weights per device on the model axis.
TEST(TrainMnist, SpmdMeshesLogTheOneDeviceLosses) {
  const std::string common = " --fake_data --batch_size 64 --max_steps 20 --log_steps 1 --seed 5";
  const TrainerRun one = train("--model mlp --num_devices 1" + common);
  ASSERT_EQ(one.status, 0) << one.output;
  const std::vector<double> want = logged_losses(one.output);
  ASSERT_EQ(want.size(), 20u) << one.output;
  for (const std::string mesh : {"4,1", "1,4", "2,2"}) {
    const TrainerRun run = train("--model mlp --spmd --mesh " + mesh + common);
    ASSERT_EQ(run.status, 0) << run.output;
    ASSERT_TRUE(run.summary.is_object()) << run.output;
    const std::vector<double> got = logged_losses(run.output);
    ASSERT_EQ(got.size(), want.size()) << run.output;
    for (std::size_t s = 0; s < want.size(); ++s) {
      // Printed to 5 decimals: within one unit of the last digit, and 1e-5 relative.
      EXPECT_NEAR(got[s], want[s], 1e-5 * want[s] + 1e-5) << "mesh " << mesh << " step " << s + 1;
    }
    // One program for every device: compiled as often as the one-device run's, and the test
    // set seen whole alike.
    EXPECT_EQ(run.summary["compiles"].get<int>(), one.summary["compiles"].get<int>())
        << "mesh " << mesh << "\n"
        << run.output;
    EXPECT_EQ(run.summary["final_test_accuracy"], one.summary["final_test_accuracy"]) << mesh;
    const double whole = run.summary["parameter_bytes"].get<double>();
    const double per_device = run.summary["parameter_bytes_per_device"].get<double>();
    const double model_axis = mesh == "1,4" ? 4 : mesh == "2,2" ? 2 : 1;
    // fc1 and fc2 are 98% of the MLP's weights.
    EXPECT_LE(per_device, whole * (0.02 + 0.98 / model_axis) * 1.01) << run.output;
  }
}

// --spmd under mpirun: two processes of two devices run one program over a mesh of the job's
// four devices and log the losses, and save the weights, of one process of four bit for bit
// (the collectives sum in the order of global ordinals either way); on 1,4 the model axis, and
// its all-reduces, span the processes. The first process alone reports.
TEST(TrainMnist, SpmdOverTwoProcessesTrainsBitForBitAsOneProcess) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_mnist_spmd_mpi_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string common =
      " --fake_data --batch_size 64 --max_steps 20 --log_steps 1 --seed 5 --save ";
  for (const std::string mesh : {"2,2", "1,4"}) {
    const TrainerRun one =
        train("--model mlp --spmd --mesh " + mesh + common + (dir / "one.safetensors").string());
    const TrainerRun two = train(
        "--model mlp --spmd --mesh " + mesh + common + (dir / "two.safetensors").string(),
        std::string(AXLE_MPIEXEC) +
            " --allow-run-as-root --oversubscribe --bind-to none -np 2 -x CPU_NUM_DEVICES=2 ");
    ASSERT_EQ(one.status, 0) << one.output;
    ASSERT_EQ(two.status, 0) << two.output;
    ASSERT_TRUE(two.summary.is_object()) << two.output;
    EXPECT_EQ(two.summary["processes"].get<int>(), 2) << two.output;
    EXPECT_EQ(two.summary["devices"].get<int>(), 4) << two.output;
    EXPECT_EQ(two.summary["compiles"], one.summary["compiles"]) << two.output;
    EXPECT_EQ(two.summary["final_test_accuracy"], one.summary["final_test_accuracy"]);
    const std::vector<double> want = logged_losses(one.output);
    ASSERT_EQ(want.size(), 20u) << one.output;
    EXPECT_EQ(logged_losses(two.output), want) << "mesh " << mesh << "\n" << two.output;
    const std::string a = file_bytes(dir / "one.safetensors");
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == file_bytes(dir / "two.safetensors"))
        << "mesh " << mesh << ": the weights differ";
  }
  std::filesystem::remove_all(dir);
}

// --logdir writes a TensorBoard event file: every record's CRCs check, the losses are the
// printed ones at the logged steps, the step breakdown is there, and the test accuracy is the
// summary's.
TEST(TrainMnist, LogdirWritesTensorBoardSummaries) {
  // On one device, and over an SPMD mesh (its own training loop).
  for (const std::string extra : {"", " --model mlp --spmd --mesh 2,2"}) {
    SCOPED_TRACE(extra);
    const auto dir = std::filesystem::temp_directory_path() /
                     ("axle_train_mnist_tb_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const TrainerRun run =
        train("--fake_data --batch_size 64 --max_steps 20 --log_steps 5 --lr 0.02" + extra +
              " --logdir " + dir.string());
    ASSERT_EQ(run.status, 0) << run.output;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      files.push_back(entry.path());
    ASSERT_EQ(files.size(), 1u) << run.output;
    const axle::EventFile events = axle::read_event_file(files[0]);
    EXPECT_EQ(events.file_version, "brain.Event:2");
    const std::vector<double> printed = logged_losses(run.output);
    std::vector<double> losses;
    std::vector<int64_t> steps;
    std::vector<double> lrs;
    double accuracy = -1;
    int rates = 0;
    double executing_ms = 0;
    for (const axle::EventValue& v : events.values) {
      if (v.tag == "train/loss") {
        losses.push_back(v.value);
        steps.push_back(v.step);
      }
      if (v.tag == "train/lr") lrs.push_back(v.value);
      if (v.tag == "train/samples_per_s" && v.value > 0) ++rates;
      if (v.tag == "test/accuracy") accuracy = v.value;
      if (v.tag == "step_breakdown/executing_ms") executing_ms += v.value;
    }
    EXPECT_GT(executing_ms, 0) << "the step breakdown's device time\n" << run.output;
    EXPECT_EQ(steps, (std::vector<int64_t>{5, 10, 15, 20})) << run.output;
    ASSERT_EQ(lrs.size(), 4u) << run.output;
    for (double lr : lrs) EXPECT_NEAR(lr, 0.02, 1e-8);  // stored as a float
    ASSERT_EQ(losses.size(), printed.size()) << run.output;
    for (std::size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], printed[i], 1e-5) << run.output;
    }
    EXPECT_EQ(rates, 4) << run.output;
    EXPECT_NEAR(accuracy, run.summary["final_test_accuracy"].get<double>(), 1e-4) << run.output;
    std::filesystem::remove_all(dir);
  }
}

TEST(TrainMnist, FlagsOutOfRangeAreNamedInASentence) {
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"--batch_size 0", "--batch_size: must be positive; got 0"},
           {"--num_epochs -1", "--num_epochs: must be zero or more; got -1"},
           {"--lr abc", "--lr: must be a number; got 'abc'"}}) {
    const TrainerRun run = train(flags);
    EXPECT_NE(run.status, 0) << flags;
    EXPECT_NE(run.output.find(want), std::string::npos) << flags << ":\n" << run.output;
    EXPECT_LT(run.output.size(), 200u) << flags << ":\n" << run.output;
  }
}

}  // namespace
