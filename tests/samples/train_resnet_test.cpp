// samples/train_resnet end to end: ResNet-18 and ResNet-50 on small fake images (32×32 here, for
// time) learn their fixed batch, on one device and data-parallel on two, with every graph
// compiled in the first two steps.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "trainer_run.h"

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

TEST(TrainResnet, OtherModelsAreRefused) {
  const TrainerRun run = train("--model resnet34 --max_steps 1");
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("resnet34"), std::string::npos) << run.output;
}

}  // namespace
