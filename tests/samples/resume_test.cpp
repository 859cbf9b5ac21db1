// The trainers killed and resumed: a run of train_gpt or train_mnist with --checkpoint_dir killed
// by SIGKILL at a random moment, then run again with --resume, writes weights byte-identical to a
// run never stopped — train_gpt on one device, four, under DDP, FSDP, SPMD over a 2 x 2 mesh, and
// under bf16 autocast with shuffled rows, and under mpirun (2 processes of 2 devices, one killed by
// pid; resumed as the same job and as one process of 4; SPMD; and 16 replicas as 16 x 1 and
// 4 x 4); train_mnist on one device and four, resumed inside an epoch or between two;
// train_resnet on two devices, each replica's BatchNorm statistics its own again (the evaluation
// after training, which reads them on every replica, the same).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
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

// What a committed step's directory holds last (graph/formats/step_commit.h).
constexpr const char* kStepCommitFileName = "commit.json";

TrainerRun train(const std::string& flags, const char* trainer = AXLE_TRAIN_GPT) {
  return axle::testing::run_trainer(std::string(trainer) + " " + flags);
}

// Runs `command` through a shell that execs it (so the pid is the command's); returns the pid.
pid_t start(const std::string& command) {
  const std::string quiet = "exec " + command + " >/dev/null 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", quiet.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The processes `parent` started, as /proc lists them.
std::vector<pid_t> children_of(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  std::vector<pid_t> children;
  for (pid_t child = 0; in >> child;) children.push_back(child);
  return children;
}

// Waits until `path` exists, a minute at most; an empty path: not at all.
void wait_for(const fs::path& path) {
  if (path.empty()) return;
  const auto until = Clock::now() + std::chrono::minutes(1);
  while (!fs::exists(path) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Starts `flags`' run, kills it with SIGKILL `delay` after `ready` exists (or after its start)
// unless it ended first, and reaps it.
void kill_after(const char* trainer, const std::string& flags, std::chrono::milliseconds delay,
                const fs::path& ready = {}) {
  const pid_t pid = start(std::string(trainer) + " " + flags);
  ASSERT_GT(pid, 0);
  wait_for(ready);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// Starts a job of `launcher` (mpiexec), sends one of its processes `signal` by pid `delay` after
// `ready` exists and waits for the job to end (mpirun ends it when a process dies); returns its
// exit status.
int signal_a_process_after(const std::string& job, const fs::path& ready,
                           std::chrono::milliseconds delay, int signal = SIGKILL) {
  const pid_t launcher = start(job);
  if (launcher <= 0) return -1;
  wait_for(ready);
  std::this_thread::sleep_for(delay);
  // The job's processes are the leaves below the launcher (mpiexec may run under timeout).
  pid_t victim = launcher;
  for (std::vector<pid_t> below = children_of(victim); !below.empty();
       below = children_of(victim)) {
    victim = below.back();
  }
  ::kill(victim, signal);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  return status;
}

// The committed steps under a checkpoint directory, oldest first.
std::vector<int64_t> checkpoint_steps(const fs::path& dir) {
  std::vector<int64_t> steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (fs::exists(entry.path() / "commit.json")) {
      steps.push_back(std::stoll(entry.path().filename().string()));
    }
  }
  std::ranges::sort(steps);
  return steps;
}

const char* const kSmall = "--n_layer 2 --n_embd 64 --block_size 64 --batch_size 8 --seed 1 ";
// The small GPT under mpirun, for 60 steps.
const std::string kMpiJob = std::string(kSmall) + "--max_steps 60 --eval_interval 0 --log_steps 0 ";

// train_gpt under mpirun: `processes` processes of `devices` devices, 2 of 2 by default (a hung
// job ends in time: a replica waits `collective_timeout` seconds for the others at a meeting).
std::string mpirun_gpt(int processes = 2, int devices = 2, int collective_timeout = 10) {
  return "timeout -k 10 120 " + std::string(AXLE_MPIEXEC) +
         " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(processes) +
         " -x CPU_NUM_DEVICES=" + std::to_string(devices) +
         " -x AXLE_COLLECTIVE_TIMEOUT=" + std::to_string(collective_timeout) + " " +
         AXLE_TRAIN_GPT + " --num_devices " + std::to_string(devices) + " ";
}

class TrainerResume : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists("/usr/share/games/fortunes")) << "run ./axle.sh deps";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `flags` uninterrupted, then `kills` times killed at a random moment of that run's
  // length and resumed; each resumed run's weights must be the uninterrupted run's bytes, and
  // its closing line's `same_keys` the uninterrupted run's.
  void expect_resumes_exactly(const std::string& flags, int kills,
                              const char* trainer = AXLE_TRAIN_GPT, int64_t every = 5,
                              const std::vector<std::string>& same_keys = {}) {
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
    // 70% (its start is mostly start-up and compiling); the last one at a random moment of the
    // 30% after the first checkpoint is committed, so that one kill at least comes after it
    // however slow this run is against the uninterrupted one.
    std::uniform_real_distribution<double> within(0.0, 1.0);
    const auto moment = [&](int k) {
      const double at =
          k + 1 == kills ? 0.3 * within(random) : 0.3 + 0.7 * (k + within(random)) / kills;
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
      kill_after(
          trainer, resumable, delay,
          k + 1 == kills ? checkpoints / std::to_string(every) / kStepCommitFileName : fs::path());
      const TrainerRun resumed = train(resumable + " --resume", trainer);
      ASSERT_EQ(resumed.status, 0) << resumed.output;
      const int64_t from = resumed.summary["resumed_from_step"].get<int64_t>();
      EXPECT_EQ(from % every, 0) << resumed.output;
      EXPECT_EQ(file_bytes(weights), want) << "resumed from step " << from;
      for (const std::string& key : same_keys) {
        EXPECT_EQ(resumed.summary[key], whole.summary[key])
            << key << ", resumed from step " << from;
      }
      resumed_from.push_back(from);
    }
    // Kills before the first checkpoint start afresh; the last one came later.
    EXPECT_TRUE(std::ranges::any_of(resumed_from, [](int64_t from) { return from > 0; }))
        << ::testing::PrintToString(resumed_from);
    std::printf("%s: resumed from steps %s\n", flags.c_str(),
                ::testing::PrintToString(resumed_from).c_str());
  }

  // The mpirun job of kMpiJob uninterrupted, its weights in dir_/whole.axle; returns its length.
  std::chrono::milliseconds whole_mpi_job() {
    const auto begin = Clock::now();
    const TrainerRun whole = axle::testing::run_trainer(mpirun_gpt() + kMpiJob + "--save " +
                                                        (dir_ / "whole.axle").string());
    const auto length = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - begin);
    EXPECT_EQ(whole.status, 0) << whole.output;
    return length;
  }

  const fs::path dir_ =
      fs::temp_directory_path() / ("axle_resume_test_" + std::to_string(::getpid()));
};

