// The SPMD runtime on four CPU devices (actors/host/spmd_runtime.h): data on the virtual device is
// replicated on every device, mark_sharding lays it out in shards, a step runs the partitioned
// program on every device with its shards, and values read back whole. An MLP trained under SPMD
// on the meshes 4x1 (data), 1x4 (Megatron: column- then row-parallel) and 2x2 gives the losses
// and weights of the same MLP on one device, compiling as often.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/formats/error.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/spmd_checkpoint.h"
#include "tests/spmd_mlp.h"

namespace axle::testing {
namespace {

using spmd::get_sharding_spec;
using spmd::mark_sharding;
constexpr auto None = std::nullopt;
constexpr int kDevices = 4;

using spmd_mlp::count;
using spmd_mlp::random_values;
using spmd_mlp::train;
using spmd_mlp::TrainingRun;

class SpmdRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart({.cpu_devices = kDevices});
    use_spmd();
  }
  void TearDown() override { LazySystem::restart(); }
};

TEST_F(SpmdRuntime, DataIsReplicatedOnEveryDeviceAndReadsBackWhole) {
  ASSERT_TRUE(is_spmd());
  std::mt19937 rng(1);
  const std::vector<float> values = random_values(rng, 24);
  const Tensor t = tensor(values, {4, 6});
  const IntrusivePtr<DeviceData>& data = t.impl()->data();
  ASSERT_TRUE(data->sharded());
  ASSERT_EQ(data->shards().size(), static_cast<std::size_t>(kDevices));
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_EQ(data->shards()[d]->device(), Device{d});
    EXPECT_EQ(data->shards()[d]->shape(), (Shape{4, 6}));
  }
  EXPECT_EQ(t.to_vector<float>(), values);
  EXPECT_EQ(get_sharding_spec(t), "");
}

TEST_F(SpmdRuntime, MarkShardingOnDataMovesItsShardsAndReadsAssembleThem) {
  std::mt19937 rng(2);
  const std::vector<float> values = random_values(rng, 8 * 6);
  const Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  for (const PartitionSpec& spec :
       {PartitionSpec{"data", "model"}, PartitionSpec{"model", None}, PartitionSpec{None, "data"},
        PartitionSpec{PartitionDim{"data", "model"}, None}}) {
    const Tensor t = tensor(values, {8, 6});
    mark_sharding(t, mesh, spec);
    const ShardingSpec sharding = mesh.sharding(spec, 2);
    const IntrusivePtr<DeviceData>& data = t.impl()->data();
    ASSERT_TRUE(data->sharded());
    EXPECT_EQ(get_sharding_spec(t), to_string(sharding));
    for (int d = 0; d < kDevices; ++d) {
      EXPECT_EQ(data->shards()[d]->shape(), shard_shape(Shape{8, 6}, sharding));
    }
    EXPECT_EQ(t.to_vector<float>(), values) << to_string(spec);
    // A step reads the shards in place and its result is laid out alike.
    const Tensor doubled = t * 2.0;
    mark_step();
    std::vector<float> want = values;
    for (float& v : want) v *= 2;
    EXPECT_EQ(doubled.to_vector<float>(), want) << to_string(spec);
    EXPECT_EQ(get_sharding_spec(doubled), to_string(sharding)) << to_string(spec);
  }
}

TEST_F(SpmdRuntime, ShardsHoldTheirTiles) {
  // Device d's shard of a [4, 2] value split by rows over a 4x1 mesh is row d.
  const std::vector<float> values{0, 1, 10, 11, 20, 21, 30, 31};
  const Tensor t = tensor(values, {4, 2});
  mark_sharding(t, Mesh({0, 1, 2, 3}, {4}, {"x"}), {"x", None});
  for (int d = 0; d < kDevices; ++d) {
    const IntrusivePtr<DeviceData>& shard = t.impl()->data()->shards()[d];
    const std::vector<std::byte> bytes = read_device_data(LazySystem::get(), shard).get();
    ASSERT_EQ(bytes.size(), 2 * sizeof(float));
    float row[2];
    std::memcpy(row, bytes.data(), sizeof row);
    EXPECT_EQ(row[0], 10.0f * d);
    EXPECT_EQ(row[1], 10.0f * d + 1);
  }
}

