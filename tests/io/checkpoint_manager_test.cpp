// CheckpointManager: saves every save_interval steps, keeps max_to_keep, a run restored from its
// newest step continuing bit for bit (weights, optimizer, scheduler, random streams, the caller's
// tensors), each kind of damage found and the newest good step taken instead, a failed save (a
// writer error, a full disk, no permission) leaving the earlier steps as they were, replicas each
// keeping their own random streams and per_replica values, and a busy writer skipping a save
// when asked to.
#include "axle/io/checkpoint_manager.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/axle.h"
#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"
#include "tests/io/loader_test_util.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

class CheckpointManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
    clear_all();
  }
  void TearDown() override { LazySystem::restart(); }

  TempDir dir_;
};

// A run's pieces: a model with dropout (so the random streams matter), Adam, a schedule.
struct SmallRun {
  explicit SmallRun(uint64_t init_seed) {
    set_rng_state(init_seed);
    model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(8, 3)});
    adam = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
    schedule = std::make_unique<optim::StepLR>(*adam, 2, 0.5);
  }

  void train(int steps) {
    const Tensor x = tensor(std::vector<float>{1, -2, 3, 0.5f, 4, -1, 2, 2, -3, 1, 0, 1}, {3, 4});
    const Tensor target = tensor(std::vector<int64_t>{2, 0, 1}, {3});
    for (int s = 0; s < steps; ++s) {
      adam->zero_grad();
      nn::cross_entropy((*model)(x), target).backward();
      adam->step();
      schedule->step();
      mark_step();
    }
  }

  TrainingState state() {
    return {.model = model.get(), .optimizer = adam.get(), .scheduler = schedule.get()};
  }

  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> adam;
  std::unique_ptr<optim::StepLR> schedule;
};

std::vector<std::vector<std::byte>> weights(const nn::Module& model) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& [name, tensor] : model.state_dict()) out.push_back(tensor.cpu().bytes);
  return out;
}

TEST_F(CheckpointManagerTest, SavesEveryIntervalOrWhenForced) {
  CheckpointManager manager(dir_ / "run", /*save_interval=*/10);
  EXPECT_TRUE(manager.should_save(0));
  EXPECT_TRUE(manager.should_save(20));
  EXPECT_FALSE(manager.should_save(15));
  SmallRun run(1);
  EXPECT_FALSE(manager.save(15, run.state()));
  EXPECT_TRUE(manager.all_steps().empty());
  EXPECT_TRUE(manager.save(10, run.state()));
  EXPECT_TRUE(manager.save(15, run.state(), /*force=*/true));
  EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{10, 15}));
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_ / "run")) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".")) << entry.path();
  }
  EXPECT_THROW(CheckpointManager(dir_ / "run", 0), std::invalid_argument);
}

TEST_F(CheckpointManagerTest, ARestoredRunContinuesBitForBit) {
  SmallRun run(1);
  run.train(3);
  CheckpointManager manager(dir_ / "run", 3);
  const Tensor counter = scalar_tensor(42, DType::kInt64);
  TrainingState state = run.state();
  state.extra = {{"tokens_seen", counter}};
  ASSERT_TRUE(manager.save(3, state));
  run.train(3);  // the uninterrupted run

  SmallRun resumed(7);  // other initial weights
  set_rng_state(99);    // and another random stream
  TrainingState resumed_state = resumed.state();
  resumed_state.extra = {{"tokens_seen", scalar_tensor(0, DType::kInt64)}};
  EXPECT_EQ(manager.restore_latest(resumed_state), 3);
  EXPECT_EQ(resumed_state.extra[0].second.item(), 42);
  EXPECT_EQ(resumed.schedule->last_epoch(), 3);
  resumed.train(3);

  EXPECT_EQ(weights(*resumed.model), weights(*run.model));
  EXPECT_EQ(resumed.schedule->get_last_lr(), run.schedule->get_last_lr());
  EXPECT_EQ(resumed.adam->lr(), run.adam->lr());
  const nn::StateDict want = run.adam->state_dict(), got = resumed.adam->state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].second.cpu().bytes, want[i].second.cpu().bytes) << got[i].first;
  }
}

