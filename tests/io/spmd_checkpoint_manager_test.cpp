// CheckpointManager under SPMD: a Megatron-laid-out MLP over a 2 x 2 mesh, trained with Adam,
// saved at a step and restored into a fresh model, continues bit for bit, each restored value
// laid out over the mesh as it was saved (Adam's state too, which a fresh optimizer has not
// created); restored into a model laid out over another mesh, each value takes that layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/step_commit.h"
#include "axle/io/checkpoint_manager.h"
#include "axle/io/checkpoint_step.h"
#include "axle/io/checkpoint_writer.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using spmd::mark_sharding;
using spmd::Mesh;
constexpr auto None = std::nullopt;
using testing::TempDir;

constexpr int kDevices = 4;

// Megatron's layout over "model": the first layer by rows (its outputs), the last by columns
// (its inputs), the LayerNorm between them not marked; the batch over "data".
struct MeshRun {
  MeshRun(uint64_t init_seed, const Mesh& mesh) : mesh(mesh) {
    set_rng_state(init_seed);
    model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(8, 16),
        std::make_shared<nn::LayerNorm>(std::vector<int64_t>{16}), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(16, 4)});
    const nn::StateDict params = model->state_dict();
    mark_sharding(params.at(0).second, mesh, {"model", None});
    mark_sharding(params.at(1).second, mesh, {"model"});
    mark_sharding(params.at(4).second, mesh, {None, "model"});
    adam = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
  }

  void train(int steps) {
    std::vector<float> x(8 * 8);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) - 5.0f;
    const Tensor input = tensor(x, {8, 8});
    mark_sharding(input, mesh, {"data", None});
    const Tensor target = tensor(std::vector<int64_t>{0, 1, 2, 3, 3, 2, 1, 0}, {8});
    for (int s = 0; s < steps; ++s) {
      adam->zero_grad();
      nn::cross_entropy((*model)(input), target).backward();
      adam->step();
      mark_step();
    }
  }

  TrainingState state() { return {.model = model.get(), .optimizer = adam.get()}; }

  Mesh mesh;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> adam;
};

std::vector<std::vector<std::byte>> values_of(const nn::StateDict& tensors) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& [name, t] : tensors) out.push_back(t.cpu().bytes);
  return out;
}

// Each value's layout over the mesh, as the SPMD sharding text ("" for none).
std::vector<std::string> layouts_of(const nn::StateDict& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name + " " + spmd::get_sharding_spec(t));
  return out;
}

class SpmdCheckpointManager : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart({.cpu_devices = kDevices});
    use_spmd();
  }
  void TearDown() override { LazySystem::restart(); }

  // Trains 3 steps, saves step 3 (asynchronously or not), trains 3 more; returns the weights and
  // the model's and the optimizer's layouts after step 3.
  std::pair<std::vector<std::vector<std::byte>>, std::vector<std::string>> save_and_go_on(
      bool async) {
    MeshRun run(1, two_by_two_);
    run.train(3);
    CheckpointManager manager(dir_ / "run", 3);
    EXPECT_TRUE(async ? manager.save_async(3, run.state()) : manager.save(3, run.state()));
    manager.join();
    std::vector<std::string> layouts = layouts_of(run.model->state_dict());
    for (std::string& layout : layouts_of(run.adam->state_dict())) layouts.push_back(layout);
    run.train(3);
    return {values_of(run.model->state_dict()), layouts};
  }

  const Mesh two_by_two_{{0, 1, 2, 3}, {2, 2}, {"data", "model"}};
  TempDir dir_;
};

TEST_F(SpmdCheckpointManager, ARestoredRunContinuesBitForBitWithItsLayouts) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "save_async" : "save");
    const auto [want, saved_layouts] = save_and_go_on(async);
    // Adam's moments came out of the steps laid out over the mesh, not replicated, and so did
    // the LayerNorm's parameters, which are not marked.
    std::size_t laid_out = 0;
    for (const std::string& layout : saved_layouts) {
      laid_out += layout.find("devices=") != std::string::npos;
    }
    EXPECT_GE(laid_out, 8u) << ::testing::PrintToString(saved_layouts);

    MeshRun resumed(2, two_by_two_);
    TrainingState state = resumed.state();
    CheckpointManager manager(dir_ / "run", 3);
    ASSERT_EQ(manager.restore_latest(state), 3);
    std::vector<std::string> layouts = layouts_of(resumed.model->state_dict());
    for (std::string& layout : layouts_of(resumed.adam->state_dict())) layouts.push_back(layout);
    EXPECT_EQ(layouts, saved_layouts);
    resumed.train(3);
    EXPECT_EQ(values_of(resumed.model->state_dict()), want);
    std::filesystem::remove_all(dir_ / "run");
  }
}

TEST_F(SpmdCheckpointManager, RestoresOntoAnotherMesh) {
  MeshRun run(1, two_by_two_);
  run.train(2);
  CheckpointManager manager(dir_ / "run", 2);
  ASSERT_TRUE(manager.save(2, run.state()));
  const std::vector<std::vector<std::byte>> saved = values_of(run.model->state_dict());

  // The same devices as one line of four over "model": each parameter takes its new layout.
  const Mesh line({3, 2, 1, 0}, {1, 4}, {"data", "model"});
  MeshRun other(2, line);
  TrainingState state = other.state();
  manager.restore(2, state);
  const nn::StateDict params = other.model->state_dict();
  EXPECT_EQ(values_of(params), saved);
  EXPECT_EQ(params.at(0).second.impl()->data()->shards().at(0)->shape(), (Shape{4, 8}));
  EXPECT_EQ(params.at(4).second.impl()->data()->shards().at(0)->shape(), (Shape{4, 4}));
  other.train(1);  // the restored Adam state runs with the new layouts
  for (const auto& [name, t] : other.model->state_dict()) {
    for (float v : t.to_vector<float>()) EXPECT_TRUE(std::isfinite(v)) << name;
  }
}