void expect_same_training(const TrainingRun& spmd, const TrainingRun& one, const char* what) {
  ASSERT_EQ(spmd.losses.size(), one.losses.size());
  for (std::size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(spmd.losses[s], one.losses[s], 1e-5 * std::abs(one.losses[s]))
        << what << " step " << s;
  }
  for (std::size_t p = 0; p < one.weights.size(); ++p) {
    ASSERT_EQ(spmd.weights[p].size(), one.weights[p].size());
    for (std::size_t i = 0; i < one.weights[p].size(); ++i) {
      ASSERT_NEAR(spmd.weights[p][i], one.weights[p][i], 1e-5) << what << " parameter " << p;
    }
  }
  EXPECT_EQ(spmd.compiles, one.compiles) << what;
  EXPECT_LT(one.losses.back(), 0.9 * one.losses.front()) << "the MLP does not learn";
}

TEST(SpmdTraining, MeshesTrainAsOneDevice) {
  LazySystem::restart({.cpu_devices = kDevices});
  const TrainingRun one = train(std::nullopt, 8);
  // The weights stay in their shards from step to step: rows of w1 per device.
  for (auto [shape, what, rows] : {std::tuple{std::vector<int64_t>{4, 1}, "mesh 4x1 (data)", 16},
                                   std::tuple{std::vector<int64_t>{1, 4}, "mesh 1x4 (model)", 4},
                                   std::tuple{std::vector<int64_t>{2, 2}, "mesh 2x2", 8}}) {
    LazySystem::restart({.cpu_devices = kDevices});
    use_spmd();
    const TrainingRun spmd = train(Mesh({0, 1, 2, 3}, shape, {"data", "model"}), 8);
    expect_same_training(spmd, one, what);
    EXPECT_EQ(spmd.w1_shard, (Shape{rows, 12})) << what;
  }
  LazySystem::restart();
}

// What the partitioner emits for the ops that sum partial results or pick from shards (an
// embedding's and a convolution's gradients, FSDP's bias gradient, argmax / cumsum / topk along a
// split dim, random draws of each device's rows), run on the devices: with `mesh`, annotated
// over it under SPMD; without, on one device. Every value as floats.
std::vector<std::vector<float>> partial_and_picking_ops(const Mesh* mesh) {
  std::mt19937 rng(17);
  auto mark = [&](const Tensor& t, const PartitionSpec& spec) {
    if (mesh) mark_sharding(t, *mesh, spec);
  };
  const Tensor wide = tensor(random_values(rng, 8 * 1024), {8, 1024});
  mark(wide, {"data", "model"});
  std::vector<int64_t> id_values(16);
  for (int64_t& id : id_values) id = static_cast<int64_t>(rng() % 10);
  const Tensor ids = tensor(id_values, {16});
  const Tensor table = tensor(random_values(rng, 10 * 8), {10, 8}).requires_grad_();
  mark(ids, {"data"});
  mark(table, {None, "model"});
  const Tensor rows = nn::embedding(ids, table);
  const Tensor images = tensor(random_values(rng, 8 * 3 * 5 * 5), {8, 3, 5, 5});
  const Tensor kernel = tensor(random_values(rng, 4 * 3 * 3 * 3), {4, 3, 3, 3}).requires_grad_();
  mark(images, {"data", None, None, None});
  const Tensor maps = conv2d(images, kernel);
  const Tensor x = tensor(random_values(rng, 8 * 12), {8, 12});
  const Tensor bias = tensor(random_values(rng, 12), {12}).requires_grad_();
  mark(x, {"data", None});
  mark(bias, {"data"});
  (sum(rows * rows) + sum(maps * maps) + sum(exp(x + bias))).backward();
  Tensor stepped;
  {
    const NoGradGuard no_grad;
    stepped = bias - bias.grad() * 0.1;
  }
  const TopK top = topk(wide, 3, 1);
  set_rng_state(5);
  Tensor noise = rand({8, 12});
  mark(noise, {"data", "model"});
  const std::vector<Tensor> outputs{table.grad(),
                                    kernel.grad(),
                                    stepped,
                                    cast(argmax(wide, 1), DType::kFloat32),
                                    cumsum(wide, 1),
                                    top.values,
                                    cast(top.indices, DType::kFloat32),
                                    noise};
  mark_step();
  std::vector<std::vector<float>> values;
  for (const Tensor& t : outputs) values.push_back(t.to_vector<float>());
  return values;
}