TEST_F(CheckpointManagerTest, WithoutTheRandomStreamsTheRunWouldDiffer) {
  // The control for the test above: the same restore with the streams moved on afterwards draws
  // other dropout masks, so the weights differ; the streams are what made them agree.
  SmallRun run(1);
  run.train(2);
  CheckpointManager manager(dir_ / "run", 1);
  manager.save(2, run.state());
  run.train(2);
  SmallRun resumed(7);
  TrainingState state = resumed.state();
  ASSERT_EQ(manager.restore_latest(state), 2);
  (void)rand({16});  // moves the stream on
  resumed.train(2);
  EXPECT_NE(weights(*resumed.model), weights(*run.model));
}

TEST_F(CheckpointManagerTest, KeepsTheNewestMaxToKeepSteps) {
  CheckpointManager manager(dir_ / "run", 1, /*max_to_keep=*/2);
  SmallRun run(1);
  for (int64_t step = 1; step <= 4; ++step) manager.save(step, run.state());
  EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "1"));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "2"));
}

TEST_F(CheckpointManagerTest, ASavedStepIsReplacedWhole) {
  CheckpointManager manager(dir_ / "run", 1);
  SmallRun run(1);
  TrainingState state = run.state();
  state.extra = {{"value", scalar_tensor(1.0)}};
  manager.save(5, state);
  state.extra = {{"value", scalar_tensor(2.0)}};
  manager.save(5, state);
  EXPECT_EQ(manager.all_steps(), std::vector<int64_t>{5});
  state.extra = {{"value", scalar_tensor(0.0)}};
  manager.restore(5, state);
  EXPECT_EQ(state.extra[0].second.item(), 2.0);
}

// Saves steps 1 and 2 (extra "step" = the step), damages step 2 with `damage`, and checks that
// restore(2) names `file` and restore_latest falls back to step 1.
void expect_fallback(const fs::path& root, const std::string& file,
                     const std::function<void(const fs::path&)>& damage,
                     const std::string& reason) {
  CheckpointManager manager(root, 1);
  SmallRun run(1);
  TrainingState state = run.state();
  for (int64_t step = 1; step <= 2; ++step) {
    state.extra = {{"step", scalar_tensor(step, DType::kInt64)}};
    manager.save(step, state);
  }
  damage(root / "2" / file);
  const std::string what = error_message<FileError>([&] { manager.restore(2, state); });
  EXPECT_TRUE(contains(what, (root / "2" / file).string())) << what;
  EXPECT_TRUE(contains(what, reason)) << what;
  EXPECT_EQ(manager.restore_latest(state), 1);
  EXPECT_EQ(state.extra[0].second.item(), 1);
}

void flip_byte(const fs::path& file, std::size_t at) {
  std::vector<uint8_t> bytes = read_file(file);
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 0x20;
  write_file(file, bytes);
}

TEST_F(CheckpointManagerTest, AStepWithoutItsCommitFileIsSkipped) {
  expect_fallback(
      dir_ / "run", "commit.json", [](const fs::path& f) { fs::remove(f); }, "not committed");
  EXPECT_EQ(CheckpointManager(dir_ / "run", 1).all_steps(), std::vector<int64_t>{1});
}

TEST_F(CheckpointManagerTest, ATruncatedTensorFileIsFoundAndAnOlderStepTaken) {
  expect_fallback(
      dir_ / "run", "tensors.ckpt",
      [](const fs::path& f) { fs::resize_file(f, fs::file_size(f) - 5); }, "bytes where");
}

TEST_F(CheckpointManagerTest, AFlippedByteInTheTensorsIsFound) {
  expect_fallback(
      dir_ / "run", "tensors.ckpt", [](const fs::path& f) { flip_byte(f, fs::file_size(f) - 3); },
      "CRC-32");
}

TEST_F(CheckpointManagerTest, AFlippedByteInTheHostStateIsFound) {
  expect_fallback(
      dir_ / "run", "state.json", [](const fs::path& f) { flip_byte(f, 5); }, "CRC-32");
}

TEST_F(CheckpointManagerTest, AMissingRandomStreamFileIsFound) {
  expect_fallback(
      dir_ / "run", "rng.0.json", [](const fs::path& f) { fs::remove(f); }, "missing");
}

