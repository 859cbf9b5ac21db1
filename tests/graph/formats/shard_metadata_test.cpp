// Tests graph/formats/shard_metadata.h on the host alone: the shard metadata's text round-trips, a
// replica's file reads back, shards consolidate, and damaged metadata or shards that do not add
// up are refused with std::invalid_argument (FileError for a damaged checkpoint file), never an
// allocation sized by the damage or arithmetic that overflows.
#include "axle/graph/formats/shard_metadata.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;
using testing::host;
using testing::TempDir;

// Rank `rank` of 2: one flat parameter of 8 f32 (a 2x2 weight at 0, a 3-element bias at 4 under
// two names, one element of padding) and a buffer.
ShardFile shard(int rank) {
  ShardFile file{.path = "rank-" + std::to_string(rank) + ".ckpt"};
  file.metadata = {.world_size = 2, .rank = rank};
  FlatParameterInfo flat{.name = "_fsdp_wrapped_module.flat_param_0",
                         .dtype = DType::kFloat32,
                         .padded_numel = 8,
                         .shard_shape = {4}};
  flat.params.push_back({.names = {"fc.weight"}, .shape = {2, 2}, .offset = 0, .numel = 4});
  flat.params.push_back({.names = {"fc.bias", "tied"}, .shape = {3}, .offset = 4, .numel = 3});
  file.metadata.flat_params.push_back(flat);
  const float base = 4.0f * static_cast<float>(rank);
  file.tensors.emplace(flat.name,
                       host<float>(DType::kFloat32, {4}, {base, base + 1, base + 2, base + 3}));
  file.order.push_back(flat.name);
  file.tensors.emplace("_fsdp_wrapped_module.mean", host<float>(DType::kFloat32, {1}, {0.5f}));
  file.order.push_back("_fsdp_wrapped_module.mean");
  return file;
}