TEST(SpmdTraining, PartialSumsAndPicksFromShardsRunOnTheDevicesAsOnOne) {
  LazySystem::restart({.cpu_devices = kDevices});
  const std::vector<std::vector<float>> one = partial_and_picking_ops(nullptr);
  LazySystem::restart({.cpu_devices = kDevices});
  use_spmd();
  const Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  const std::vector<std::vector<float>> spmd = partial_and_picking_ops(&mesh);
  ASSERT_EQ(spmd.size(), one.size());
  for (std::size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(spmd[k].size(), one[k].size()) << "output " << k;
    for (std::size_t i = 0; i < one[k].size(); ++i) {
      ASSERT_NEAR(spmd[k][i], one[k][i], 1e-5 * (1 + std::abs(one[k][i])))
          << "output " << k << " element " << i;
    }
  }
  LazySystem::restart();
}

// A value laid out over the devices in one order and then in another: the devices trade tiles
// (the partitioner's collective_permute) and the results read back as on one device.
TEST(SpmdTraining, TilesMovingBetweenDeviceOrdersArriveWhole) {
  std::mt19937 rng(23);
  const std::vector<float> values = random_values(rng, 8 * 6);
  const auto run = [&](bool spmd) {
    LazySystem::restart({.cpu_devices = kDevices});
    if (spmd) use_spmd();
    const Mesh forward({0, 1, 2, 3}, {4, 1}, {"data", "model"});
    const Mesh reversed({3, 2, 1, 0}, {4, 1}, {"data", "model"});
    const Tensor x = tensor(values, {8, 6});
    if (spmd) mark_sharding(x, forward, {"data", None});
    Tensor y = exp(x) * 2.0;
    if (spmd) mark_sharding(y, reversed, {"data", None});
    const Tensor z = y + x;
    mark_step();
    std::vector<float> out = z.to_vector<float>();
    LazySystem::restart();
    return out;
  };
  const std::vector<float> one = run(false);
  const std::vector<float> spmd = run(true);
  ASSERT_EQ(spmd.size(), one.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(spmd[i], one[i], 1e-6 * (1 + std::abs(one[i]))) << "element " << i;
  }
}

// Two Linear layers with given weights, as nn modules (SpmdFullyShardedDataParallel wraps one).
class TwoLayers : public nn::Module {
 public:
  explicit TwoLayers(const std::vector<std::vector<float>>& init)
      : fc1_(register_module("fc1", std::make_shared<nn::Linear>(12, 16))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear>(16, 8))) {
    const NoGradGuard no_grad;
    const std::vector<Tensor> params = parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(tensor(init[i], params[i].shape()));
    }
  }
  Tensor forward(const Tensor& x) override { return fc2_->forward(relu(fc1_->forward(x))); }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

std::vector<double> train_two_layers(bool fsdp, std::vector<Shape>* shard_shapes) {
  std::mt19937 rng(5);
  auto model = std::make_shared<TwoLayers>(std::vector<std::vector<float>>{
      random_values(rng, 16 * 12, 0.3f), random_values(rng, 16, 0.1f),
      random_values(rng, 8 * 16, 0.3f), random_values(rng, 8, 0.1f)});
  std::shared_ptr<nn::Module> trained = model;
  if (fsdp) {
    trained = std::make_shared<spmd::SpmdFullyShardedDataParallel>(
        model, Mesh({0, 1, 2, 3}, {4}, {"fsdp"}));
  }
  optim::AdamW adam(trained->parameters(), {.lr = 0.01});
  const std::vector<float> inputs = random_values(rng, 8 * 12);
  std::vector<int64_t> labels(8);
  for (auto& l : labels) l = static_cast<int64_t>(rng() % 8);
  std::vector<Tensor> losses;
  for (int step = 0; step < 6; ++step) {
    adam.zero_grad();
    const Tensor loss = nn::cross_entropy((*trained)(tensor(inputs, {8, 12})), tensor(labels, {8}));
    loss.backward();
    adam.step();
    mark_step();
    losses.push_back(loss);
  }
  std::vector<double> values;
  for (const Tensor& loss : losses) values.push_back(loss.item());
  if (shard_shapes) {
    for (const Tensor& p : trained->parameters()) {
      const DeviceData& data = *p.impl()->data();
      shard_shapes->push_back(data.sharded() ? data.shards()[0]->shape() : data.shape());
    }
  }
  return values;
}

