// SummaryWriter and TensorBoard event files: CRC-32C against its published check value, scalars
// and histograms read back through the record reader (every CRC checked), and damage refused.
#include "axle/io/summary_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "axle/axle.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/event_file.h"

namespace axle {
namespace {

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("axle_summary_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(EventFile, Crc32cMatchesItsCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(std::as_bytes(std::span<const char>(check.data(), check.size()))), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
}

TEST(SummaryWriter, ScalarsAndHistogramsReadBack) {
  const auto dir = scratch("read_back");
  std::filesystem::path file;
  {
    SummaryWriter writer(dir);
    file = writer.file();
    EXPECT_EQ(file.parent_path(), dir);
    EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u) << file;
    for (int step = 1; step <= 3; ++step) writer.add_scalar("train/loss", 2.0 / step, step);
    writer.add_scalar("train/lr", tensor(std::vector<float>{0.125f}, {}), 3);
    writer.add_histogram("weights", tensor(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, {2, 4}), 3,
                         /*bins=*/4);
    writer.close();
    EXPECT_THROW(writer.add_scalar("late", 1.0), std::logic_error);
  }
  const EventFile read = read_event_file(file);
  EXPECT_EQ(read.file_version, "brain.Event:2");
  ASSERT_EQ(read.values.size(), 5u);
  for (int step = 1; step <= 3; ++step) {
    const EventValue& v = read.values[step - 1];
    EXPECT_EQ(v.tag, "train/loss");
    EXPECT_EQ(v.step, step);
    EXPECT_FLOAT_EQ(v.value, static_cast<float>(2.0 / step));
    EXPECT_GT(v.wall_time, 1.7e9);  // seconds since 1970, now
  }
  EXPECT_EQ(read.values[3].tag, "train/lr");
  EXPECT_DOUBLE_EQ(read.values[3].value, 0.125);
  const EventValue& h = read.values[4];
  EXPECT_TRUE(h.histogram);
  EXPECT_EQ(h.count, 8);
  EXPECT_EQ(h.value, 28);  // the sum
  EXPECT_EQ(h.bucket, (std::vector<double>{2, 2, 2, 2}));
  EXPECT_EQ(h.bucket_limit.back(), 7);
  std::filesystem::remove_all(dir);
}

TEST(SummaryWriter, DamagedRecordsAreRefusedWithTheirOffset) {
  const auto dir = scratch("damage");
  std::filesystem::path file;
  {
    SummaryWriter writer(dir);
    writer.add_scalar("loss", 1.5, 1);
    file = writer.file();
  }
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto parse = [&](const std::string& b) {
    return parse_event_records(std::as_bytes(std::span<const char>(b.data(), b.size())), file);
  };
  EXPECT_EQ(parse(bytes).values.size(), 1u);
  std::string flipped = bytes;
  flipped[flipped.size() - 6] ^= 0x10;  // inside the last record's data
  try {
    (void)parse(flipped);
    FAIL() << "expected FileError";
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("CRC does not match"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)parse(bytes.substr(0, bytes.size() - 3)), FileError);
  EXPECT_THROW((void)read_event_file(dir / "missing"), FileError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace axle
