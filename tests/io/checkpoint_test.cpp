// Checkpoints: save and load round trips, atomic writes, one tensor on the host at a time, an
// error naming the file and the key for every kind of damage, and a model and its optimizer
// restored from files continuing their training exactly.
#include "axle/io/checkpoint.h"
#include "axle/actors/host/lazy_system.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "axle/axle.h"
#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
    clear_all();
  }
  void TearDown() override { LazySystem::restart(); }

  static nn::StateDict sample() {
    return {{"fc.weight", tensor(std::vector<float>{1.5f, -2, 3, 4, 5, 6}, {2, 3}) * 2.0},
            {"fc.bias", tensor(std::vector<double>{0.25, -0.5}, {2})},
            {"steps", scalar_tensor(7, DType::kInt64)},
            {"mask", gt(tensor(std::vector<float>{1, -1, 2}, {3}), 0.0)},
            {"empty", zeros({0, 4})}};
  }

  TempDir dir_;
};

TEST_F(Checkpoint, RoundTripsEveryTensorByNameOntoTheGivenDevice) {
  const nn::StateDict state = sample();
  save(state, dir_ / "model.axle");
  const nn::StateDict loaded = load(dir_ / "model.axle", device(1));
  ASSERT_EQ(loaded.size(), state.size());
  for (std::size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(loaded[i].first, state[i].first);
    EXPECT_EQ(loaded[i].second.device(), device(1));
    EXPECT_EQ(loaded[i].second.dtype(), state[i].second.dtype()) << state[i].first;
    EXPECT_EQ(loaded[i].second.shape(), state[i].second.shape()) << state[i].first;
    EXPECT_EQ(loaded[i].second.cpu().bytes, state[i].second.cpu().bytes) << state[i].first;
  }
}

TEST_F(Checkpoint, InsideSpawnOnlyTheMasterWritesAndEveryReplicaReturnsAfterIt) {
  // Not vector<bool>: replicas write their own elements at once, and its bits share words.
  std::vector<char> file_there_on_return(2, 0);
  spawn([&](int r) {
    // Each replica's value differs and is still pending (an all-reduce of it, even, so the
    // master must not compute it alone); the file must hold the master's.
    Tensor mine = tensor(std::vector<float>{static_cast<float>(r)}, {1});
    Tensor total = all_reduce(ReduceType::kSum, mine);
    save({{"mine", mine * 1.0}, {"total", total}}, dir_ / "shared.axle");
    file_there_on_return[static_cast<std::size_t>(r)] =
        std::filesystem::exists(dir_ / "shared.axle");
    // Without master_only, every replica writes its own.
    save({{"mine", mine}}, dir_ / fmt::format("replica{}.axle", r), /*master_only=*/false);
  });
  EXPECT_EQ(file_there_on_return, (std::vector<char>{1, 1}));
  const nn::StateDict shared = load(dir_ / "shared.axle");
  EXPECT_EQ(shared[0].second.to_vector<float>(), std::vector<float>{0});
  EXPECT_EQ(shared[1].second.to_vector<float>(), std::vector<float>{1});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(load(dir_ / fmt::format("replica{}.axle", r))[0].second.to_vector<float>(),
              std::vector<float>{static_cast<float>(r)});
  }
}

TEST_F(Checkpoint, HoldsOneTensorOnTheHostAtATime) {
  nn::StateDict state;
  for (int i = 0; i < 8; ++i) state.emplace_back("t" + std::to_string(i), zeros({1000}));
  save(state, dir_ / "big.axle");
  const std::optional<MetricData> held = metric_data("CheckpointHostBytes");
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->total_samples, 8);
  for (const auto& [when, bytes] : held->samples) EXPECT_EQ(bytes, 4000.0);
}

TEST_F(Checkpoint, ReplacesAnOldFileWholeAndLeavesNoTemporaryFiles) {
  save(sample(), dir_ / "model.axle");
  save({{"only", ones({2})}}, dir_ / "model.axle");
  const nn::StateDict loaded = load(dir_ / "model.axle");
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0].first, "only");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(Checkpoint, AMissingFileIsAFileError) {
  const std::string what = error_message<FileError>([&] { (void)load(dir_ / "absent.axle"); });
  EXPECT_TRUE(contains(what, "absent.axle")) << what;
}