TEST_F(CheckpointManagerTest, ADamagedCommitFileIsFound) {
  expect_fallback(
      dir_ / "run", "commit.json",
      [](const fs::path& f) { write_file(f, std::string_view("{\"files\": ")); }, "not valid JSON");
}

TEST_F(CheckpointManagerTest, AFailedSaveLeavesTheEarlierStepsAndNoPartialStep) {
  CheckpointManager manager(dir_ / "run", 1);
  SmallRun run(1);
  TrainingState state = run.state();
  state.extra = {{"value", scalar_tensor(1.0)}};
  manager.save(1, state);
  state.extra = {{"broken", Tensor()}};  // a writer error on the way
  const std::string what = error_message<FileError>([&] { manager.save(2, state); });
  EXPECT_TRUE(contains(what, "key \"extra/broken\" is undefined")) << what;
  EXPECT_EQ(manager.all_steps(), std::vector<int64_t>{1});
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_ / "run")) {
    EXPECT_EQ(entry.path().filename(), "1");
  }
  state.extra = {{"value", scalar_tensor(0.0)}};
  manager.restore(1, state);
  EXPECT_EQ(state.extra[0].second.item(), 1.0);
}

TEST_F(CheckpointManagerTest, AStateThatDoesNotFitIsRefusedByName) {
  CheckpointManager manager(dir_ / "run", 1);
  SmallRun run(1);
  TrainingState state = run.state();
  state.extra = {{"a", scalar_tensor(1.0)}};
  manager.save(1, state);
  state.extra = {{"b", scalar_tensor(1.0)}};
  const std::string what = error_message<nn::StateDictError>([&] { manager.restore(1, state); });
  EXPECT_TRUE(contains(what, "extra entry \"b\"")) << what;
  EXPECT_TRUE(contains(what, "tensors.ckpt")) << what;
  EXPECT_EQ(state.extra[0].first, "b");
  // Not damage: restore_latest does not start afresh over a run that changed its state.
  EXPECT_THROW((void)manager.restore_latest(state), nn::StateDictError);

  // A step saved without a scheduler does not restore into a state with one, and nothing
  // changes: the weights are checked before they load.
  const auto before = weights(*run.model);
  state.extra = {{"a", scalar_tensor(1.0)}};
  state.scheduler = nullptr;
  manager.save(2, state, true);
  state.scheduler = run.schedule.get();
  run.train(1);
  const auto trained = weights(*run.model);
  const std::string no_scheduler =
      error_message<nn::StateDictError>([&] { manager.restore(2, state); });
  EXPECT_TRUE(contains(no_scheduler, "state.json")) << no_scheduler;
  EXPECT_TRUE(contains(no_scheduler, "scheduler")) << no_scheduler;
  EXPECT_EQ(weights(*run.model), trained);
  EXPECT_NE(trained, before);
}

// The data loader's position goes with the step: restored into a fresh loader, the loop gets
// the batches after those it took before the save, though the parallel loader had read and moved
// more ahead, and none again. A step without a position does not restore into a state with a
// loader.
TEST_F(CheckpointManagerTest, TheDataLoaderGoesOnWhereTheLoopStood) {
  const auto data = std::make_shared<testing::RecordingDataset>(40);
  const DataLoaderOptions options{.batch_size = 4, .shuffle = true, .seed = 8, .num_workers = 1};
  DataLoader twin(data, options);
  std::vector<std::vector<int64_t>> want;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& batch : twin) want.push_back(batch[0].values<int64_t>());
  }
  CheckpointManager manager(dir_ / "run", 1);
  SmallRun run(1);
  {
    DataLoader loader(data, options);
    TrainingState state = run.state();
    state.data_loader = &loader;
    MpDeviceLoader feed(loader, xla_device(), {.loader_prefetch_size = 6});
    int taken = 0;
    for (const DeviceBatch& batch : feed) {
      (void)batch;
      if (++taken == 7) break;
    }
    ASSERT_TRUE(manager.save_async(7, state));  // the loop holds batch 6 of epoch 0
    manager.join();
  }
  DataLoader loader(data, options);
  TrainingState state = run.state();
  state.data_loader = &loader;
  ASSERT_EQ(manager.restore_latest(state), 7);
  EXPECT_EQ(loader.epoch(), 0);
  std::vector<std::vector<int64_t>> seen;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const DeviceBatch& batch : MpDeviceLoader(loader, xla_device())) {
      seen.push_back(testing::sample_indices(batch));
    }
  }
  EXPECT_EQ(seen, std::vector(want.begin() + 7, want.end()));

  TrainingState without = run.state();
  ASSERT_TRUE(manager.save(8, without, true));
  const std::string what = error_message<nn::StateDictError>([&] { manager.restore(8, state); });
  EXPECT_TRUE(contains(what, "rng.0.json") && contains(what, "no data loader position")) << what;
}