TEST_F(SpmdCheckpointManager, ShardedOrPerReplicaStatesAreRefused) {
  MeshRun run(1, two_by_two_);
  CheckpointManager manager(dir_ / "run", 1);
  TrainingState sharded = run.state();
  sharded.sharded = true;
  EXPECT_THROW(manager.save(1, sharded), std::invalid_argument);
  TrainingState per_replica = run.state();
  per_replica.per_replica = run.model->state_dict();
  EXPECT_THROW(manager.save_async(1, per_replica), std::invalid_argument);
  EXPECT_TRUE(manager.all_steps().empty());
}

// Every device's file holds its share of the tiles: each value's tiles, over all the files, add up
// to the value once (sync and async), and with the mesh's two replicas of each tile both write.
TEST_F(SpmdCheckpointManager, EachTileIsWrittenOnceByOneOfItsDevices) {
  MeshRun run(1, two_by_two_);
  run.train(2);
  CheckpointManager manager(dir_ / "run", 2);
  ASSERT_TRUE(manager.save(2, run.state()));
  ASSERT_TRUE(manager.save_async(4, run.state(), /*force=*/true));
  manager.join();
  std::map<std::string, int64_t> want;  // each value's elements
  for (const auto& [name, t] : run.model->state_dict()) want["model/" + name] = t.numel();
  for (const auto& [name, t] : run.adam->state_dict()) want["optimizer/" + name] = t.numel();
  for (const int step : {2, 4}) {
    SCOPED_TRACE(step);
    const std::filesystem::path dir = dir_ / "run" / std::to_string(step);
    EXPECT_FALSE(std::filesystem::exists(dir / "tensors.ckpt"));
    std::map<std::string, int64_t> saved;
    int files_with_tiles = 0;
    for (int device = 0; device < kDevices; ++device) {
      CheckpointReader in(dir / ("tiles." + std::to_string(device) + ".ckpt"));
      files_with_tiles += in.tensor_count() > 0;
      while (std::optional<CheckpointEntry> entry = in.next()) {
        saved[entry->name] += entry->tensor.shape.numel();
      }
    }
    EXPECT_EQ(saved, want);
    EXPECT_EQ(files_with_tiles, kDevices);
  }
}

// A step whose tiles do not make up a value (a device's file emptied, the commit file written
// again over it, so that only the tiles say so) names the value; restore_latest goes back to the
// newest whole step.
TEST_F(SpmdCheckpointManager, AValueMissingATileIsNamedAndTheStepSkipped) {
  MeshRun run(1, two_by_two_);
  run.train(2);
  CheckpointManager manager(dir_ / "run", 2);
  ASSERT_TRUE(manager.save(2, run.state()));
  const std::vector<std::vector<std::byte>> at_two = values_of(run.model->state_dict());
  run.train(2);
  ASSERT_TRUE(manager.save(4, run.state()));
  const std::filesystem::path four = dir_ / "run" / "4";
  for (int device = 0; device < kDevices; ++device) {
    CheckpointWriter(four / ("tiles." + std::to_string(device) + ".ckpt"), 0).commit();
  }
  write_step_commit(four, 4, 1);

  MeshRun resumed(2, two_by_two_);
  TrainingState state = resumed.state();
  try {
    manager.restore(4, state);
    ADD_FAILURE() << "restored a step without its tiles";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("\"model/0.weight\": 0 of its 2 tiles were saved"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(manager.restore_latest(state), 2);
  EXPECT_EQ(values_of(resumed.model->state_dict()), at_two);
}

// Of the processes writing a step's parts, the one that finishes last commits it, with the sizes
// and checksums the others noted; a step another process has claimed is not committed twice.
TEST(CheckpointParts, TheLastPartCommitsTheStepOnce) {
  TempDir dir;
  const checkpoint_step::StepDirectory where{dir.path() / "run", 0};
  const auto write_part = [&](const std::filesystem::path& partial, int process) {
    std::filesystem::create_directories(partial);
    checkpoint_step::HostValues values;
    values.emplace_back("w", CpuTensor(std::vector<float>{1.0f * process, 2}, Shape{2}));
    std::vector<checkpoint_step::DeviceTiles> tiles{{.device = process, .values = values}};
    checkpoint_step::finish_part(where, 7, partial, process, 2,
                                 checkpoint_step::write_tiles(partial, tiles));
  };
  const std::filesystem::path partial = where.path / ".7.partial";
  write_part(partial, 1);
  EXPECT_FALSE(std::filesystem::exists(where.path / "7"));  // process 0's part is still missing
  write_part(partial, 0);
  ASSERT_TRUE(std::filesystem::exists(where.path / "7" / kStepCommitFile));
  EXPECT_NO_THROW(check_step_commit(where.path / "7"));
  EXPECT_FALSE(std::filesystem::exists(partial));

  // Both parts there, but the commit already claimed by the other process: left to it.
  const std::filesystem::path claimed = where.path / ".8.partial";
  write_part(claimed, 0);
  checkpoint_step::write_text(claimed / ".commit.claim", "");
  write_part(claimed, 1);
  EXPECT_FALSE(std::filesystem::exists(where.path / "8"));
}

}  // namespace
}  // namespace axle
