// SPMD over the devices of several processes, run under mpirun by CTest (tests/mpi/CMakeLists.txt:
// 2 processes of 2 devices each; also run as one process of 4 devices). use_spmd() makes one
// virtual device over every device of the job, mesh device ids are global ordinals, and each
// process holds and runs only its own devices' shards: an MLP trained over meshes 2x2, 4x1 and
// 1x4 and over HybridMeshes (the processes on either axis) gives the losses and weights of one
// device, compiling as often; the runtime queries answer as torch_xla's under SPMD; reads of values
// whose tiles are on other processes assemble them (a collective); the loader's input_sharding
// places each process's shards; a distributed checkpoint is written by each process for its own
// devices and loads onto another mesh; and processes that trace over different meshes, or hold
// different device counts, fail clearly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/spmd_checkpoint.h"
#include "tests/spmd_mlp.h"

namespace axle {
namespace {

using spmd::HybridMesh;
using spmd::mark_sharding;
constexpr auto None = std::nullopt;

using spmd_mlp::count;
using spmd_mlp::random_values;
using spmd_mlp::train;
using spmd_mlp::TrainingRun;

// The job's devices, whether it is one process or several.
int job_devices() { return LazySystem::get().device_count() * process_count(); }

class SpmdProcesses : public ::testing::Test {
 protected:
  void SetUp() override {
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");
    LazySystem::restart();
    ASSERT_EQ(job_devices(), 4) << "run as 2 processes of 2 devices, or 1 of 4";
  }
  void TearDown() override {
    LazySystem::restart();
    config::unset("AXLE_COLLECTIVE_TIMEOUT");
  }
  static void spmd_on() {
    LazySystem::restart();
    use_spmd();
  }
};

// What only a job of several processes can show (the one-process run filters these out).
class SpmdSeveralProcesses : public SpmdProcesses {
 protected:
  void SetUp() override {
    SpmdProcesses::SetUp();
    ASSERT_GT(process_count(), 1) << "run under mpirun with several processes";
  }
};

std::vector<int64_t> ids(int n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

TEST_F(SpmdProcesses, MeshesOverTheJobTrainAsOneDevice) {
  constexpr int kSteps = 8;
  const TrainingRun one = train(std::nullopt, kSteps);
  ASSERT_LT(one.losses.back(), 0.9 * one.losses.front()) << "the MLP does not learn";
  const int local = LazySystem::get().device_count();
  struct Case {
    const char* what;
    Mesh mesh;
    int64_t w1_rows;  // rows of w1 per device: 16 over the "model" axis's size
  };
  const std::vector<Case> cases{
      {"Mesh 2x2", Mesh(ids(4), {2, 2}, {"data", "model"}), 8},
      {"Mesh 4x1 (data)", Mesh(ids(4), {4, 1}, {"data", "model"}), 16},
      {"Mesh 1x4 (model)", Mesh(ids(4), {1, 4}, {"data", "model"}), 4},
      // A process's devices on the inner (ici) axes: here "model" within a process, "data"
      // across processes; then the other way round (the row-parallel sums cross processes).
      {"HybridMesh ici (1,L) dcn (P,1)",
       HybridMesh({1, local}, {process_count(), 1}, {"data", "model"}), 16 / local},
      {"HybridMesh ici (L,1) dcn (1,P)",
       HybridMesh({local, 1}, {1, process_count()}, {"data", "model"}), 16 / process_count()},
  };
  for (const Case& c : cases) {
    spmd_on();
    const TrainingRun spmd = train(c.mesh, kSteps);
    ASSERT_EQ(spmd.losses.size(), one.losses.size());
    for (std::size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(spmd.losses[s], one.losses[s], 1e-5 * std::abs(one.losses[s]))
          << c.what << " step " << s;
    }
    for (std::size_t p = 0; p < one.weights.size(); ++p) {
      ASSERT_EQ(spmd.weights[p].size(), one.weights[p].size());
      for (std::size_t i = 0; i < one.weights[p].size(); ++i) {
        ASSERT_NEAR(spmd.weights[p][i], one.weights[p][i], 1e-5) << c.what << " parameter " << p;
      }
    }
    EXPECT_EQ(spmd.compiles, one.compiles) << c.what;
    // This process holds its own devices' pieces only.
    EXPECT_EQ(spmd.w1_shards, static_cast<std::size_t>(local)) << c.what;
    EXPECT_EQ(spmd.w1_first, process_index() * local) << c.what;
    EXPECT_EQ(spmd.w1_shard, (Shape{c.w1_rows, 12})) << c.what;
  }
}

// As torch_xla's runtime under SPMD: the program is one device's (world size 1, ordinal 0 in
// every process), over every device of the job, of which each process addresses its own.
TEST_F(SpmdProcesses, RuntimeQueriesSeeOneProgramOverTheJobsDevices) {
  spmd_on();
  EXPECT_TRUE(is_spmd());
  EXPECT_EQ(world_size(), 1);
  EXPECT_EQ(global_ordinal(), 0);
  EXPECT_EQ(global_device_count(), 4);
  EXPECT_EQ(addressable_device_count() * process_count(), 4);
  EXPECT_EQ(LazySystem::get().spmd_device_count(), 4);
  EXPECT_EQ(LazySystem::get().first_spmd_device(), process_index() * addressable_device_count());
}

TEST_F(SpmdProcesses, ReadsAssembleTilesFromEveryProcess) {
  spmd_on();
  const int local = LazySystem::get().device_count();
  std::vector<float> values(8 * 6);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3;
  const Mesh mesh(ids(4), {2, 2}, {"data", "model"});
  // Device data laid out over the mesh: this process holds two of the four tiles.
  const Tensor t = tensor(values, {8, 6});
  mark_sharding(t, mesh, {"data", "model"});
  const DeviceData& data = *t.impl()->data();
  ASSERT_EQ(data.shards().size(), static_cast<std::size_t>(local));
  for (std::size_t k = 0; k < data.shards().size(); ++k) {
    // Device d = first + k holds rows 4 * (d / 2) .., columns 3 * (d % 2) ..
    const int d = data.first_shard() + static_cast<int>(k);
    const std::vector<std::byte> bytes =
        read_device_data(LazySystem::get(), data.shards()[k]).get();
    ASSERT_EQ(bytes.size(), 4 * 3 * sizeof(float));
    std::vector<float> tile(12);
    std::memcpy(tile.data(), bytes.data(), bytes.size());
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(tile[r * 3 + c], values[(4 * (d / 2) + r) * 6 + 3 * (d % 2) + c])
            << "device " << d;
      }
    }
  }
  EXPECT_EQ(t.to_vector<float>(), values);
  // A computed value keeps the layout; its read is a collective too.
  const Tensor u = t * 2.0 + 1.0;
  mark_step();
  std::vector<float> want(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) want[i] = values[i] * 2 + 1;
  EXPECT_EQ(u.to_vector<float>(), want);
  // A sum over every tile, and a value laid out again (the tiles move between processes).
  EXPECT_NEAR(
      sum(t).item(),
      [&] {
        double s = 0;
        for (float v : values) s += v;
        return s;
      }(),
      1e-4);
  mark_sharding(t, Mesh({3, 2, 1, 0}, {4}, {"x"}), {"x", None});
  EXPECT_EQ(t.impl()->data()->shards()[0]->shape(), (Shape{2, 6}));
  EXPECT_EQ(t.to_vector<float>(), values);
}

TEST_F(SpmdProcesses, TheLoadersInputShardingPlacesEachProcesssShards) {
  spmd_on();
  const int local = LazySystem::get().device_count();
  auto data = std::make_shared<FakeData>(FakeDataOptions{.size = 16, .sample_shape = {1, 4, 4}});
  DataLoader host(data, {.batch_size = 8});
  std::vector<Batch> want;
  for (const Batch& batch : host) want.push_back(batch);
  DataLoader loader(data, {.batch_size = 8});
  const Mesh mesh(ids(4), {4, 1}, {"data", "model"});
  std::size_t seen = 0;
  for (const DeviceBatch& batch :
       MpDeviceLoader(loader, Device{0},
                      {.input_sharding = InputSharding{mesh, {"data", None, None, None}}})) {
    ASSERT_LT(seen, want.size());
    const std::vector<Shape> shard_shapes{{2, 1, 4, 4}, {2}};
    for (std::size_t field = 0; field < 2; ++field) {
      const DeviceData& on_mesh = *batch[field].impl()->data();
      ASSERT_TRUE(on_mesh.sharded());
      ASSERT_EQ(on_mesh.shards().size(), static_cast<std::size_t>(local));
      EXPECT_EQ(on_mesh.first_shard(), process_index() * local);
      for (const IntrusivePtr<DeviceData>& shard : on_mesh.shards()) {
        EXPECT_EQ(shard->shape(), shard_shapes[field]);
      }
      // This process's rows of the batch, on its devices.
      const std::vector<std::byte> first_shard =
          read_device_data(LazySystem::get(), on_mesh.shards()[0]).get();
      const std::size_t row_bytes = want[seen][field].bytes.size() / 8;
      const std::size_t offset = static_cast<std::size_t>(on_mesh.first_shard()) * 2 * row_bytes;
      EXPECT_TRUE(std::equal(first_shard.begin(), first_shard.end(),
                             want[seen][field].bytes.begin() + static_cast<std::ptrdiff_t>(offset)))
          << "field " << field;
      EXPECT_EQ(batch[field].cpu().bytes, want[seen][field].bytes) << "field " << field;
    }
    ++seen;
  }
  EXPECT_EQ(seen, want.size());
}

TEST_F(SpmdProcesses, EachProcessWritesItsDevicesCheckpointShards) {
  spmd_on();
  const int local = LazySystem::get().device_count();
  // One directory for the job: process 0's id names it.
  const int mine = ::getpid();
  const std::vector<std::vector<std::byte>> pids =
      rendezvous("checkpoint directory", std::as_bytes(std::span(&mine, 1)));
  int pid = 0;
  std::memcpy(&pid, pids.front().data(), sizeof pid);
  const auto dir =
      std::filesystem::temp_directory_path() / ("axle_spmd_mpi_checkpoint_" + std::to_string(pid));
  std::mt19937 rng(9);
  const std::vector<float> w_values = random_values(rng, 8 * 6), b_values = random_values(rng, 8);
  {
    const Mesh two_by_two(ids(4), {2, 2}, {"data", "model"});
    const Tensor w = tensor(w_values, {8, 6});
    const Tensor b = tensor(b_values, {8});
    mark_sharding(w, two_by_two, {"model", "data"});
    mark_sharding(b, two_by_two, {"model"});
    save_spmd_checkpoint({{"w", w}, {"b", b}}, dir);
  }
  // Every device's file is there once the call returns, in every process.
  for (int d = 0; d < 4; ++d) {
    EXPECT_TRUE(std::filesystem::exists(dir / ("shard-" + std::to_string(d) + "-of-4.safetensors")))
        << "device " << d;
  }
  const Mesh line(ids(4), {4}, {"x"});
  const Tensor w = zeros({8, 6});
  const Tensor b = zeros({8});
  mark_sharding(w, line, {"x", None});
  load_spmd_checkpoint({{"w", w}, {"b", b}}, dir);
  EXPECT_EQ(w.impl()->data()->shards().size(), static_cast<std::size_t>(local));
  EXPECT_EQ(w.impl()->data()->shards()[0]->shape(), (Shape{2, 6}));
  EXPECT_EQ(w.to_vector<float>(), w_values);
  EXPECT_EQ(b.to_vector<float>(), b_values);
  (void)rendezvous("checkpoint read");  // before process 0 removes it
  if (process_index() == 0) std::filesystem::remove_all(dir);
}

TEST_F(SpmdSeveralProcesses, ProcessesOverDifferentMeshesFailClearly) {
  spmd_on();
  // Process 0 shards the rows, the others the columns: the programs differ.
  const Tensor t = tensor(std::vector<float>(16, 1.0f), {4, 4});
  mark_sharding(t, Mesh(ids(4), {4}, {"x"}),
                process_index() == 0 ? PartitionSpec{"x", None} : PartitionSpec{None, "x"});
  const Tensor u = t * 3.0;
  try {
    mark_step();
    FAIL() << "expected a CollectiveError";
  } catch (const CollectiveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("traced different SPMD programs"), std::string::npos) << what;
    EXPECT_NE(what.find("devices=[4,1]"), std::string::npos) << what;
    EXPECT_NE(what.find("devices=[1,4]"), std::string::npos) << what;
  }
}