// A job grown since the step was saved is told so, not started afresh: restore_latest does not
// skip the step as damaged.
TEST_F(CheckpointManagerTest, AStepSavedByFewerReplicasIsRefusedNotSkipped) {
  {
    CheckpointManager manager(dir_ / "run", 1);
    TrainingState state{.extra = {{"x", scalar_tensor(2.0)}}};
    ASSERT_TRUE(manager.save(1, state));
  }
  std::vector<std::string> errors(2);
  spawn([&](int r) {
    CheckpointManager manager(dir_ / "run", 1);
    TrainingState state{.extra = {{"x", scalar_tensor(3.0)}}};
    try {
      (void)manager.restore_latest(state);
    } catch (const nn::StateDictError& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_TRUE(contains(errors[1], "saved by 1 replica(s); replica 1 of this job")) << errors[1];
}

TEST_F(CheckpointManagerTest, AnEmptyDirectoryRestoresNothing) {
  CheckpointManager manager(dir_ / "fresh", 5);
  SmallRun run(1);
  const auto before = weights(*run.model);
  TrainingState state = run.state();
  EXPECT_EQ(manager.restore_latest(state), std::nullopt);
  EXPECT_EQ(weights(*run.model), before);
}

TEST_F(CheckpointManagerTest, InsideSpawnEachReplicaGetsItsOwnRandomStreamsBack) {
  std::vector<std::vector<float>> drawn(2), redrawn(2);
  spawn([&](int r) {
    CheckpointManager manager(dir_ / "run", 1);
    set_rng_state(100 + static_cast<uint64_t>(r));
    (void)rand({5}).to_vector<float>();  // each replica's stream moves on apart
    TrainingState state{.extra = {{"ordinal", scalar_tensor(r, DType::kInt64)}}};
    manager.save(1, state);
    drawn[static_cast<std::size_t>(r)] = rand({4}).to_vector<float>();
    set_rng_state(7);
    ASSERT_EQ(manager.restore_latest(state), 1);
    EXPECT_EQ(state.extra[0].second.item(), 0);  // the master's tensors
    redrawn[static_cast<std::size_t>(r)] = rand({4}).to_vector<float>();
  });
  EXPECT_EQ(redrawn, drawn);
  EXPECT_NE(drawn[0], drawn[1]);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "1" / "rng.1.json"));
}

// SIGTERM to the process is a preemption: before it no replica reaches one, after it every
// replica does at the same step, should_save says to save that step (its interval would not),
// and the save holds it. In a child process of its own (SIGTERM stays a preemption there).
TEST_F(CheckpointManagerTest, SigtermIsAPreemptionEveryReplicaReachesAtOneStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        std::vector<int> failures(2, 0);
        spawn([&](int r) {
          CheckpointManager manager(dir_ / "run", /*save_interval=*/100);
          failures[r] += manager.reached_preemption(1) ? 1 : 0;
          failures[r] += manager.should_save(1) ? 1 : 0;
          if (r == 1) ::raise(SIGTERM);  // one replica's process gets it
          rendezvous("raised");
          failures[r] += manager.should_save(2) ? 0 : 1;
          failures[r] += manager.reached_preemption(2) ? 0 : 1;
          TrainingState state{.extra = {{"step", scalar_tensor(2, DType::kInt64)}}};
          failures[r] += manager.save(2, state) ? 0 : 1;
          failures[r] += manager.all_steps() == std::vector<int64_t>{2} ? 0 : 1;
        });
        std::exit(failures == std::vector<int>{0, 0} ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// In a job of processes (the stop note armed, as the MPI transport arms it), SIGTERM under a
// manager is still a preemption, and the process says it got it and what it waits for: when
// mpirun stops the job because another process ended, that is its last line.
TEST_F(CheckpointManagerTest, SigtermInAJobOfProcessesSaysWhatTheProcessWaitsFor) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        say_waiting_note_on_sigterm(3);
        CheckpointManager manager(dir_ / "run", /*save_interval=*/100);
        note_waiting("waiting for replica 1 at all_reduce 'grads'");
        ::raise(SIGTERM);
        note_waiting({});
        std::exit(manager.reached_preemption(1) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "axle: process 3 got SIGTERM \\(a preemption, or mpirun stopping the job because a process "
      "of it ended\\) while waiting for replica 1 at all_reduce 'grads'");
}

TEST_F(CheckpointManagerTest, ReplicasAskingAtDifferentStepsAreTold) {
  EXPECT_THROW(spawn([&](int r) {
                 CheckpointManager manager(dir_ / "run", 100);
                 (void)manager.reached_preemption(r == 0 ? 5 : 6);
               }),
               ReplicaError);
}

TEST_F(CheckpointManagerTest, SaveAsyncWritesTheStepAsItStoodWhileTheRunGoesOn) {
  SmallRun run(1);
  run.train(3);
  CheckpointManager manager(dir_ / "run", 3);
  ASSERT_TRUE(manager.save_async(3, run.state()));
  run.train(3);  // changes every value the save is writing
  manager.join();
  EXPECT_EQ(manager.all_steps(), std::vector<int64_t>{3});

  SmallRun resumed(7);
  TrainingState state = resumed.state();
  ASSERT_EQ(manager.restore_latest(state), 3);
  resumed.train(3);
  EXPECT_EQ(weights(*resumed.model), weights(*run.model));
  EXPECT_FALSE(manager.save_async(4, run.state()));  // not a step to save
}

TEST_F(CheckpointManagerTest, InsideSpawnSaveAsyncKeepsEachReplicasStreams) {
  std::vector<std::vector<float>> drawn(2), redrawn(2);
  spawn([&](int r) {
    CheckpointManager manager(dir_ / "run", 1);
    set_rng_state(200 + static_cast<uint64_t>(r));
    (void)rand({3}).to_vector<float>();
    TrainingState state{.extra = {{"ordinal", scalar_tensor(r, DType::kInt64)}}};
    manager.save_async(1, state);
    drawn[static_cast<std::size_t>(r)] = rand({4}).to_vector<float>();
    manager.join();
    rendezvous("saved");  // the master's writer has committed the step
    set_rng_state(7);
    ASSERT_EQ(manager.restore_latest(state), 1);
    redrawn[static_cast<std::size_t>(r)] = rand({4}).to_vector<float>();
  });
  EXPECT_EQ(redrawn, drawn);
  EXPECT_NE(drawn[0], drawn[1]);
}

// Saves step 1 (a scalar 1), then, after `before_second`, asynchronously step 2 (`big`); 0 when
// join reported the step's tensor file (printed, for the death test's pattern), no partial step
// is left and step 1 restores.
int second_save_fails(const fs::path& dir, const Tensor& big,
                      const std::function<void()>& before_second) {
  CheckpointManager manager(dir, 1);
  TrainingState state{.extra = {{"value", scalar_tensor(1.0)}}};
  manager.save(1, state);
  before_second();
  state.extra = {{"value", big}};
  manager.save_async(2, state);
  std::string what;
  try {
    manager.join();
  } catch (const FileError& e) {
    what = e.what();
  }
  std::fprintf(stderr, "%s\n", what.c_str());
  bool only_step_1 = manager.all_steps() == std::vector<int64_t>{1};
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    only_step_1 = only_step_1 && entry.path().filename() == "1";
  }
  state.extra = {{"value", scalar_tensor(0.0)}};
  manager.restore_latest(state);
  return contains(what, ".2.partial/tensors.ckpt") && only_step_1 &&
                 state.extra[0].second.item() == 1.0
             ? 0
             : 1;
}

// With files limited to 4 KiB, step 2 (16 KiB of tensors) fails.
int save_past_the_file_size_limit(const fs::path& dir) {
  return second_save_fails(dir, zeros({4096}), [] {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails (EFBIG) instead
    const rlimit limit{.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &limit);
  });
}

// A writer that fails on the way is reported by join naming the file, leaves no partial step and
// the earlier step as it was. In a child process, whose file size limit it lowers.
TEST_F(CheckpointManagerTest, AFailedAsyncSaveIsReportedAndLeavesTheEarlierSteps) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(save_past_the_file_size_limit(dir_ / "run")), ::testing::ExitedWithCode(0),
              "tensors.ckpt");
}