std::vector<float> floats(const CpuTensor& t) {
  std::vector<float> out(t.bytes.size() / sizeof(float));
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

std::string from_text_error(const std::string& text) {
  return error_message<std::invalid_argument>([&] { (void)ShardMetadata::from_text(text); });
}

const std::string kHead = "axle_fsdp_shard_metadata 1\nworld_size 1\nrank 0\nflat f 0 4 0 1 4\n";

TEST(ShardMetadata, TextRoundTrips) {
  const ShardMetadata meta = shard(1).metadata;
  const ShardMetadata back = ShardMetadata::from_text(meta.to_text());
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.rank, 1);
  ASSERT_EQ(back.flat_params.size(), 1u);
  EXPECT_EQ(back.flat_params[0].name, meta.flat_params[0].name);
  EXPECT_EQ(back.flat_params[0].padded_numel, 8);
  ASSERT_EQ(back.flat_params[0].params.size(), 2u);
  EXPECT_EQ(back.flat_params[0].params[1].names, (std::vector<std::string>{"fc.bias", "tied"}));
  EXPECT_EQ(back.flat_params[0].params[1].shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(back.flat_params[0].params[1].offset, 4);
}

TEST(ShardMetadata, ShardsConsolidateUnpaddedUnderEveryName) {
  const ConsolidatedState state = consolidate_shards({shard(1), shard(0)}, "rank-*.ckpt");
  EXPECT_EQ(state.order, (std::vector<std::string>{"fc.weight", "fc.bias", "tied", "mean"}));
  EXPECT_EQ(floats(state.tensors.at("fc.weight")), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(state.tensors.at("fc.weight").shape, (Shape{2, 2}));
  EXPECT_EQ(floats(state.tensors.at("tied")), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(floats(state.tensors.at("mean")), (std::vector<float>{0.5f}));
}

TEST(ShardMetadata, AReplicasFileReadsBack) {
  TempDir dir;
  const ShardFile want = shard(0);
  const std::string text = want.metadata.to_text();
  {
    CheckpointWriter out(dir / "rank-0.ckpt", 3);
    for (const std::string& name : want.order) out.add(name, want.tensors.at(name));
    out.add("shard_metadata", host<int32_t>(DType::kInt32, {static_cast<int64_t>(text.size())},
                                            std::vector<int32_t>(text.begin(), text.end())));
    out.commit();
  }
  const ShardFile got = read_shard_file(dir / "rank-0.ckpt");
  EXPECT_EQ(got.order, want.order);
  EXPECT_EQ(got.metadata.to_text(), text);
  {
    CheckpointWriter out(dir / "plain.ckpt", 1);
    out.add("w", host<float>(DType::kFloat32, {1}, {1}));
    out.commit();
  }
  EXPECT_TRUE(contains(
      error_message<std::invalid_argument>([&] { (void)read_shard_file(dir / "plain.ckpt"); }),
      "has no \"shard_metadata\""));
  EXPECT_THROW((void)read_shard_file(dir / "missing.ckpt"), FileError);
}

// The regressions below were found while fuzzing the sharded checkpoint reader.

// A world size from a damaged file sized a vector of pointers: 2e9 of them asked for 16 GB.
TEST(ShardMetadata, AHugeWorldSizeIsAMissingRankNotAnAllocation) {
  ShardFile file = shard(0);
  file.metadata.world_size = 2'000'000'000;
  const std::string what =
      error_message<std::invalid_argument>([&] { (void)consolidate_shards({file}, "r*"); });
  EXPECT_TRUE(contains(what, "no file of rank 1 of 2000000000")) << what;
}

// offset + numel overflowed int64 (undefined behaviour) and could pass the bounds check.
TEST(ShardMetadata, AParameterOffsetThatOverflowsLiesOutside) {
  std::vector<ShardFile> files = {shard(0), shard(1)};
  for (ShardFile& file : files) {
    ShardedParameterInfo& p = file.metadata.flat_params[0].params[1];
    p.offset = std::numeric_limits<int64_t>::max() - 1;
  }
  const std::string what =
      error_message<std::invalid_argument>([&] { (void)consolidate_shards(files, "r*"); });
  EXPECT_TRUE(contains(what, "\"fc.bias\" lies outside")) << what;
}

TEST(ShardMetadata, ShardsOfAnotherSizeThanPaddedNumelAreRefused) {
  std::vector<ShardFile> files = {shard(0), shard(1)};
  for (ShardFile& file : files) file.metadata.flat_params[0].padded_numel = 6;
  const std::string what =
      error_message<std::invalid_argument>([&] { (void)consolidate_shards(files, "r*"); });
  EXPECT_TRUE(contains(what, "hold 32 bytes, not 6 elements")) << what;
}

// A shape of rank 9 to 16 passed and then threw std::length_error from Shape.
TEST(ShardMetadata, AShapeAboveRank8IsDamage) {
  EXPECT_TRUE(contains(from_text_error(kHead + "param 0 1 9 1 1 1 1 1 1 1 1 1 1 w\n"),
                       "a shape is damaged"));
}

// A numel that did not match the shape made a tensor whose bytes do not fill its shape.
TEST(ShardMetadata, ANumelThatIsNotTheShapesIsDamage) {
  EXPECT_TRUE(
      contains(from_text_error(kHead + "param 0 3 1 2 1 w\n"), "shape does not hold its numel"));
  EXPECT_TRUE(contains(from_text_error(kHead + "param 0 0 3 4294967296 4294967296 0 1 w\n"),
                       "does not fit in 64 bits"));
}

// A name count sized an allocation (1e12 strings), and names cut short were kept empty.
TEST(ShardMetadata, ANameCountBeyondTheTextOrNamesCutShortAreDamage) {
  EXPECT_TRUE(contains(from_text_error(kHead + "param 0 4 1 4 1000000000000 w\n"), "has no name"));
  EXPECT_TRUE(contains(from_text_error(kHead + "param 0 4 1 4 3 w v\n"), "cut short"));
}

TEST(ShardMetadata, NegativeSizesAreDamage) {
  EXPECT_TRUE(contains(
      from_text_error("axle_fsdp_shard_metadata 1\nworld_size 1\nrank 0\nflat f 0 -4 0 1 4\n"),
      "flat parameter's line is damaged"));
  EXPECT_TRUE(contains(from_text_error(kHead + "param -1 4 1 4 1 w\n"), "line is damaged"));
}

}  // namespace
}  // namespace axle