TEST(SpmdTraining, FullyShardedDataParallelOnSpmdTrainsAsOneDevice) {
  LazySystem::restart({.cpu_devices = kDevices});
  int64_t compiles = count("UncachedCompile");
  const std::vector<double> one = train_two_layers(false, nullptr);
  const int64_t one_compiles = count("UncachedCompile") - compiles;
  LazySystem::restart({.cpu_devices = kDevices});
  use_spmd();
  compiles = count("UncachedCompile");
  std::vector<Shape> shards;
  const std::vector<double> fsdp = train_two_layers(true, &shards);
  ASSERT_EQ(fsdp.size(), one.size());
  for (std::size_t s = 0; s < one.size(); ++s) {
    EXPECT_NEAR(fsdp[s], one[s], 1e-5 * std::abs(one[s])) << "step " << s;
  }
  EXPECT_LT(one.back(), one.front());
  EXPECT_EQ(count("UncachedCompile") - compiles, one_compiles);
  // Every parameter is a quarter on each device: dim 0 over "fsdp".
  EXPECT_EQ(shards, (std::vector<Shape>{{4, 12}, {4}, {2, 16}, {2}}));
  LazySystem::restart();
}

TEST_F(SpmdRuntime, SpmdFsdpNeedsItsMeshAxis) {
  try {
    spmd::SpmdFullyShardedDataParallel wrapped(std::make_shared<nn::Linear>(4, 4),
                                               Mesh({0, 1, 2, 3}, {4}, {"data"}));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no axis \"fsdp\""), std::string::npos) << e.what();
  }
}

TEST_F(SpmdRuntime, ModelShardsHoldAQuarterOfTheWeights) {
  const Mesh mesh({0, 1, 2, 3}, {1, 4}, {"data", "model"});
  std::mt19937 rng(3);
  Tensor w = tensor(random_values(rng, 16 * 8), {16, 8});
  mark_sharding(w, mesh, {"model", None});
  w = w * 0.5;  // the step's result keeps the layout
  mark_step();
  for (const IntrusivePtr<DeviceData>& shard : w.impl()->data()->shards()) {
    EXPECT_EQ(shard->bytes(), 16 * 8 * sizeof(float) / kDevices);
  }
}