TEST_F(TrainerResume, OneDeviceKilledAtFiveRandomMoments) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 40", 5);
}

TEST_F(TrainerResume, FourDevices) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 4", 2);
}

// Each replica's shards and AdamW state, saved by every replica and restored by each.
TEST_F(TrainerResume, FullyShardedDataParallel) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 2 --fsdp", 2);
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

TEST_F(TrainerResume, MnistFullyShardedOnFourDevices) {
  expect_resumes_exactly(std::string(kMnist) + "--num_devices 4 --fsdp", 2, AXLE_TRAIN_MNIST, 20);
}

// ResNet-18 at 32 x 32 on two devices: the weights are the master's, and each replica's
// BatchNorm statistics, which the weights do not depend on, show in the evaluation of every
// replica after training.
TEST_F(TrainerResume, ResnetOnTwoDevicesWithEachReplicasBatchNormStatistics) {
  expect_resumes_exactly("--image_size 32 --batch_size 4 --max_steps 16 --num_devices 2", 3,
                         AXLE_TRAIN_RESNET, 3, {"eval_loss", "eval_accuracy", "final_loss"});
}

// Under mpirun, 2 processes of 2 devices: one process killed by pid ends the job; run again
// with --resume, the job writes the uninterrupted job's weights, and so does one process of
// four devices resumed from the same checkpoints.
TEST_F(TrainerResume, UnderMpirunAKilledProcessEndsTheJobAndTheJobResumes) {
  const std::string mpirun = mpirun_gpt();
  const std::string flags = kMpiJob;
  const std::chrono::milliseconds length = whole_mpi_job();
  ASSERT_FALSE(HasFailure());
  const std::string want = file_bytes(dir_ / "whole.axle");

  const fs::path checkpoints = dir_ / "job", copy = dir_ / "copy";
  const std::string resumable =
      flags + "--checkpoint_dir " + checkpoints.string() + " --checkpoint_every 5 --save ";
  // A tenth of the run after the first checkpoint is committed: well before the end.
  const std::chrono::milliseconds delay(length.count() / 10);
  SCOPED_TRACE(::testing::Message()
               << "killed " << delay.count() << " ms after the first checkpoint, of a "
               << length.count() << " ms run");
  (void)signal_a_process_after(mpirun + resumable + (dir_ / "killed.axle").string(),
                               checkpoints / "5" / kStepCommitFileName, delay);
  fs::copy(checkpoints, copy, fs::copy_options::recursive);

  const TrainerRun resumed = axle::testing::run_trainer(
      mpirun + resumable + (dir_ / "resumed.axle").string() + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const int64_t from = resumed.summary["resumed_from_step"].get<int64_t>();
  EXPECT_GT(from, 0) << resumed.output;
  EXPECT_LT(from, 60) << resumed.output;  // the job was cut short
  std::printf("resumed from step %ld\n", static_cast<long>(from));
  EXPECT_EQ(file_bytes(dir_ / "resumed.axle"), want);

  const TrainerRun as_one_process =
      train(std::string(kSmall) + "--max_steps 60 --eval_interval 0 --log_steps 0 " +
            "--num_devices 4 --checkpoint_dir " + copy.string() + " --checkpoint_every 5 --save " +
            (dir_ / "one_process.axle").string() + " --resume");
  ASSERT_EQ(as_one_process.status, 0) << as_one_process.output;
  EXPECT_EQ(as_one_process.summary["resumed_from_step"], resumed.summary["resumed_from_step"]);
  EXPECT_EQ(file_bytes(dir_ / "one_process.axle"), want);
}

// Under mpirun, SIGTERM to one process of a 2 x 2 job is a preemption: every process saves the
// same step (the only one: --checkpoint_every is past the end) and exits 0, and --resume goes on
// from it to the uninterrupted job's weights.
TEST_F(TrainerResume, UnderMpirunSigtermSavesOneStepEverywhereAndTheJobResumes) {
  const std::string mpirun = mpirun_gpt();
  const std::string flags = kMpiJob;
  const std::chrono::milliseconds length = whole_mpi_job();
  ASSERT_FALSE(HasFailure());

  const fs::path checkpoints = dir_ / "job";
  const std::string resumable = flags + "--checkpoint_dir " + checkpoints.string() +
                                " --checkpoint_every 1000 --save " +
                                (dir_ / "resumed.axle").string();
  // A fifth of the run after the managers made the directory (watching for SIGTERM from then).
  const int status = signal_a_process_after(mpirun + resumable, checkpoints,
                                            std::chrono::milliseconds(length.count() / 5), SIGTERM);
  EXPECT_EQ(status, 0);
  const std::vector<int64_t> steps = checkpoint_steps(checkpoints);
  ASSERT_EQ(steps.size(), 1U);
  EXPECT_GT(steps[0], 0);
  EXPECT_LT(steps[0], 60);
  for (int ordinal = 0; ordinal < 4; ++ordinal) {
    EXPECT_TRUE(fs::exists(checkpoints / std::to_string(steps[0]) /
                           ("rng." + std::to_string(ordinal) + ".json")));
  }
  const TrainerRun resumed = axle::testing::run_trainer(mpirun + resumable + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(resumed.summary["resumed_from_step"].get<int64_t>(), steps[0]) << resumed.output;
  EXPECT_EQ(file_bytes(dir_ / "resumed.axle"), file_bytes(dir_ / "whole.axle"));
}

// --fsdp under mpirun, 2 processes of 2 devices: every replica of each process saves its own
// shards; a job stopped at step 10 and run again with --resume to step 20 writes the weights of
// the job that ran to 20.
TEST_F(TrainerResume, UnderMpirunFsdpEachProcessSavesAndRestoresItsShards) {
  const std::string job = mpirun_gpt() + kSmall + "--eval_interval 0 --log_steps 0 --fsdp ";
  const TrainerRun whole =
      axle::testing::run_trainer(job + "--max_steps 20 --save " + (dir_ / "whole.axle").string());
  ASSERT_EQ(whole.status, 0) << whole.output;
  const std::string checkpoints =
      " --checkpoint_dir " + (dir_ / "job").string() + " --checkpoint_every 5 ";
  const TrainerRun first = axle::testing::run_trainer(job + "--max_steps 10" + checkpoints);
  ASSERT_EQ(first.status, 0) << first.output;
  for (int ordinal = 0; ordinal < 4; ++ordinal) {
    EXPECT_TRUE(fs::exists(dir_ / "job" / "10" / ("replica." + std::to_string(ordinal) + ".ckpt")));
  }
  const TrainerRun resumed = axle::testing::run_trainer(
      job + "--max_steps 20" + checkpoints + "--resume --save " + (dir_ / "resumed.axle").string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(resumed.summary["resumed_from_step"], 10) << resumed.output;
  EXPECT_EQ(file_bytes(dir_ / "resumed.axle"), file_bytes(dir_ / "whole.axle"));
}

// --spmd --mesh 2,2 under mpirun, 2 processes of 2 devices: each process writes its devices'
// share of the tiles; a job stopped at step 10 and run again with --resume to step 20 writes the
// weights of the job that ran to 20, and so do one process of four devices resumed from the same
// step and the job resumed from a step one process of four devices saved.
TEST_F(TrainerResume, UnderMpirunSpmdResumesAsTheSameJobAndAsOneProcess) {
  const std::string flags =
      std::string(kSmall) + "--eval_interval 0 --log_steps 0 --spmd --mesh 2,2 ";
  const TrainerRun whole = axle::testing::run_trainer(
      mpirun_gpt() + flags + "--max_steps 20 --save " + (dir_ / "whole.axle").string());
  ASSERT_EQ(whole.status, 0) << whole.output;
  const std::string checkpoints =
      " --checkpoint_dir " + (dir_ / "job").string() + " --checkpoint_every 5 ";
  const TrainerRun first =
      axle::testing::run_trainer(mpirun_gpt() + flags + "--max_steps 10" + checkpoints);
  ASSERT_EQ(first.status, 0) << first.output;
  // Every device's tiles, the second process's devices' among them, and no whole values.
  for (int device = 0; device < 4; ++device) {
    const fs::path tiles = dir_ / "job" / "10" / ("tiles." + std::to_string(device) + ".ckpt");
    ASSERT_TRUE(fs::exists(tiles)) << tiles;
    EXPECT_GT(fs::file_size(tiles), 10'000u) << tiles;  // a quarter of the model and its state
  }
  EXPECT_FALSE(fs::exists(dir_ / "job" / "10" / "tensors.ckpt"));
  fs::copy(dir_ / "job", dir_ / "alone", fs::copy_options::recursive);  // still ends at step 10
  const TrainerRun resumed =
      axle::testing::run_trainer(mpirun_gpt() + flags + "--max_steps 20" + checkpoints +
                                 "--resume --save " + (dir_ / "resumed.axle").string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(resumed.summary["resumed_from_step"], 10) << resumed.output;
  EXPECT_EQ(file_bytes(dir_ / "resumed.axle"), file_bytes(dir_ / "whole.axle"));
  const TrainerRun alone =
      train(flags + "--num_devices 4 --max_steps 20 --checkpoint_dir " + (dir_ / "alone").string() +
            " --checkpoint_every 5 " + "--resume --save " + (dir_ / "alone.axle").string());
  ASSERT_EQ(alone.status, 0) << alone.output;
  EXPECT_EQ(alone.summary["resumed_from_step"], 10) << alone.output;
  EXPECT_EQ(file_bytes(dir_ / "alone.axle"), file_bytes(dir_ / "whole.axle"));

  // Saved by one process of four devices, resumed by the job of two processes.
  const std::string by_one =
      " --checkpoint_dir " + (dir_ / "by_one").string() + " --checkpoint_every 5 ";
  const TrainerRun one = train(flags + "--num_devices 4 --max_steps 10" + by_one);
  ASSERT_EQ(one.status, 0) << one.output;
  const TrainerRun grown =
      axle::testing::run_trainer(mpirun_gpt() + flags + "--max_steps 20" + by_one +
                                 "--resume --save " + (dir_ / "grown.axle").string());
  ASSERT_EQ(grown.status, 0) << grown.output;
  EXPECT_EQ(grown.summary["resumed_from_step"], 10) << grown.output;
  EXPECT_EQ(file_bytes(dir_ / "grown.axle"), file_bytes(dir_ / "whole.axle"));
}

// 16 replicas, oversubscribed on this machine's cores: 16 processes of 1 device and 4 of 4 train
// a tiny GPT as one process of 16 devices, bit for bit. A process of the 16 x 1 job killed by pid
// ends the job (before its time limit); run again with --resume the job writes the weights of
// the one never stopped, and so do 4 processes of 4 resumed from the same checkpoints.
TEST_F(TrainerResume, SixteenReplicasTrainAsOneProcessAndResumeAfterAKill) {
  const std::string tiny =
      "--n_layer 1 --n_embd 32 --n_head 2 --block_size 32 --batch_size 2 --seed 1 "
      "--max_steps 100 --eval_interval 0 --log_steps 0 ";
  const TrainerRun one =
      train(tiny + "--num_devices 16 --save " + (dir_ / "one_process.axle").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const std::string want = file_bytes(dir_ / "one_process.axle");
  ASSERT_FALSE(want.empty());
  for (const auto& [processes, devices] : {std::pair{16, 1}, std::pair{4, 4}}) {
    const fs::path weights = dir_ / ("job" + std::to_string(processes) + ".axle");
    const TrainerRun job = axle::testing::run_trainer(mpirun_gpt(processes, devices, 60) + tiny +
                                                      "--save " + weights.string());
    ASSERT_EQ(job.status, 0) << job.output;
    EXPECT_EQ(job.summary["world_size"], 16) << job.output;
    EXPECT_EQ(file_bytes(weights), want) << processes << " processes of " << devices;
  }

  const fs::path checkpoints = dir_ / "job", copy = dir_ / "copy";
  const std::string resumable =
      tiny + "--checkpoint_dir " + checkpoints.string() + " --checkpoint_every 5 --save ";
  const int status = signal_a_process_after(
      mpirun_gpt(16, 1) + resumable + (dir_ / "killed.axle").string(),
      checkpoints / "5" / kStepCommitFileName, std::chrono::milliseconds(200));
  EXPECT_NE(status, 0);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 124) << "the job ran to its time limit";
  fs::copy(checkpoints, copy, fs::copy_options::recursive);

  // Jobs that must finish wait longer at their meetings: 16 processes restoring on 2 cores, with
  // the rest of the suite beside them, can keep one from a meeting for more than 10 s.
  const TrainerRun resumed = axle::testing::run_trainer(
      mpirun_gpt(16, 1, 60) + resumable + (dir_ / "resumed.axle").string() + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  const int64_t from = resumed.summary["resumed_from_step"].get<int64_t>();
  EXPECT_GT(from, 0) << resumed.output;
  EXPECT_LT(from, 100) << resumed.output;  // the job was cut short
  EXPECT_EQ(file_bytes(dir_ / "resumed.axle"), want);

  const TrainerRun as_four = axle::testing::run_trainer(
      mpirun_gpt(4, 4, 60) + tiny + "--checkpoint_dir " + copy.string() +
      " --checkpoint_every 5 --save " + (dir_ / "as_four.axle").string() + " --resume");
  ASSERT_EQ(as_four.status, 0) << as_four.output;
  EXPECT_EQ(as_four.summary["resumed_from_step"], resumed.summary["resumed_from_step"]);
  EXPECT_EQ(file_bytes(dir_ / "as_four.axle"), want);
  std::printf("16 replicas: resumed from step %ld\n", static_cast<long>(from));
}

// A run killed after its last checkpoint (the last step's) but before it ended: resumed, it has
// no step left to train and writes the weights, and gives the evaluation, of the whole run.
TEST_F(TrainerResume, AResumeAfterTheLastStepTrainsNoMoreAndWritesTheSameWeights) {
  for (const std::string extra : {"", "--num_devices 4 --spmd --mesh 2,2 "}) {
    SCOPED_TRACE(extra);
    const fs::path checkpoints = dir_ / ("last" + std::to_string(extra.size()));
    const std::string flags = std::string(kSmall) + extra +
                              "--max_steps 6 --checkpoint_every 2 --checkpoint_dir " +
                              checkpoints.string() + " --save ";
    const TrainerRun whole = train(flags + (checkpoints / "whole.axle").string());
    ASSERT_EQ(whole.status, 0) << whole.output;
    const TrainerRun resumed = train(flags + (checkpoints / "resumed.axle").string() + " --resume");
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_EQ(resumed.summary["resumed_from_step"], 6) << resumed.output;
    EXPECT_EQ(resumed.summary["final_val_loss"], whole.summary["final_val_loss"]);
    EXPECT_EQ(file_bytes(checkpoints / "resumed.axle"), file_bytes(checkpoints / "whole.axle"));
  }
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

// One program over a 2 x 2 mesh of four devices (Megatron's layout over "model", the batch
// over "data"): each value is restored laid out as it was saved, AdamW's state (which a fresh
// optimizer has not created yet) included, so the steps after a resume run the same programs.
TEST_F(TrainerResume, SpmdOverATwoByTwoMesh) {
  expect_resumes_exactly(std::string(kSmall) + "--max_steps 30 --num_devices 4 --spmd --mesh 2,2",
                         2);
}

// train_mnist's --spmd loop over a 2 x 2 mesh (the batch over "data", Megatron's layers over
// "model"): killed and resumed, it writes the weights of the run never stopped.
TEST_F(TrainerResume, MnistSpmdOverATwoByTwoMesh) {
  expect_resumes_exactly(std::string(kMnist) + "--num_devices 4 --spmd --mesh 2,2", 2,
                         AXLE_TRAIN_MNIST, 20);
}

}  // namespace