TEST_F(Checkpoint, EveryTruncationIsAnErrorNamingTheFile) {
  save(sample(), dir_ / "model.axle");
  const std::vector<uint8_t> bytes = read_file(dir_ / "model.axle");
  for (std::size_t keep :
       {std::size_t{0}, std::size_t{5}, bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    write_file(dir_ / "cut.axle", std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    const std::string what = error_message<FileError>([&] { (void)load(dir_ / "cut.axle"); });
    EXPECT_TRUE(contains(what, "cut.axle")) << keep << ": " << what;
  }
}

TEST_F(Checkpoint, AFlippedDataByteIsAChecksumErrorNamingTheKey) {
  save({{"fc.weight", ones({64})}}, dir_ / "model.axle");
  std::vector<uint8_t> bytes = read_file(dir_ / "model.axle");
  bytes[bytes.size() - 10] ^= 0x40;  // inside the tensor's data, which comes last
  write_file(dir_ / "model.axle", bytes);
  const std::string what = error_message<FileError>([&] { (void)load(dir_ / "model.axle"); });
  EXPECT_TRUE(contains(what, "key \"fc.weight\"")) << what;
  EXPECT_TRUE(contains(what, "checksum")) << what;
}

TEST_F(Checkpoint, AnotherFormatIsRefused) {
  write_file(dir_ / "model.axle", std::string_view("\x05\0\0\0\0\0\0\0hello", 13));
  const std::string what = error_message<FileError>([&] { (void)load(dir_ / "model.axle"); });
  EXPECT_TRUE(contains(what, "model.axle")) << what;
  write_file(dir_ / "garbage.axle", std::string(64, 'x'));
  EXPECT_THROW((void)load(dir_ / "garbage.axle"), FileError);
}

TEST_F(Checkpoint, TrailingBytesAreDamage) {
  save({{"w", ones({2})}}, dir_ / "model.axle");
  std::vector<uint8_t> bytes = read_file(dir_ / "model.axle");
  bytes.push_back(0);
  write_file(dir_ / "model.axle", bytes);
  const std::string what = error_message<FileError>([&] { (void)load(dir_ / "model.axle"); });
  EXPECT_TRUE(contains(what, "after the last tensor")) << what;
}

TEST_F(Checkpoint, AnUndefinedTensorIsRefusedAndNothingIsWritten) {
  const std::string what = error_message<FileError>([&] {
    save({{"w", ones({2})}, {"ghost", Tensor()}}, dir_ / "model.axle");
  });
  EXPECT_TRUE(contains(what, "key \"ghost\"")) << what;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "model.axle"));
}

// A model with parameters and buffers (BatchNorm2d's running statistics and step count).
std::shared_ptr<nn::Sequential> small_model() {
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 2, std::vector<int64_t>{3}),
      std::make_shared<nn::BatchNorm2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(8, 3)});
  return model;
}

void train(nn::Module& model, optim::Optimizer& opt, int steps) {
  const Tensor x =
      tensor(std::vector<float>{1,  -2, 3,  0.5f, 4, -1, 2, 2, -3, 1, 0, 1, 2, 3, 4, 5,
                                -1, -2, -3, -4,   5, 4,  3, 2, 1,  0, 1, 2, 3, 4, 5, 6},
             {2, 1, 4, 4});
  const Tensor target = tensor(std::vector<int64_t>{2, 0}, {2});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    nn::cross_entropy(model(x), target).backward();
    opt.step();
    mark_step();
  }
}

TEST_F(Checkpoint, ModuleStateDictRoundTripsThroughAFileExactly) {
  auto model = small_model();
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  train(*model, sgd, 3);
  save(model->state_dict(), dir_ / "model.axle");

  auto restored = small_model();  // other initial values
  restored->load_state_dict(load(dir_ / "model.axle", device(1)));
  const nn::StateDict want = model->state_dict(), got = restored->state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.device(), device(0)) << got[i].first;
    EXPECT_EQ(got[i].second.cpu().bytes, want[i].second.cpu().bytes) << got[i].first;
  }
  EXPECT_EQ(nn::find(got, "1.num_batches_tracked")->item(), 3);
}

TEST_F(Checkpoint, TrainingResumedFromAFileContinuesTheRun) {
  auto model = small_model();
  optim::Adam adam(model->parameters(), {.lr = 0.01});
  train(*model, adam, 2);
  save(model->state_dict(), dir_ / "model.axle");
  save(adam.state_dict(), dir_ / "adam.axle");
  train(*model, adam, 2);  // the uninterrupted run

  auto resumed = small_model();
  resumed->load_state_dict(load(dir_ / "model.axle"));
  optim::Adam resumed_adam(resumed->parameters(), {.lr = 0.01});
  resumed_adam.load_state_dict(load(dir_ / "adam.axle"));
  train(*resumed, resumed_adam, 2);
  const nn::StateDict want = model->state_dict(), got = resumed->state_dict();
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].second.cpu().bytes, want[i].second.cpu().bytes) << got[i].first;
  }
}

}  // namespace
}  // namespace axle
