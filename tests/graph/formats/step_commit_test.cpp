// A step directory's commit file: every file listed with its size and CRC-32, a damaged or
// missing file found by name, and summaries a writer summed as it wrote (CheckpointWriter's)
// taken as given: the same commit file as reading the files back.
#include "axle/graph/formats/step_commit.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <map>
#include <string>
#include <vector>

#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

// A step's directory: a checkpoint file of two tensors and a small text file; returns the
// checkpoint writer's summary of its file.
StepFileSummary write_step(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  CheckpointWriter out(dir / "tensors.ckpt", 2);
  out.add("a", CpuTensor(std::vector<float>{1, 2, 3}, {3}));
  out.add("b", CpuTensor(std::vector<int64_t>(1000, 7), {10, 100}));
  out.commit();
  write_file(dir / "state.json", std::vector<uint8_t>{'{', '}'});
  return {.bytes = out.bytes_written(), .crc32 = out.file_crc32()};
}

TEST(StepCommit, ACheckpointWritersSummaryIsItsFilesSizeAndCrc) {
  TempDir dir;
  const StepFileSummary summary = write_step(dir / "1");
  const std::vector<uint8_t> bytes = read_file(dir / "1" / "tensors.ckpt");
  EXPECT_EQ(summary.bytes, bytes.size());
  EXPECT_EQ(summary.crc32,
            static_cast<uint32_t>(::crc32(0L, bytes.data(), static_cast<uInt>(bytes.size()))));
}

TEST(StepCommit, AKnownSummaryGivesTheCommitFileOfReadingTheFileBack) {
  TempDir dir;
  const StepFileSummary summary = write_step(dir / "1");
  write_step_commit(dir / "1", 1, 2);
  const std::vector<uint8_t> read_back = read_file(dir / "1" / kStepCommitFile);
  write_step_commit(dir / "1", 1, 2, {{"tensors.ckpt", summary}});
  EXPECT_EQ(read_file(dir / "1" / kStepCommitFile), read_back);
  check_step_commit(dir / "1");
}

TEST(StepCommit, AKnownSummaryIsTakenAsGivenAndAWrongOneIsFoundByTheCheck) {
  TempDir dir;
  StepFileSummary summary = write_step(dir / "1");
  summary.crc32 ^= 1;
  write_step_commit(dir / "1", 1, 1, {{"tensors.ckpt", summary}});
  const std::string what = error_message<FileError>([&] { check_step_commit(dir / "1"); });
  EXPECT_TRUE(contains(what, "tensors.ckpt")) << what;
}

TEST(StepCommit, ADamagedFileIsFoundByName) {
  TempDir dir;
  (void)write_step(dir / "1");
  write_step_commit(dir / "1", 1, 1);
  std::vector<uint8_t> bytes = read_file(dir / "1" / "tensors.ckpt");
  bytes[bytes.size() / 2] ^= 0x40;
  write_file(dir / "1" / "tensors.ckpt", bytes);
  const std::string what = error_message<FileError>([&] { check_step_commit(dir / "1"); });
  EXPECT_TRUE(contains(what, "tensors.ckpt")) << what;
}

// Sizes and checksums that are not integers in range (JSON reads 1e24 as a double) are refused
// by name, before any conversion.
TEST(StepCommit, ASizeOrChecksumOutOfRangeIsRefusedByName) {
  TempDir dir;
  (void)write_step(dir / "1");
  for (const std::string& field :
       {std::string(R"("bytes": 1111111111111111111111114, "crc32": 1)"),
        std::string(R"("bytes": -3, "crc32": 1)"), std::string(R"("bytes": 2.5, "crc32": 1)"),
        std::string(R"("bytes": 10, "crc32": 4294967296)")}) {
    const std::string text =
        R"({"step": 1, "replicas": 1, "files": {"tensors.ckpt": {)" + field + "}}}";
    write_file(dir / "1" / kStepCommitFile, std::vector<uint8_t>(text.begin(), text.end()));
    const std::string what = error_message<FileError>([&] { check_step_commit(dir / "1"); });
    EXPECT_TRUE(contains(what, "tensors.ckpt")) << what;
    EXPECT_TRUE(contains(what, "not an integer from 0 to")) << what;
  }
}

}  // namespace
}  // namespace axle
