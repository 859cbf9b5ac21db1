// samples/train_gpt killed and resumed: a run with --checkpoint_dir killed by SIGKILL at a random
// moment, then run again with --resume, writes weights byte-identical to a run never stopped —
// on one device, four, under DDP, and under bf16 autocast with shuffled rows.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "trainer_run.h"

namespace {

namespace fs = std::filesystem;
using axle::testing::file_bytes;
using axle::testing::TrainerRun;
using Clock = std::chrono::steady_clock;

TrainerRun train(const std::string& flags) {
  return axle::testing::run_trainer(std::string(AXLE_TRAIN_GPT) + " " + flags);
}

// Starts `flags`' run, kills it with SIGKILL after `delay` (unless it ended first) and reaps it.
void kill_after(const std::string& flags, std::chrono::milliseconds delay) {
  const std::string command =
      "exec " + std::string(AXLE_TRAIN_GPT) + " " + flags + " >/dev/null 2>&1";
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

class TrainGptResume : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists("/usr/share/games/fortunes")) << "run ./axle.sh deps";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `flags` uninterrupted, then `kills` times killed at a random moment of that run's
  // length and resumed; each resumed run's weights must be the uninterrupted run's bytes.
  void expect_resumes_exactly(const std::string& flags, int kills) {
    const std::string run_flags = flags + " --eval_interval 0 --log_steps 0 ";
    const auto start = Clock::now();
    const TrainerRun whole = train(run_flags + "--save " + (dir_ / "whole.axle").string());
    const auto length = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    ASSERT_EQ(whole.status, 0) << whole.output;
    const std::string want = file_bytes(dir_ / "whole.axle");
    ASSERT_FALSE(want.empty());

    const unsigned seed = std::random_device{}();
    std::mt19937 random(seed);
    std::uniform_int_distribution<int64_t> moment(length.count() / 10, length.count());
    for (int k = 0; k < kills; ++k) {
      const std::chrono::milliseconds delay(moment(random));
      SCOPED_TRACE(::testing::Message()
                   << flags << ": killed after " << delay.count() << " ms of a " << length.count()
                   << " ms run (seed " << seed << ")");
      const fs::path checkpoints = dir_ / ("checkpoints" + std::to_string(k));
      const fs::path weights = dir_ / ("resumed" + std::to_string(k) + ".axle");
      const std::string resumable = run_flags + "--checkpoint_dir " + checkpoints.string() +
                                    " --checkpoint_every 5 --keep 2 --save " + weights.string();
      kill_after(resumable, delay);
      const TrainerRun resumed = train(resumable + " --resume");
      ASSERT_EQ(resumed.status, 0) << resumed.output;
      const int64_t from = resumed.summary["resumed_from_step"].get<int64_t>();
      EXPECT_EQ(from % 5, 0) << resumed.output;
      EXPECT_EQ(file_bytes(weights), want) << "resumed from step " << from;
    }
  }

  const fs::path dir_ =
      fs::temp_directory_path() / ("axle_train_gpt_resume_" + std::to_string(::getpid()));
};

const char* const kSmall = "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 ";

TEST_F(TrainGptResume, OneDeviceKilledAtFiveRandomMoments) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 40", 5);
}

TEST_F(TrainGptResume, FourDevices) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 4", 2);
}

TEST_F(TrainGptResume, DistributedDataParallel) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 2 --ddp", 2);
}

TEST_F(TrainGptResume, Bf16AutocastWithShuffledRows) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --amp bf16 --shuffle 1", 2);
}

TEST_F(TrainGptResume, ResumeWithoutACheckpointStartsAfresh) {
  const fs::path checkpoints = dir_ / "none";
  const TrainerRun run =
      train(std::string(kSmall) + "--max_steps 6 --eval_interval 0 " + "--checkpoint_dir " +
            checkpoints.string() + " --checkpoint_every 3 --resume");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.summary["resumed_from_step"].get<int64_t>(), 0) << run.output;
  EXPECT_TRUE(fs::exists(checkpoints / "3" / "commit.json"));
  EXPECT_TRUE(fs::exists(checkpoints / "6" / "commit.json"));
}

TEST_F(TrainGptResume, ShardedModelsAreRefusedWithCheckpoints) {
  const TrainerRun run = train(std::string(kSmall) + "--max_steps 2 --num_devices 2 --fsdp " +
                               "--checkpoint_dir " + (dir_ / "fsdp").string());
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("--checkpoint_dir does not save sharded models"), std::string::npos)
      << run.output;
}

}  // namespace
