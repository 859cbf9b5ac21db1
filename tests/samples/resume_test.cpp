// The trainers killed and resumed: a run of train_gpt or train_mnist with --checkpoint_dir killed
// by SIGKILL at a random moment, then run again with --resume, writes weights byte-identical to a
// run never stopped — train_gpt on one device, four, under DDP, and under bf16 autocast with
// shuffled rows; train_mnist on one device and four, resumed inside an epoch or between two.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trainer_run.h"

namespace {

namespace fs = std::filesystem;
using axle::testing::file_bytes;
using axle::testing::TrainerRun;
using Clock = std::chrono::steady_clock;

TrainerRun train(const std::string& flags, const char* trainer = AXLE_TRAIN_GPT) {
  return axle::testing::run_trainer(std::string(trainer) + " " + flags);
}

// Starts `flags`' run, kills it with SIGKILL after `delay` (unless it ended first) and reaps it.
void kill_after(const char* trainer, const std::string& flags, std::chrono::milliseconds delay) {
  const std::string command = "exec " + std::string(trainer) + " " + flags + " >/dev/null 2>&1";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

class TrainerResume : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists("/usr/share/games/fortunes")) << "run ./axle.sh deps";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `flags` uninterrupted, then `kills` times killed at a random moment of that run's
  // length and resumed; each resumed run's weights must be the uninterrupted run's bytes.
  void expect_resumes_exactly(const std::string& flags, int kills,
                              const char* trainer = AXLE_TRAIN_GPT, int64_t every = 5) {
    const bool gpt = trainer == std::string(AXLE_TRAIN_GPT);
    const std::string run_flags = flags + (gpt ? " --eval_interval 0" : "") + " --log_steps 0 ";
    const auto start = Clock::now();
    const TrainerRun whole = train(run_flags + "--save " + (dir_ / "whole.axle").string(), trainer);
    const auto length = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    ASSERT_EQ(whole.status, 0) << whole.output;
    const std::string want = file_bytes(dir_ / "whole.axle");
    ASSERT_FALSE(want.empty());

    const unsigned seed = std::random_device{}();
    std::mt19937 random(seed);
    // Kill k falls at a random moment of the k-th of `kills` equal stretches of the run's last
    // 70% (its start is mostly start-up and compiling), so that the last ones come after the
    // first checkpoint.
    std::uniform_real_distribution<double> within(0.0, 1.0);
    const auto moment = [&](int k) {
      const double at = 0.3 + 0.7 * (k + within(random)) / kills;
      return static_cast<int64_t>(at * static_cast<double>(length.count()));
    };
    std::vector<int64_t> resumed_from;
    for (int k = 0; k < kills; ++k) {
      const std::chrono::milliseconds delay(moment(k));
      SCOPED_TRACE(::testing::Message()
                   << flags << ": killed after " << delay.count() << " ms of a " << length.count()
                   << " ms run (seed " << seed << ")");
      const fs::path checkpoints = dir_ / ("checkpoints" + std::to_string(k));
      const fs::path weights = dir_ / ("resumed" + std::to_string(k) + ".axle");
      const std::string resumable = run_flags + "--checkpoint_dir " + checkpoints.string() +
                                    " --checkpoint_every " + std::to_string(every) +
                                    " --keep 2 --save " + weights.string();
      kill_after(trainer, resumable, delay);
      const TrainerRun resumed = train(resumable + " --resume", trainer);
      ASSERT_EQ(resumed.status, 0) << resumed.output;
      const int64_t from = resumed.summary["resumed_from_step"].get<int64_t>();
      EXPECT_EQ(from % every, 0) << resumed.output;
      EXPECT_EQ(file_bytes(weights), want) << "resumed from step " << from;
      resumed_from.push_back(from);
    }
    // Kills before the first checkpoint start afresh; at least one kill must have come later.
    EXPECT_TRUE(std::ranges::any_of(resumed_from, [](int64_t from) { return from > 0; }))
        << ::testing::PrintToString(resumed_from);
    std::printf("%s: resumed from steps %s\n", flags.c_str(),
                ::testing::PrintToString(resumed_from).c_str());
  }

  const fs::path dir_ =
      fs::temp_directory_path() / ("axle_train_gpt_resume_" + std::to_string(::getpid()));
};

const char* const kSmall = "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 ";

TEST_F(TrainerResume, OneDeviceKilledAtFiveRandomMoments) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 40", 5);
}

TEST_F(TrainerResume, FourDevices) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 4", 2);
}

TEST_F(TrainerResume, DistributedDataParallel) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 2 --ddp", 2);
}

TEST_F(TrainerResume, Bf16AutocastWithShuffledRows) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --amp bf16 --shuffle 1", 2);
}

// Fake data, 2 epochs of 58 steps a replica on four devices (234 on one): checkpoints every 20
// steps fall inside epochs and kills between them.
const char* const kMnist = "--fake_data --num_epochs 2 --batch_size 256 --num_workers 1 ";

TEST_F(TrainerResume, MnistOnOneDevice) {
  expect_resumes_exactly(std::string(kMnist) + "--num_devices 1", 3, AXLE_TRAIN_MNIST, 20);
}

TEST_F(TrainerResume, MnistOnFourDevices) {
  expect_resumes_exactly(std::string(kMnist) + "--num_devices 4", 3, AXLE_TRAIN_MNIST, 20);
}

TEST_F(TrainerResume, ResumeWithoutACheckpointStartsAfresh) {
  const fs::path checkpoints = dir_ / "none";
  const TrainerRun run =
      train(std::string(kSmall) + "--max_steps 6 --eval_interval 0 " + "--checkpoint_dir " +
            checkpoints.string() + " --checkpoint_every 3 --resume");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.summary["resumed_from_step"].get<int64_t>(), 0) << run.output;
  EXPECT_TRUE(fs::exists(checkpoints / "3" / "commit.json"));
  EXPECT_TRUE(fs::exists(checkpoints / "6" / "commit.json"));
}

TEST_F(TrainerResume, ShardedModelsAreRefusedWithCheckpoints) {
  const TrainerRun run = train(std::string(kSmall) + "--max_steps 2 --num_devices 2 --fsdp " +
                               "--checkpoint_dir " + (dir_ / "fsdp").string());
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("--checkpoint_dir does not save sharded models"), std::string::npos)
      << run.output;
  const TrainerRun mnist = train(
      "--fake_data --max_steps 2 --num_devices 2 --spmd --mesh 2,1 "
      "--checkpoint_dir " +
          (dir_ / "spmd").string(),
      AXLE_TRAIN_MNIST);
  EXPECT_NE(mnist.status, 0);
  EXPECT_NE(mnist.output.find("--checkpoint_dir does not save sharded models"), std::string::npos)
      << mnist.output;
}

}  // namespace
