// Tests graph/formats/atomic_file.h: a committed write replaces the target whole; an abandoned one
// leaves no trace.
#include "axle/graph/formats/atomic_file.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {}));
}

TEST(AtomicFileWriter, CommitReplacesTheTargetAndLeavesNoTemporaryFile) {
  TempDir dir;
  write_file(dir / "out.bin", "old content");
  {
    AtomicFileWriter out(dir / "out.bin");
    out.write("new ");
    out.write("content");
    EXPECT_EQ(entries(dir.path()), 2u);  // the target and the temporary file beside it
    EXPECT_EQ(read_file(dir / "out.bin"),
              std::vector<uint8_t>({'o', 'l', 'd', ' ', 'c', 'o', 'n', 't', 'e', 'n', 't'}));
    out.commit();
  }
  const std::vector<uint8_t> bytes = read_file(dir / "out.bin");
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "new content");
  EXPECT_EQ(entries(dir.path()), 1u);
}

TEST(AtomicFileWriter, WithoutCommitTheTargetIsUntouched) {
  TempDir dir;
  write_file(dir / "out.bin", "old");
  {
    AtomicFileWriter out(dir / "out.bin");
    out.write("half of the n");
  }
  const std::vector<uint8_t> bytes = read_file(dir / "out.bin");
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "old");
  EXPECT_EQ(entries(dir.path()), 1u);
}

TEST(AtomicFileWriter, WritersOfOneTargetInManyThreadsEachWriteTheirOwnFile) {
  TempDir dir;
  constexpr int kWriters = 8;
  std::vector<std::unique_ptr<AtomicFileWriter>> writers(kWriters);
  std::vector<std::thread> threads;
  // All open at once: a temporary name two of them shared would fail one (O_EXCL) or mix them.
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      writers[i] = std::make_unique<AtomicFileWriter>(dir / "out.bin");
      writers[i]->write("writer " + std::to_string(i));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(entries(dir.path()), std::size_t{kWriters});
  for (int i = 0; i < kWriters; ++i) {
    writers[i]->commit();
    const std::vector<uint8_t> bytes = read_file(dir / "out.bin");
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "writer " + std::to_string(i));
  }
  writers.clear();
  EXPECT_EQ(entries(dir.path()), 1u);
}

TEST(AtomicFileWriter, ATargetWithTheLongestNameAFileSystemAllowsIsWritten) {
  TempDir dir;
  const std::string name(255, 'n');  // NAME_MAX: the temporary name must not add to it
  {
    AtomicFileWriter out(dir / name);
    out.write("long");
    out.commit();
  }
  const std::vector<uint8_t> bytes = read_file(dir / name);
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "long");
  EXPECT_EQ(entries(dir.path()), 1u);
}

TEST(AtomicFileWriter, AMissingDirectoryNamesTheTarget) {
  TempDir dir;
  const std::string message =
      error_message<FileError>([&] { AtomicFileWriter out(dir / "no" / "such" / "file"); });
  EXPECT_TRUE(contains(
      message, (dir / "no" / "such" / "file").string() + ": cannot create the temporary file"))
      << message;
}

TEST(AtomicFileWriter, CommittingTwiceIsAnError) {
  TempDir dir;
  AtomicFileWriter out(dir / "f");
  out.commit();
  EXPECT_THROW(out.commit(), FileError);
  EXPECT_THROW(out.write("x"), FileError);
}

}  // namespace
}  // namespace axle