TEST_F(SpmdRuntime, TheLoadersInputShardingPlacesEachDevicesShardOfTheBatch) {
  auto data = std::make_shared<FakeData>(FakeDataOptions{.size = 16, .sample_shape = {1, 4, 4}});
  DataLoader host(data, {.batch_size = 8});
  std::vector<Batch> want;
  for (const Batch& batch : host) want.push_back(batch);
  DataLoader loader(data, {.batch_size = 8});
  const Mesh mesh({0, 1, 2, 3}, {2, 2}, {"data", "model"});
  std::size_t seen = 0;
  for (const DeviceBatch& batch :
       MpDeviceLoader(loader, Device{0},
                      {.input_sharding = InputSharding{mesh, {"data", None, None, None}}})) {
    ASSERT_LT(seen, want.size());
    // Images by the spec, labels (rank 1) along the batch dim by its "data" entry.
    const std::vector<Shape> shard_shapes{{4, 1, 4, 4}, {4}};
    for (std::size_t field = 0; field < 2; ++field) {
      const DeviceData& on_mesh = *batch[field].impl()->data();
      ASSERT_TRUE(on_mesh.sharded());
      EXPECT_GE(on_mesh.sharding(), 0);
      for (const IntrusivePtr<DeviceData>& shard : on_mesh.shards()) {
        EXPECT_EQ(shard->shape(), shard_shapes[field]);
      }
      EXPECT_EQ(batch[field].cpu().bytes, want[seen][field].bytes) << "field " << field;
    }
    EXPECT_EQ(get_sharding_spec(batch[1]), "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
    ++seen;
  }
  EXPECT_EQ(seen, want.size());
}

// A checkpoint saved from one mesh loads onto another: each tensor gets its value laid out as it
// is, whatever layout saved it; and a damaged save is an error naming the file and key.
TEST_F(SpmdRuntime, ACheckpointSavedOnOneMeshLoadsOntoAnother) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("axle_spmd_checkpoint_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::mt19937 rng(9);
  const std::vector<float> w_values = random_values(rng, 8 * 6), b_values = random_values(rng, 8);
  {
    const Mesh two_by_two({0, 1, 2, 3}, {2, 2}, {"data", "model"});
    const Tensor w = tensor(w_values, {8, 6});
    const Tensor b = tensor(b_values, {8});
    mark_sharding(w, two_by_two, {"model", "data"});
    mark_sharding(b, two_by_two, {"model"});
    save_spmd_checkpoint({{"w", w}, {"b", b}}, dir);
  }
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_TRUE(
        std::filesystem::exists(dir / ("shard-" + std::to_string(d) + "-of-4.safetensors")));
  }
  // Onto other layouts: w by columns over a line of four, b replicated.
  const Mesh line({0, 1, 2, 3}, {4}, {"x"});
  const Tensor w = zeros({8, 6});
  const Tensor b = zeros({8});
  mark_sharding(w, line, {"x", None});
  load_spmd_checkpoint({{"w", w}, {"b", b}}, dir);
  EXPECT_EQ(w.to_vector<float>(), w_values);
  EXPECT_EQ(b.to_vector<float>(), b_values);
  EXPECT_EQ(w.impl()->data()->shards()[0]->shape(), (Shape{2, 6}));
  EXPECT_EQ(b.impl()->data()->sharding(), -1);
  // A key the checkpoint lacks, and a missing file.
  EXPECT_THROW(load_spmd_checkpoint({{"other", zeros({8})}}, dir), FileError);
  std::filesystem::remove(dir / "shard-3-of-4.safetensors");
  try {
    load_spmd_checkpoint({{"w", w}}, dir);
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("shard-3-of-4"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// XLA_USE_SPMD=1 turns SPMD on at start-up, as use_spmd() does: data is placed on every device
// and mark_sharding splits it.
TEST(SpmdConfig, XlaUseSpmdTurnsItOnAtStartUp) {
  config::set("XLA_USE_SPMD", "1");
  LazySystem::restart({.cpu_devices = kDevices});
  EXPECT_TRUE(is_spmd());
  const Tensor t = tensor(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {8});
  mark_sharding(t, Mesh({0, 1, 2, 3}, {4}, {"x"}), {"x"});
  ASSERT_TRUE(t.impl()->data()->sharded());
  EXPECT_EQ(t.impl()->data()->shards().size(), static_cast<std::size_t>(kDevices));
  EXPECT_EQ(get_sharding_spec(t), "{devices=[4]0,1,2,3}");
  config::unset("XLA_USE_SPMD");
  LazySystem::restart({.cpu_devices = kDevices});
  EXPECT_FALSE(is_spmd());
  LazySystem::restart();
}

TEST_F(SpmdRuntime, OtherDevicesDoNotExistUnderSpmd) {
  try {
    (void)tensor(std::vector<float>{1, 2}, {2}, Device{1});
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("virtual device"), std::string::npos) << e.what();
  }
}

TEST_F(SpmdRuntime, AMeshOverSomeDevicesIsAnError) {
  const Tensor t = tensor(std::vector<float>{1, 2, 3, 4}, {4});
  try {
    mark_sharding(t, Mesh({0, 1}, {2}, {"x"}), {"x"});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("all 4 devices"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace axle::testing