// A step that fails in one process only (its devices are out of memory): reading its result,
// the other process fails at once with an error naming it, instead of waiting for its tiles.
TEST_F(SpmdSeveralProcesses, AReadWhoseTilesFailedElsewhereFailsAtOnce) {
  // Room for a tile of the input (32x32 floats, 4 KiB) but not for the result's beside it.
  if (process_index() == 1) config::set("AXLE_DEVICE_MEMORY_LIMIT", "6000");
  spmd_on();
  config::unset("AXLE_DEVICE_MEMORY_LIMIT");
  const Mesh mesh(ids(4), {2, 2}, {"data", "model"});
  const Tensor t = spmd::tensor_from_host_sharded(
      CpuTensor(std::vector<float>(64 * 64, 1.0f), Shape{64, 64}), mesh, {"data", "model"});
  const Tensor u = t * 2.0;
  mark_step();
  try {
    (void)u.to_vector<float>();
    FAIL() << "expected the read to fail";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (process_index() == 0) {
      EXPECT_NE(what.find("process 1 could not read its tiles"), std::string::npos) << what;
    }
  }
}

TEST_F(SpmdSeveralProcesses, ProcessesWithDifferentDeviceCountsFailClearly) {
  LazySystem::restart({.cpu_devices = 1 + process_index()});
  try {
    use_spmd();
    FAIL() << "expected a std::logic_error";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("as many devices"), std::string::npos) << what;
    EXPECT_NE(what.find("CPU_NUM_DEVICES"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace axle
