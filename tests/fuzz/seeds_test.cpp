// The fuzz targets' seed corpora (tests/fuzz/<target>/) are valid files for their readers, so
// that fuzzing starts from inputs that reach past the first check. A format change that breaks
// them fails here: write them again with fuzz_make_seeds (tests/fuzz/README.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "axle/actors/compiler/persistent_cache.h"
#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/event_file.h"
#include "axle/graph/formats/idx.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/graph/formats/shard_metadata.h"
#include "axle/graph/formats/step_commit.h"
#include "tests/fuzz/persistent_cache_input.h"
#include "tests/fuzz/sharded_checkpoint_input.h"
#include "tests/fuzz/step_commit_input.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> seeds(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(AXLE_FUZZ_SEEDS) / target)) {
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(FuzzSeedsTest, IdxSeedsRead) {
  const auto files = seeds("idx");
  ASSERT_GE(files.size(), 3u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const IdxArray array = read_idx_array(file);
    EXPECT_EQ(array.bytes.size(),
              static_cast<std::size_t>(array.shape.numel()) * idx_type_size(array.type));
  }
}

TEST(FuzzSeedsTest, EventFileSeedsRead) {
  const auto files = seeds("event_file");
  ASSERT_GE(files.size(), 1u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const EventFile events = read_event_file(file);
    EXPECT_EQ(events.file_version, "brain.Event:2");
    EXPECT_FALSE(events.values.empty());
  }
}

TEST(FuzzSeedsTest, SafetensorsSeedsLoad) {
  const auto files = seeds("safetensors");
  ASSERT_GE(files.size(), 2u);
  std::size_t tensors = 0;
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    tensors += load_safetensors(file).size();
  }
  EXPECT_GT(tensors, 0u);
}

TEST(FuzzSeedsTest, CheckpointSeedsRead) {
  const auto files = seeds("checkpoint");
  ASSERT_GE(files.size(), 1u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    CheckpointReader in(file);
    uint64_t count = 0;
    while (in.next()) ++count;
    EXPECT_EQ(count, in.tensor_count());
  }
}

// The step_commit seeds: one commits the target's step directory as it is; the other lists a
// file it does not hold, which the check names.
TEST(FuzzSeedsTest, StepCommitSeedsCheck) {
  const fs::path dir =
      fs::temp_directory_path() / ("axle-seeds-step-" + std::to_string(::getpid()));
  fuzz::make_step_directory(dir);
  fs::copy_file(fs::path(AXLE_FUZZ_SEEDS) / "step_commit" / "whole.json", dir / kStepCommitFile,
                fs::copy_options::overwrite_existing);
  EXPECT_NO_THROW(check_step_commit(dir));
  fs::copy_file(fs::path(AXLE_FUZZ_SEEDS) / "step_commit" / "missing_file.json",
                dir / kStepCommitFile, fs::copy_options::overwrite_existing);
  try {
    check_step_commit(dir);
    ADD_FAILURE() << "a commit file listing a missing file passed";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("rng.0.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(seeds("step_commit").size(), 2U);
  fs::remove_all(dir);
}

TEST(FuzzSeedsTest, ShardedCheckpointSeedsConsolidate) {
  const auto files = seeds("sharded_checkpoint");
  ASSERT_GE(files.size(), 1u);
  const fs::path dir =
      fs::temp_directory_path() / ("axle-seeds-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const std::string bytes = read_bytes(file);
    if (bytes.starts_with(fuzz::kTextMode)) {  // metadata texts alone
      for (std::string_view text : fuzz::split_shard_files(bytes)) {
        EXPECT_FALSE(ShardMetadata::from_text(std::string(text)).flat_params.empty());
      }
      continue;
    }
    std::vector<ShardFile> shards;
    int i = 0;
    for (std::string_view part : fuzz::split_shard_files(bytes)) {
      const fs::path path = dir / ("rank" + std::to_string(i++) + ".ckpt");
      std::ofstream(path, std::ios::binary)
          .write(part.data(), static_cast<std::streamsize>(part.size()));
      shards.push_back(read_shard_file(path));
    }
    const ConsolidatedState state = consolidate_shards(shards, "rank*.ckpt");
    EXPECT_FALSE(state.order.empty());
  }
  fs::remove_all(dir);
}

TEST(FuzzSeedsTest, PersistentCacheSeedsLoad) {
  const auto files = seeds("persistent_cache");
  ASSERT_GE(files.size(), 2u);
  std::size_t entries = 0;
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    const std::string bytes = read_bytes(file);
    ASSERT_FALSE(bytes.empty());
    if (bytes[0] & fuzz::kWrapProgram) continue;  // a bare program, wrapped by the fuzz target
    ++entries;
    std::string why;
    const ProgramInterface expected = fuzz::seed_interface();
    EXPECT_TRUE(
        PersistentCache::decode_entry(bytes.substr(1), fuzz::kSeedHash,
                                      (bytes[0] & fuzz::kWithInterface) ? &expected : nullptr, why))
        << why;
  }
  EXPECT_GT(entries, 0u);
}

}  // namespace
}  // namespace axle