// Inside spawn: saves `step` synchronously, or asynchronously and waits until the master's writer
// committed it; returns what the save returned.
bool save_and_commit(CheckpointManager& manager, int64_t step, const TrainingState& state,
                     bool async) {
  if (!async) return manager.save(step, state);
  const bool saved = manager.save_async(step, state);
  manager.join();
  rendezvous("committed");
  return saved;
}

// Each replica's per_replica values (BatchNorm's running statistics, under data parallelism) are
// its own: saved for every replica, and each gets its own back in place, through the module's
// handles, after the model took the master's. Synchronous and asynchronous saves alike.
void per_replica_round_trip(const fs::path& dir, bool async) {
  std::vector<std::vector<float>> saved(2), restored(2), master_model(2);
  spawn([&](int r) {
    CheckpointManager manager(dir, 1);
    auto norm = std::make_shared<nn::BatchNorm2d>(3);
    const Tensor x = rand({4, 3, 2, 2}) + static_cast<double>(r);  // each replica's own statistics
    (void)(*norm)(x);
    mark_step();
    TrainingState state{.model = norm.get(), .per_replica = norm->named_buffers()};
    EXPECT_TRUE(save_and_commit(manager, 1, state, async));
    saved[r] = norm->named_buffers()[0].second.to_vector<float>();
    (void)(*norm)(x * 3.0);  // the statistics move on
    mark_step();
    ASSERT_EQ(manager.restore_latest(state), 1);
    restored[r] = norm->named_buffers()[0].second.to_vector<float>();
    master_model[r] = nn::find(norm->state_dict(), "running_mean")->to_vector<float>();
  });
  EXPECT_EQ(restored, saved);
  EXPECT_NE(saved[0], saved[1]);
  EXPECT_EQ(master_model[1], saved[1]);  // the replica's own, not the master's
  EXPECT_TRUE(fs::exists(dir / "1" / "replica.1.ckpt"));
}

