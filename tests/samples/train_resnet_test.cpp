// samples/train_resnet end to end: ResNet-18 and ResNet-50 on small fake images (32×32 here, for
// time) learn their fixed batch, on one device and data-parallel on two, with every graph
// compiled in the first two steps.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "axle/graph/formats/event_file.h"
#include "trainer_run.h"

#include <unistd.h>

namespace {

using axle::testing::TrainerRun;

TrainerRun train(const std::string& flags) {
  return axle::testing::run_trainer(std::string(AXLE_TRAIN_RESNET) + " " + flags);
}

// The loss starts near a uniform guess over 1000 classes (ln 1000 ≈ 6.9) and falls well below
// it on the batch served again every step; the step count, the parameters and the compile
// count are the run's.
void expect_learns(const TrainerRun& run, const std::string& model, int devices) {
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_TRUE(run.summary.is_object()) << run.output;
  EXPECT_EQ(run.summary["model"].get<std::string>(), model) << run.output;
  EXPECT_EQ(run.summary["parameters"].get<int64_t>(), model == "resnet18" ? 11689512 : 25557032)
      << run.output;
  EXPECT_EQ(run.summary["world_size"].get<int>(), devices) << run.output;
  const double first = run.summary["first_logged_loss"].get<double>();
  const double last = run.summary["final_loss"].get<double>();
  EXPECT_GT(first, 5.0) << run.output;
  EXPECT_LT(last, 1.0) << run.output;
  // Two graphs (the first step's and the one with momentum buffers), then no more.
  EXPECT_EQ(run.summary["compiles"].get<int>(), run.summary["warmup_compiles"].get<int>())
      << run.output;
  EXPECT_LE(run.summary["compiles"].get<int>(), 3) << run.output;
  EXPECT_GT(run.summary["images_per_s"].get<double>(), 0) << run.output;
  EXPECT_GT(run.summary["peak_device_bytes"].get<int64_t>(), 0) << run.output;
  EXPECT_NE(run.output.find("| Test Device=xla:0/0 Loss="), std::string::npos) << run.output;
}

TEST(TrainResnet, ResNet18LearnsItsFakeBatchOnOneDevice) {
  const TrainerRun run = train(
      "--model resnet18 --image_size 32 --batch_size 8 --max_steps 20 --lr 0.01 "
      "--log_steps 5 --seed 1 --fake_data");
  expect_learns(run, "resnet18", 1);
  EXPECT_NE(run.output.find("| Training Device=xla:0/0 Step=20 Loss="), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("images/s"), std::string::npos) << run.output;
}

// Each replica has its own batch; gradients are averaged, so both replicas' losses fall.
TEST(TrainResnet, ResNet18TrainsDataParallelOnTwoDevices) {
  const TrainerRun run = train(
      "--model resnet18 --image_size 32 --batch_size 4 --max_steps 20 --lr 0.01 "
      "--log_steps 10 --seed 1 --num_devices 2");
  expect_learns(run, "resnet18", 2);
  for (const char* device : {"xla:0/0", "xla:1/1"}) {
    EXPECT_NE(run.output.find(std::string("| Training Device=") + device + " Step=20 Loss="),
              std::string::npos)
        << run.output;
  }
}

TEST(TrainResnet, ResNet50LearnsItsFakeBatch) {
  const TrainerRun run = train(
      "--model resnet50 --image_size 32 --batch_size 8 --max_steps 12 --lr 0.01 "
      "--log_steps 4 --seed 1");
  expect_learns(run, "resnet50", 1);
}

// --logdir writes a TensorBoard event file whose every record's CRCs check: the loss, learning
// rate and images/s at each logged step, the step breakdown, and the test loss and accuracy the
// run printed.
TEST(TrainResnet, LogdirWritesTensorBoardSummaries) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("axle_train_resnet_tb_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const TrainerRun run = train(
      "--model resnet18 --image_size 32 --batch_size 4 --max_steps 10 --lr 0.01 "
      "--log_steps 5 --seed 1 --logdir " +
      dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  const axle::EventFile events = axle::read_event_file(files[0]);  // throws on a bad CRC
  std::map<std::string, std::vector<int64_t>> steps;
  std::map<std::string, double> last;
  for (const axle::EventValue& v : events.values) {
    steps[v.tag].push_back(v.step);
    last[v.tag] = v.value;
  }
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_s"}) {
    EXPECT_EQ(steps[tag], (std::vector<int64_t>{1, 5, 10}))
        << tag;  // the first step, then each 5th
  }
  EXPECT_NEAR(last["train/loss"], run.summary["final_loss"].get<double>(), 1e-4) << run.output;
  EXPECT_NEAR(last["train/lr"], 0.01, 1e-7);  // a float32 in the event
  EXPECT_GT(last["train/images_per_s"], 0);
  EXPECT_FALSE(steps["step_breakdown/executing_ms"].empty());
  ASSERT_EQ(steps["test/loss"].size(), 1u);
  ASSERT_EQ(steps["test/accuracy"].size(), 1u);
  const std::string printed = run.output.substr(run.output.find("| Test Device="));
  const double loss = std::stod(printed.substr(printed.find("Loss=") + 5));
  EXPECT_NEAR(last["test/loss"], loss, 1e-4) << printed;
  EXPECT_GE(last["test/accuracy"], 0.0);
  EXPECT_LE(last["test/accuracy"], 1.0);
  std::filesystem::remove_all(dir);
}

TEST(TrainResnet, OtherModelsAreRefused) {
  const TrainerRun run = train("--model resnet34 --max_steps 1");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("resnet34"), std::string::npos) << run.output;
}

}  // namespace
