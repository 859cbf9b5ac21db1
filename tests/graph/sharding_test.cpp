// Sharding values: XLA's text, shard shapes, the ints round trip, and Mesh.get_op_sharding's
// tile assignments, checked against a direct transpose of the mesh.
#include "axle/graph/sharding.h"

#include <gtest/gtest.h>

#include <numeric>

#include "axle/graph/tensor.h"

namespace axle {
namespace {

std::vector<int64_t> iota_ids(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

TEST(Sharding, TextMatchesXla) {
  EXPECT_EQ(to_string(ShardingSpec::replicated()), "{replicated}");
  const Mesh mesh(iota_ids(2), {2, 1});
  EXPECT_EQ(to_string(mesh.sharding({0, 1}, 2)), "{devices=[2,1]0,1}");
  const Mesh square(iota_ids(4), {2, 2}, {"data", "model"});
  EXPECT_EQ(to_string(square.sharding({"data", std::nullopt}, 2)),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  // Sharded over "model" only: the tiles go along axis 1 of the mesh, so device 0 and 2 hold
  // tile 0 (the mesh's columns), and the rows replicate.
  EXPECT_EQ(to_string(square.sharding({std::nullopt, "model"}, 2)),
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}");
  EXPECT_EQ(to_string(square.sharding({"model", "data"}, 2)), "{devices=[2,2]0,2,1,3}");
  EXPECT_EQ(to_string(square.sharding({{"data", "model"}, std::nullopt}, 2)),
            "{devices=[4,1]0,1,2,3}");
  EXPECT_TRUE(square.sharding({std::nullopt, std::nullopt}, 2).is_replicated());
}

TEST(Sharding, TileAssignmentIsTheMeshTransposed) {
  // A 2x3x2 mesh with shuffled ids, sharded (axis 2, None, axis 0): the assignment must list,
  // for each (a2, a0, a1) in row-major order, the id at mesh[a0][a1][a2].
  std::vector<int64_t> ids = {7, 3, 11, 0, 5, 9, 1, 2, 4, 6, 8, 10};
  const Mesh mesh(ids, {2, 3, 2});
  const ShardingSpec sharding = mesh.sharding({2, std::nullopt, 0}, 3);
  ASSERT_EQ(sharding.tile_dims, (std::vector<int64_t>{2, 1, 2, 3}));
  ASSERT_TRUE(sharding.last_tile_dim_replicate);
  std::vector<int64_t> want;
  for (int a2 = 0; a2 < 2; ++a2)
    for (int a0 = 0; a0 < 2; ++a0)
      for (int a1 = 0; a1 < 3; ++a1) want.push_back(ids[(a0 * 3 + a1) * 2 + a2]);
  EXPECT_EQ(sharding.devices, want);
  EXPECT_EQ(sharding.replication(), 3);
  // Each device's tile: its coordinates along the sharded axes.
  for (int a0 = 0; a0 < 2; ++a0)
    for (int a1 = 0; a1 < 3; ++a1)
      for (int a2 = 0; a2 < 2; ++a2) {
        const int64_t device = ids[(a0 * 3 + a1) * 2 + a2];
        EXPECT_EQ(sharding.tile_of(device), (std::vector<int64_t>{a2, 0, a0})) << device;
      }
}

TEST(Sharding, ShardShapesAndUnevenDimensions) {
  const Mesh mesh(iota_ids(4), {2, 2}, {"data", "model"});
  const ShardingSpec sharding = mesh.sharding({"data", "model"}, 2);
  EXPECT_EQ(shard_shape(Shape{8, 6}, sharding), (Shape{4, 3}));
  EXPECT_EQ(shard_shape(Shape{8, 6}, ShardingSpec::replicated()), (Shape{8, 6}));
  try {
    (void)shard_shape(Shape{8, 5}, sharding);
    FAIL() << "an uneven dimension was accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 1 (5) does not split evenly in 2"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[8,5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)shard_shape(Shape{8}, sharding), ShapeError);
}

TEST(Sharding, IntsRoundTrip) {
  const Mesh mesh(iota_ids(8), {2, 2, 2});
  for (const ShardingSpec& sharding :
       {ShardingSpec::replicated(), mesh.sharding({0, std::nullopt, 1}, 3),
        mesh.sharding({{2, 0}, 1}, 2), mesh.sharding({std::nullopt, 1}, 2)}) {
    EXPECT_EQ(decode_sharding(encode_sharding(sharding)), sharding) << to_string(sharding);
    EXPECT_EQ(to_string(decode_sharding(encode_sharding(sharding))), to_string(sharding));
  }
  EXPECT_THROW((void)decode_sharding(std::vector<int64_t>{2, 2, 2, 0, 0, 1}),
               std::invalid_argument);
}

// torch_xla's Mesh: mesh_shape the sizes, shape() (axis name, size) in order.
TEST(Sharding, MeshShapeNamesEachAxisSize) {
  const Mesh named(iota_ids(8), {2, 4}, {"data", "model"});
  EXPECT_EQ(named.mesh_shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(named.shape(),
            (std::vector<std::pair<std::string, int64_t>>{{"data", 2}, {"model", 4}}));
  EXPECT_EQ(named.axis_size("model"), 4);
  EXPECT_EQ(named.axis_size(0), 2);
  EXPECT_THROW((void)named.axis_size("pipe"), std::invalid_argument);
  const Mesh unnamed(iota_ids(6), {3, 2});
  EXPECT_EQ(unnamed.shape(), (std::vector<std::pair<std::string, int64_t>>{{"0", 3}, {"1", 2}}));
}

// torch_xla's mesh.get_logical_mesh(): the device ids reshaped to the mesh, in the mesh's order.
TEST(Sharding, LogicalMeshIsTheDeviceIdsInTheMeshShape) {
  const Mesh mesh({3, 1, 2, 0, 5, 4}, {2, 3}, {"data", "model"});
  const CpuTensor logical = mesh.get_logical_mesh();
  EXPECT_EQ(logical.dtype, DType::kInt64);
  EXPECT_EQ(logical.shape, Shape({2, 3}));
  EXPECT_EQ(logical.values<int64_t>(), (std::vector<int64_t>{3, 1, 2, 0, 5, 4}));
  const CpuTensor line = Mesh(iota_ids(4), {4}).get_logical_mesh();
  EXPECT_EQ(line.shape, Shape({4}));
  EXPECT_EQ(line.values<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(Sharding, MeshAndSpecErrorsNameWhatIsWrong) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              Mesh(iota_ids(3), {2, 2});
            }).find("3 device ids do not fill"),
            std::string::npos);
  EXPECT_NE(message([] { Mesh({0, 1, 1, 2}, {2, 2}); }).find("repeat"), std::string::npos);
  EXPECT_NE(message([] {
              Mesh(iota_ids(4), {2, 2}, {"x"});
            }).find("1 axis names"),
            std::string::npos);
  const Mesh mesh(iota_ids(4), {2, 2}, {"data", "model"});
  EXPECT_NE(message([&] {
              (void)mesh.sharding({"batch", std::nullopt}, 2);
            }).find("no axis is named 'batch' (the mesh's axes: data, model)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              (void)mesh.sharding({"data"}, 2);
            }).find("has 1 entries for a tensor of rank 2"),
            std::string::npos);
  EXPECT_NE(message([&] {
              (void)mesh.sharding({"data", "data"}, 2);
            }).find("uses mesh axis 'data' twice"),
            std::string::npos);
  EXPECT_NE(message([&] {
              (void)mesh.sharding({2, std::nullopt}, 2);
            }).find("axis 2 is out of range"),
            std::string::npos);
}

}  // namespace
}  // namespace axle