TEST_F(CheckpointManagerTest, EachReplicaGetsItsOwnPerReplicaValuesBack) {
  per_replica_round_trip(dir_ / "sync", /*async=*/false);
  per_replica_round_trip(dir_ / "async", /*async=*/true);
}

TEST_F(CheckpointManagerTest, PerReplicaEntriesMustFitTheStep) {
  const Tensor mine = zeros({3});
  {
    CheckpointManager manager(dir_ / "without", 1);
    TrainingState state{.extra = {{"x", scalar_tensor(1.0)}}};
    manager.save(1, state);
    state.per_replica = {{"mine", mine}};
    EXPECT_TRUE(contains(error_message<nn::StateDictError>([&] { manager.restore(1, state); }),
                         "replica.0.ckpt"));
  }
  CheckpointManager manager(dir_ / "with", 1);
  TrainingState state{.per_replica = {{"mine", mine}}};
  manager.save(1, state);
  state.per_replica = {{"mine", zeros({4})}};
  EXPECT_TRUE(contains(error_message<nn::StateDictError>([&] { manager.restore(1, state); }),
                       "\"mine\" as f32 [3]"));
  state.per_replica = {{"theirs", zeros({3})}};
  EXPECT_TRUE(contains(error_message<nn::StateDictError>([&] { manager.restore(1, state); }),
                       "no per_replica entry \"theirs\""));
  state.per_replica.clear();
  EXPECT_THROW(manager.restore(1, state), nn::StateDictError);
}

