// samples/train_gpt end to end: 200 steps of a small character-level GPT on Debian's fortunes
// bring the loss well below a uniform guess over bytes (ln 256 ≈ 5.55) and below the first
// logged loss, with every graph compiled in the first steps, in f32 and under bf16 autocast; two
// devices train data-parallel; weights saved as safetensors load back.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "axle/graph/formats/event_file.h"
#include "trainer_run.h"

namespace {

using axle::testing::file_bytes;
using axle::testing::TrainerRun;

TrainerRun train(const std::string& flags, const std::string& launcher = "") {
  return axle::testing::run_trainer(launcher + std::string(AXLE_TRAIN_GPT) + " " + flags);
}

// ./axle.sh deps installs the corpus (Debian's fortunes).
void require_corpus() {
  ASSERT_TRUE(std::filesystem::exists("/usr/share/games/fortunes"))
      << "fortunes is not installed: run ./axle.sh deps";
}

const char* const kSmall = "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 16 --seed 1 ";

TEST(TrainGpt, TwoHundredStepsLearnTheBytesAndCompileOnlyAtTheStart) {
  require_corpus();
  const TrainerRun run =
      train(std::string(kSmall) + "--max_steps 200 --eval_interval 100 --log_steps 50 --sample 64");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_EQ(run.summary["corpus_files"].get<int>(), 43) << run.output;
  EXPECT_EQ(run.summary["corpus_bytes"].get<int64_t>(), 2576674) << run.output;
  const double first = run.summary["first_logged_loss"].get<double>();
  const double last = run.summary["final_train_loss"].get<double>();
  EXPECT_GT(first, 5.0) << run.output;  // near ln 256 at the start
  EXPECT_LT(last, 3.5) << run.output;
  EXPECT_LT(last, first - 1.5) << run.output;
  EXPECT_LT(run.summary["final_val_loss"].get<double>(), 3.5) << run.output;
  EXPECT_NE(run.output.find("| Training Device=xla:0/0 Step=50 Loss="), std::string::npos)
      << run.output;
  // The evaluations at steps 100 and 200 report the same count: the train and eval graphs were
  // all compiled by the first evaluation; sampling afterwards adds its one graph at most twice.
  const std::regex eval(
      R"(\| Eval Device=xla:0/0 Step=(\d+) ValLoss=\S+ BitsPerByte=\S+ Compiles=(\d+))");
  std::vector<int> compiles;
  for (auto it = std::sregex_iterator(run.output.begin(), run.output.end(), eval);
       it != std::sregex_iterator(); ++it) {
    compiles.push_back(std::stoi((*it)[2]));
  }
  ASSERT_EQ(compiles.size(), 2u) << run.output;
  EXPECT_EQ(compiles[0], compiles[1]) << run.output;
  EXPECT_EQ(run.summary["compiles"].get<int>(), compiles[1]) << run.output;
  EXPECT_LE(compiles[1], 6) << run.output;
}

// --checkpoint_activations recomputes each block's activations in the backward pass: the same
// losses bit for bit (the JSON prints them to 6 places, the same either way), and a peak of
// device memory lower by at least two activations of each block but one: the MLP's
// [batch, block, 4·n_embd] and the attention scores' [batch, heads, block, block], both 1 MiB
// here (a block keeps several of each).
TEST(TrainGpt, CheckpointedActivationsTrainAlikeOnLessMemory) {
  require_corpus();
  const std::string flags =
      "--n_layer 4 --n_embd 64 --block_size 64 --batch_size 16 --seed 1 --max_steps 10 "
      "--eval_iters 2 ";
  const TrainerRun plain = train(flags);
  const TrainerRun with = train(flags + "--checkpoint_activations");
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(with.status, 0) << with.output;
  ASSERT_TRUE(plain.summary.is_object() && with.summary.is_object()) << with.output;
  EXPECT_EQ(with.summary["final_train_loss"], plain.summary["final_train_loss"]) << with.output;
  EXPECT_EQ(with.summary["final_val_loss"], plain.summary["final_val_loss"]) << with.output;
  const int64_t mlp_activation = 16 * 64 * 4 * 64 * 4, scores = 16 * 4 * 64 * 64 * 4;
  EXPECT_LT(with.summary["peak_device_bytes"].get<int64_t>() + 3 * (mlp_activation + scores),
            plain.summary["peak_device_bytes"].get<int64_t>())
      << plain.output << with.output;
}

// Two replicas of half the batch each, rows i·2 + r: gradients averaged before clipping, the
// loss falls as on one device, and each replica logs its own loss.
TEST(TrainGpt, TwoDevicesTrainDataParallel) {
  require_corpus();
  const TrainerRun run = train(
      "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 --num_devices 2 "
      "--max_steps 100 --eval_interval 50 --log_steps 50");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_EQ(run.summary["world_size"].get<int>(), 2) << run.output;
  EXPECT_LT(run.summary["final_val_loss"].get<double>(), 3.6) << run.output;
  for (const char* device : {"xla:0/0", "xla:1/1"}) {
    EXPECT_NE(run.output.find(std::string("| Training Device=") + device + " Step=100 Loss="),
              std::string::npos)
        << run.output;
  }
}

// --fsdp on 4 replicas: the losses of the data-parallel run (averaged gradients, clipped by the
// global norm), on less device memory (a quarter of the parameters, gradients and AdamW state, one
// block gathered at a time); its consolidated safetensors load back. Every replica logs every
// step's loss from a step closure, and every one of those lines is there (each replica's wait
// for its device waits for its own closures only: a wait for every replica's once hung the run).
TEST(TrainGpt, FsdpTrainsAsDataParallelOnLessMemory) {
  require_corpus();
  const std::string dir = ::testing::TempDir() + "train_gpt_fsdp_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string flags =
      "--n_layer 4 --n_embd 128 --block_size 16 --batch_size 2 --seed 1 --num_devices 4 "
      "--max_steps 20 --eval_iters 4 --log_steps 1 ";
  const TrainerRun plain = train(flags);
  const TrainerRun ddp = train(flags + "--ddp");
  const TrainerRun fsdp = train(flags + "--fsdp --save " + dir + "/fsdp.safetensors");
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  ASSERT_EQ(fsdp.status, 0) << fsdp.output;
  ASSERT_TRUE(plain.summary.is_object() && fsdp.summary.is_object()) << fsdp.output;
  // Every replica's every step, as printed (5 places).
  const std::regex line(R"(\| Training Device=(\S+) Step=(\d+) Loss=(\S+))");
  auto losses = [&](const std::string& output) {
    std::vector<std::string> out;
    for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
         it != std::sregex_iterator(); ++it) {
      out.push_back((*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str());
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(losses(plain.output).size(), 80u) << plain.output;
  EXPECT_EQ(losses(fsdp.output), losses(plain.output)) << plain.output << fsdp.output;
  EXPECT_EQ(fsdp.summary["final_train_loss"], plain.summary["final_train_loss"]) << fsdp.output;
  EXPECT_EQ(fsdp.summary["final_val_loss"], plain.summary["final_val_loss"]) << fsdp.output;
  EXPECT_LT(fsdp.summary["final_train_loss"].get<double>(), 5.3) << fsdp.output;  // it trained
  EXPECT_LT(fsdp.summary["peak_device_bytes"].get<double>(),
            0.6 * plain.summary["peak_device_bytes"].get<double>())
      << plain.output << fsdp.output;
  // Against DistributedDataParallel on the same replicas (the same losses): FSDP's peak at most
  // 0.45 of DDP's, the issue's memory target, here at a small size.
  EXPECT_EQ(losses(ddp.output), losses(plain.output)) << ddp.output;
  EXPECT_LE(fsdp.summary["peak_device_bytes"].get<double>(),
            0.45 * ddp.summary["peak_device_bytes"].get<double>())
      << ddp.output << fsdp.output;
  // Parameters, gradients and AdamW state: DDP's replicas each hold the whole model's, FSDP's at
  // most a quarter of it plus 10% (the issue's target; padding to a multiple of 4 rows is all
  // FSDP adds).
  const double whole = ddp.summary["replica_state_bytes"].get<double>();
  EXPECT_EQ(whole, plain.summary["replica_state_bytes"].get<double>()) << plain.output;
  EXPECT_GT(whole, 4.0 * plain.summary["parameter_bytes"].get<double>()) << plain.output;
  EXPECT_LE(fsdp.summary["replica_state_bytes"].get<double>(), 1.1 * whole / 4) << fsdp.output;
  EXPECT_EQ(fsdp.summary["parameter_bytes"], plain.summary["parameter_bytes"]) << fsdp.output;
  EXPECT_LE(fsdp.summary["parameter_bytes_per_device"].get<double>(),
            1.1 * plain.summary["parameter_bytes"].get<double>() / 4)
      << fsdp.output;
  const TrainerRun loaded = train(
      "--n_layer 4 --n_embd 128 --block_size 16 --batch_size 2 --max_steps 1 --eval_iters 4 "
      "--log_steps 0 --init " +
      dir + "/fsdp.safetensors");
  ASSERT_EQ(loaded.status, 0) << loaded.output;
  std::filesystem::remove_all(dir);
}

// --ddp: DistributedDataParallel averages the gradients in buckets during backward instead of
// all at once after it; the sums meet in the same order, so the losses are the same. The closing
// line gives each device's peak bytes.
TEST(TrainGpt, DdpTrainsAsAveragingAfterBackwardDoesAndReportsEachDevicesPeak) {
  require_corpus();
  const std::string flags =
      "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 --num_devices 2 "
      "--max_steps 20 --eval_interval 0 --log_steps 10";
  const TrainerRun plain = train(flags);
  const TrainerRun ddp = train(flags + " --ddp");
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(ddp.status, 0) << ddp.output;
  ASSERT_TRUE(ddp.summary.is_object()) << ddp.output;
  EXPECT_TRUE(ddp.summary["ddp"].get<bool>()) << ddp.output;
  const double want = plain.summary["final_train_loss"].get<double>();
  EXPECT_NEAR(ddp.summary["final_train_loss"].get<double>(), want, 1e-5 * want) << ddp.output;
  const auto peaks = ddp.summary["peak_device_bytes_by_ordinal"].get<std::vector<int64_t>>();
  ASSERT_EQ(peaks.size(), 2u) << ddp.output;
  for (const int64_t peak : peaks) EXPECT_GT(peak, 0) << ddp.output;
  EXPECT_EQ(peaks[0], ddp.summary["peak_device_bytes"].get<int64_t>()) << ddp.output;
}

// --amp bf16: the forward pass and the loss in a bf16 autocast region, the parameters, their
// gradients and AdamW in f32. The loss falls as in f32 (the 200-step f32 run above ends below
// 3.5), and the casts compile with the rest of the step, once.
TEST(TrainGpt, Bf16AutocastTrainsAsF32Does) {
  require_corpus();
  const TrainerRun run =
      train(std::string(kSmall) + "--max_steps 200 --eval_interval 100 --log_steps 50 --amp bf16");
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_EQ(run.summary["amp"].get<std::string>(), "bf16") << run.output;
  const double first = run.summary["first_logged_loss"].get<double>();
  const double last = run.summary["final_train_loss"].get<double>();
  EXPECT_GT(first, 5.0) << run.output;
  EXPECT_LT(last, 3.5) << run.output;
  EXPECT_LT(last, first - 1.5) << run.output;
  EXPECT_LT(run.summary["final_val_loss"].get<double>(), 3.5) << run.output;
  EXPECT_LE(run.summary["compiles"].get<int>(), 4) << run.output;
}

// The train_loss of every step a run logged to its --logdir, in step order.
std::vector<double> logged_train_losses(const std::filesystem::path& dir) {
  std::vector<double> losses;
  std::ifstream in(dir / "train_gpt.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
    if (entry.is_object() && entry.contains("train_loss")) {
      losses.push_back(entry["train_loss"].get<double>());
    }
  }
  return losses;
}

// --logdir writes a TensorBoard event file beside the JSON lines, every record's CRCs checking:
// the loss, learning rate and tokens/s at each logged step (the loss as the JSON lines have it),
// the step breakdown, and the validation loss at each evaluation.
TEST(TrainGpt, LogdirWritesTensorBoardSummaries) {
  require_corpus();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("axle_train_gpt_tb_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const TrainerRun run =
      train(std::string(kSmall) + "--max_steps 10 --log_steps 5 --eval_interval 5 --logdir " +
            dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      files.push_back(entry.path());
    }
  }
  ASSERT_EQ(files.size(), 1u);
  const axle::EventFile events = axle::read_event_file(files[0]);  // throws on a bad CRC
  std::map<std::string, std::vector<int64_t>> steps;
  std::vector<double> losses;
  double tokens_per_s = 0;
  for (const axle::EventValue& v : events.values) {
    steps[v.tag].push_back(v.step);
    if (v.tag == "train/loss") losses.push_back(v.value);
    if (v.tag == "train/tokens_per_s") tokens_per_s = v.value;
  }
  for (const char* tag : {"train/loss", "train/lr", "train/tokens_per_s"}) {
    EXPECT_EQ(steps[tag], (std::vector<int64_t>{1, 5, 10}))
        << tag;  // the first step, then each 5th
  }
  EXPECT_EQ(steps["val/loss"], (std::vector<int64_t>{5, 10}));
  EXPECT_GT(tokens_per_s, 0);
  EXPECT_FALSE(steps["step_breakdown/executing_ms"].empty());
  const std::vector<double> logged = logged_train_losses(dir);
  ASSERT_EQ(logged.size(), losses.size()) << run.output;
  for (std::size_t i = 0; i < logged.size(); ++i) EXPECT_NEAR(losses[i], logged[i], 1e-5);
  std::filesystem::remove_all(dir);
}

// --spmd --mesh 2,2 (batch over "data", heads and MLP width over "model", Megatron-style) logs
// the one-device run's loss at each of 20 steps within 1e-5 relative, compiles as often, and
// each device holds at most half the parameters plus 10%.
TEST(TrainGpt, SpmdOnATwoByTwoMeshTrainsAsOneDevice) {
  require_corpus();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_gpt_spmd_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string common =
      "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 --max_steps 20 "
      "--log_steps 1 --eval_interval 0 ";
  const TrainerRun one = train(common + "--num_devices 1 --logdir " + (dir / "one").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const TrainerRun mesh = train(common + "--spmd --mesh 2,2 --logdir " + (dir / "mesh").string());
  ASSERT_EQ(mesh.status, 0) << mesh.output;
  ASSERT_TRUE(mesh.summary.is_object()) << mesh.output;
  const std::vector<double> want = logged_train_losses(dir / "one");
  const std::vector<double> got = logged_train_losses(dir / "mesh");
  ASSERT_EQ(want.size(), 20u) << one.output;
  ASSERT_EQ(got.size(), want.size()) << mesh.output;
  for (std::size_t s = 0; s < want.size(); ++s) {
    EXPECT_NEAR(got[s], want[s], 1e-5 * want[s]) << "step " << s + 1;
  }
  EXPECT_EQ(mesh.summary["compiles"].get<int>(), one.summary["compiles"].get<int>()) << mesh.output;
  EXPECT_TRUE(mesh.summary["spmd"].get<bool>());
  EXPECT_LE(mesh.summary["parameter_bytes_per_device"].get<double>(),
            0.55 * mesh.summary["parameter_bytes"].get<double>())
      << mesh.output;
  std::filesystem::remove_all(dir);
}

// --spmd --mesh 2,2 under mpirun: two processes of two devices run the one program over the
// job's four devices and log the losses, and save the weights, of one process of four bit for
// bit; the first process alone prints.
TEST(TrainGpt, SpmdOverTwoProcessesTrainsBitForBitAsOneProcess) {
  require_corpus();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_gpt_spmd_mpi_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string common =
      "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 --max_steps 10 "
      "--log_steps 1 --eval_interval 5 --spmd --mesh 2,2 --save ";
  const TrainerRun one = train(common + (dir / "one.safetensors").string());
  const TrainerRun two =
      train(common + (dir / "two.safetensors").string(),
            std::string(AXLE_MPIEXEC) +
                " --allow-run-as-root --oversubscribe --bind-to none -np 2 -x CPU_NUM_DEVICES=2 ");
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  ASSERT_TRUE(two.summary.is_object()) << two.output;
  EXPECT_EQ(two.summary["devices"].get<int>(), 4) << two.output;
  for (const char* key : {"final_train_loss", "final_val_loss", "compiles"}) {
    EXPECT_EQ(two.summary[key], one.summary[key]) << key << "\n" << two.output;
  }
  // The printed losses, step by step, once.
  auto losses = [](const std::string& text) {
    std::vector<std::string> found;
    for (std::size_t at = text.find(" Loss="); at != std::string::npos;
         at = text.find(" Loss=", at + 1)) {
      found.push_back(text.substr(at, 14));
    }
    return found;
  };
  ASSERT_EQ(losses(one.output).size(), 10u) << one.output;
  EXPECT_EQ(losses(two.output), losses(one.output)) << two.output;
  const std::string a = file_bytes(dir / "one.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == file_bytes(dir / "two.safetensors")) << "the weights differ";
  std::filesystem::remove_all(dir);
}

// --ddp and --fsdp under mpirun: two processes of two devices train as one process of four, bit
// for bit (every reduction meets in global ordinal order): the same losses printed by the first
// process's replicas, the same closing figures, the same consolidated FSDP weights.
TEST(TrainGpt, DdpAndFsdpOverTwoProcessesTrainAsOneProcessOfFour) {
  require_corpus();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_train_gpt_sharded_mpi_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string common =
      "--n_layer 2 --n_embd 64 --block_size 16 --batch_size 2 --seed 1 --max_steps 20 "
      "--eval_iters 4 --log_steps 1 ";
  const std::string mpirun =
      std::string(AXLE_MPIEXEC) +
      " --allow-run-as-root --oversubscribe --bind-to none -np 2 -x CPU_NUM_DEVICES=2 ";
  const std::regex line(R"(\| Training Device=(\S+) Step=(\d+) Loss=(\S+))");
  // The first process's replicas' lines (ordinals 0 and 1), sorted.
  auto first_process_losses = [&](const std::string& output) {
    std::vector<std::string> out;
    for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
         it != std::sregex_iterator(); ++it) {
      const std::string device = (*it)[1].str();
      if (device.ends_with("/0") || device.ends_with("/1")) {
        out.push_back(device + " " + (*it)[2].str() + " " + (*it)[3].str());
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  for (const std::string how : {"--ddp", "--fsdp"}) {
    SCOPED_TRACE(how);
    const TrainerRun one = train(common + how + " --num_devices 4 --save " +
                                 (dir / ("one" + how + ".safetensors")).string());
    const TrainerRun two = train(
        common + how + " --num_devices 2 --save " + (dir / ("two" + how + ".safetensors")).string(),
        mpirun);
    ASSERT_EQ(one.status, 0) << one.output;
    ASSERT_EQ(two.status, 0) << two.output;
    ASSERT_TRUE(one.summary.is_object() && two.summary.is_object()) << two.output;
    EXPECT_EQ(two.summary["world_size"].get<int>(), 4) << two.output;
    ASSERT_EQ(first_process_losses(one.output).size(), 40u) << one.output;
    EXPECT_EQ(first_process_losses(two.output), first_process_losses(one.output)) << two.output;
    for (const char* key : {"final_train_loss", "final_val_loss", "replica_state_bytes"}) {
      EXPECT_EQ(two.summary[key], one.summary[key]) << key << "\n" << two.output;
    }
    const std::string weights = file_bytes(dir / ("one" + how + ".safetensors"));
    EXPECT_FALSE(weights.empty());
    EXPECT_TRUE(weights == file_bytes(dir / ("two" + how + ".safetensors")))
        << "the weights differ";
  }
  std::filesystem::remove_all(dir);
}

TEST(TrainGpt, WeightsSavedAsSafetensorsLoadBack) {
  require_corpus();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("axle_train_gpt_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string weights = (dir / "gpt.safetensors").string();
  const TrainerRun trained =
      train(std::string(kSmall) + "--max_steps 20 --log_steps 0 --shuffle 0 --save " + weights);
  ASSERT_EQ(trained.status, 0) << trained.output;
  // Learning rate 0: the loaded weights are evaluated unchanged.
  const TrainerRun loaded = train(
      std::string(kSmall) + "--max_steps 1 --lr 0 --min_lr 0 --log_steps 0 --init " + weights);
  ASSERT_EQ(loaded.status, 0) << loaded.output;
  EXPECT_EQ(loaded.summary["final_val_loss"], trained.summary["final_val_loss"]) << loaded.output;
  const TrainerRun wrong =
      train("--n_layer 3 --n_embd 64 --block_size 64 --max_steps 1 --init " + weights);
  EXPECT_NE(wrong.status, 0);
  EXPECT_NE(wrong.output.find("transformer.h.2"), std::string::npos) << wrong.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