// A sharded state (FullyShardedDataParallel, the optimizer over its shards): every replica's
// shards and optimizer state are saved, each replica restores its own, and training goes on bit
// for bit as the run never stopped. Synchronous and asynchronous saves alike.
void sharded_round_trip(const fs::path& dir, bool async) {
  std::vector<std::vector<std::vector<std::byte>>> continued(2), resumed(2);
  spawn([&](int r) {
    CheckpointManager manager(dir, 3);
    set_rng_state(5);
    auto fsdp = std::make_shared<FullyShardedDataParallel>(std::make_shared<nn::Linear>(4, 6));
    optim::Adam adam(fsdp->parameters(), optim::AdamOptions{.lr = 0.05});
    const Tensor x = rand({3, 4}) + (2.0 + r);  // 0 and 1 would be constants of the graph
    const auto train = [&](int steps) {
      for (int s = 0; s < steps; ++s) {
        adam.zero_grad();
        sum((*fsdp)(x) * (*fsdp)(x)).backward();
        adam.step();
        mark_step();
      }
    };
    train(3);
    const TrainingState state{.model = fsdp.get(), .optimizer = &adam, .sharded = true};
    EXPECT_TRUE(save_and_commit(manager, 3, state, async));
    train(2);
    continued[r] = weights(*fsdp);
    train(2);  // moves away from the step saved
    TrainingState restored = state;
    ASSERT_EQ(manager.restore_latest(restored), 3);
    train(2);
    resumed[r] = weights(*fsdp);
  });
  EXPECT_EQ(resumed, continued);
  EXPECT_NE(continued[0], continued[1]);  // each replica's own shards
  EXPECT_TRUE(fs::exists(dir / "3" / "replica.1.ckpt"));
}

TEST_F(CheckpointManagerTest, ShardedStatesKeepEachReplicasShards) {
  sharded_round_trip(dir_ / "sync", /*async=*/false);
  sharded_round_trip(dir_ / "async", /*async=*/true);
}

TEST_F(CheckpointManagerTest, AShardedStepAndAReplicatedStateDoNotMix) {
  SmallRun run(1);
  CheckpointManager manager(dir_ / "run", 1);
  TrainingState sharded = run.state();
  sharded.sharded = true;
  manager.save(1, sharded);
  TrainingState replicated = run.state();
  EXPECT_TRUE(contains(error_message<nn::StateDictError>([&] { manager.restore(1, replicated); }),
                       "shards"));
  manager.save(2, replicated, /*force=*/true);
  EXPECT_THROW(manager.restore(2, sharded), nn::StateDictError);
}

TEST_F(CheckpointManagerTest, ReplicasWithDifferentPerReplicaEntriesAreTold) {
  const std::string what = error_message<ReplicaError>([&] {
    spawn([&](int r) {
      CheckpointManager manager(dir_ / "run", 1);
      TrainingState state{.per_replica = {{"mine", zeros({r + 1})}}};
      (void)manager.save_async(1, state);
    });
  });
  EXPECT_TRUE(contains(what, "own tensors (per_replica entries")) << what;
}

// With WhenBusy::kSkip, a save asked while the writer is still writing the one before is skipped
// on every replica alike (and counted); the steps on disk are those save_async said it took.
TEST_F(CheckpointManagerTest, ABusyWriterSkipsTheSaveWhenAskedTo) {
  std::vector<std::vector<int64_t>> taken(2);
  std::vector<std::vector<int64_t>> on_disk(2);
  spawn([&](int r) {
    CheckpointManager manager(dir_ / "run", 1, 0, 1, true, CheckpointManager::WhenBusy::kSkip);
    // 64 MiB a step: the writer is busy long after save_async returns.
    TrainingState state{.extra = {{"big", zeros({16 << 20})}}};
    mark_step();
    for (int64_t step = 1; step <= 4; ++step) {
      if (manager.save_async(step, state)) taken[r].push_back(step);
    }
    manager.join();
    rendezvous("joined");
    on_disk[r] = manager.all_steps();
  });
  EXPECT_EQ(taken[0], taken[1]);
  EXPECT_EQ(on_disk[0], taken[0]);
  ASSERT_FALSE(taken[0].empty());
  EXPECT_EQ(taken[0].front(), 1);
  EXPECT_LT(taken[0].size(), 4U);
  EXPECT_EQ(counter_value("CheckpointAsyncSkipped").value_or(0),
            static_cast<int64_t>(2 * (4 - taken[0].size())));
}

// 0 when, the writer still on step 1, SIGTERM makes step 2 the run's last and it is saved.
int save_at_a_preemption_while_busy(const fs::path& dir) {
  CheckpointManager manager(dir, 1, 0, 1, true, CheckpointManager::WhenBusy::kSkip);
  TrainingState state{.extra = {{"big", zeros({16 << 20})}}};
  mark_step();
  const bool first = manager.save_async(1, state);
  ::raise(SIGTERM);
  const bool second = manager.save_async(2, state);
  manager.join();
  return first && second && manager.all_steps() == std::vector<int64_t>{1, 2} ? 0 : 1;
}

// A step at a preemption is the run's last: it is saved though the writer is busy. In a child
// process of its own (SIGTERM stays a preemption there).
TEST_F(CheckpointManagerTest, AStepAtAPreemptionIsNotSkipped) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(save_at_a_preemption_while_busy(dir_ / "run")),
              ::testing::ExitedWithCode(0), "");
}

// 0 when a save into a directory this process may not write fails naming it and "Permission
// denied", step 1 still restores, and the run saves again once it may.
int save_without_permission(const fs::path& dir) {
  CheckpointManager manager(dir, 1);
  TrainingState state{.extra = {{"value", scalar_tensor(1.0)}}};
  manager.save(1, state);
  state.extra = {{"value", scalar_tensor(2.0)}};
  // Root writes anywhere: it becomes nobody; anyone else loses the directory's write permission.
  const bool root = ::geteuid() == 0;
  if (root ? ::setegid(65534) != 0 || ::seteuid(65534) != 0 : ::chmod(dir.c_str(), 0555) != 0) {
    return 2;
  }
  std::string what;
  try {
    manager.save(2, state);
  } catch (const FileError& e) {
    what = e.what();
  }
  std::fprintf(stderr, "%s\n", what.c_str());
  if (root ? ::seteuid(0) != 0 || ::setegid(0) != 0 : ::chmod(dir.c_str(), 0755) != 0) return 3;
  state.extra = {{"value", scalar_tensor(0.0)}};
  manager.restore_latest(state);
  const bool restored = state.extra[0].second.item() == 1.0;
  state.extra = {{"value", scalar_tensor(3.0)}};
  const bool saved_again =
      manager.save(3, state) && manager.all_steps() == std::vector<int64_t>{1, 3};
  return contains(what, dir.string()) && contains(what, "Permission denied") && restored &&
                 saved_again
             ? 0
             : 1;
}

TEST_F(CheckpointManagerTest, ASaveWithoutPermissionIsReportedAndTheRunGoesOn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(save_without_permission(dir_ / "run")), ::testing::ExitedWithCode(0),
              "Permission denied");
}

// On a tmpfs of 256 KiB (in a mount namespace of this process's own), an asynchronous save of
// 1 MiB fails with "No space left".
int save_on_a_full_disk(const fs::path& dir) {
  fs::create_directories(dir);
  if (::unshare(CLONE_NEWNS) != 0) return 2;
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 3;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) return 4;
  const int result = second_save_fails(dir, zeros({256 << 10}), [] {});
  ::umount2(dir.c_str(), MNT_DETACH);  // a mount point would keep the test's directory at exit
  return result;
}

TEST_F(CheckpointManagerTest, ASaveOnAFullDiskIsReportedAndLeavesTheEarlierSteps) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounts a tmpfs: needs root";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(save_on_a_full_disk(dir_ / "run")), ::testing::ExitedWithCode(0),
              "No space left on device");
}

TEST_F(CheckpointManagerTest, ASchedulerStateOfOtherGroupsIsRefused) {
  SmallRun run(1);
  optim::LRSchedulerState state = run.schedule->state_dict();
  state.base_lrs.push_back(1.0);
  EXPECT_THROW(run.schedule->load_state_dict(state), std::invalid_argument);
  EXPECT_EQ(run.schedule->base_lrs().size(), 1U);
}

}  // namespace
}  // namespace axle
