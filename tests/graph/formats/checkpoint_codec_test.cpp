// Tests graph/formats/checkpoint_codec.h: the checkpoint file format on host tensors alone (no
// device): round trips, the exact bytes of a file against a plain encoder, entries read one at a
// time, an error naming the file and the key for each kind of damage, and the old file kept by a
// writer that never commits.
#include "axle/graph/formats/checkpoint_codec.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "axle/engine/element.h"
#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::host;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::vector<CheckpointEntry> sample() {
  return {
      {"fc.weight", host<float>(DType::kFloat32, {2, 3}, {1.5f, -2, 0, 3e38f, -1e-30f, 7})},
      {"fc.bias", host<double>(DType::kFloat64, {2}, {3.141592653589793, -1e300})},
      {"half", host<uint16_t>(
                   DType::kBFloat16, {1, 3},
                   {float_to_bf16_bits(1), float_to_bf16_bits(-2.5f), float_to_bf16_bits(1e20f)})},
      {"index", host<int32_t>(DType::kInt32, {1, 2, 2}, {-1, 2, INT32_MIN, INT32_MAX})},
      {"steps", host<int64_t>(DType::kInt64, {}, {int64_t{1} << 40})},
      {"mask", host<uint8_t>(DType::kBool, {4}, {1, 0, 0, 1})},
      {"empty", host<float>(DType::kFloat32, {0, 4}, {})},
  };
}

void write_checkpoint(const fs::path& path, const std::vector<CheckpointEntry>& entries) {
  CheckpointWriter out(path, entries.size());
  for (const CheckpointEntry& entry : entries) out.add(entry.name, entry.tensor);
  out.commit();
}

std::vector<CheckpointEntry> read_checkpoint(const fs::path& path) {
  CheckpointReader in(path);
  std::vector<CheckpointEntry> entries;
  while (std::optional<CheckpointEntry> entry = in.next()) entries.push_back(std::move(*entry));
  return entries;
}

void expect_same(const std::vector<CheckpointEntry>& got,
                 const std::vector<CheckpointEntry>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].tensor.dtype, want[i].tensor.dtype) << want[i].name;
    EXPECT_EQ(got[i].tensor.shape, want[i].tensor.shape) << want[i].name;
    EXPECT_EQ(got[i].tensor.bytes, want[i].tensor.bytes) << want[i].name;
  }
}

std::size_t files_in(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {}));
}

// Where `pattern` first occurs in `bytes`.
std::size_t find(const std::vector<uint8_t>& bytes, const std::vector<uint8_t>& pattern) {
  const auto at = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  EXPECT_NE(at, bytes.end());
  return static_cast<std::size_t>(at - bytes.begin());
}

TEST(CheckpointCodec, RoundTripsEveryDTypeAndShapeInOrder) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", sample());
  CheckpointReader in(dir / "model.axle");
  EXPECT_EQ(in.tensor_count(), sample().size());
  expect_same(read_checkpoint(dir / "model.axle"), sample());
  EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(CheckpointCodec, RoundTripsTheStorageOnlyDTypes) {
  TempDir dir;
  const std::vector<CheckpointEntry> small = {
      {"f16", host<uint16_t>(DType::kFloat16, {3}, {0x3c00, 0x7e00, 0x8001})},
      {"s8", host<int8_t>(DType::kInt8, {2}, {-128, 127})},
      {"u8", host<uint8_t>(DType::kUInt8, {2, 1}, {0, 255})},
      {"s16", host<int16_t>(DType::kInt16, {2}, {-32768, 32767})},
  };
  write_checkpoint(dir / "small.axle", small);
  expect_same(read_checkpoint(dir / "small.axle"), small);
}

TEST(CheckpointCodec, AnEmptyCheckpointRoundTrips) {
  TempDir dir;
  write_checkpoint(dir / "none.axle", {});
  EXPECT_TRUE(read_checkpoint(dir / "none.axle").empty());
}

// A protobuf length-delimited field of fewer than 128 bytes: tag, length, bytes.
void add_field(std::vector<uint8_t>& out, uint8_t tag, std::string_view bytes) {
  out.push_back(tag);
  out.push_back(static_cast<uint8_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

// `message` preceded by its length as 8 little-endian bytes.
void add_framed(std::vector<uint8_t>& out, const std::vector<uint8_t>& message) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(message.size() >> (8 * i)));
  out.insert(out.end(), message.begin(), message.end());
}

// The format by hand (graph/formats/checkpoint.proto): fields encoded as protobuf encodes them,
// each tensor's bytes guarded by their CRC-32 (zlib's) or, in files written before it, by their
// 64-bit FNV-1a. `fnv` picks the latter.
std::vector<uint8_t> documented_bytes(const std::vector<uint8_t>& data, bool fnv) {
  std::vector<uint8_t> header;
  add_field(header, 0x0a, "axle checkpoint");    // magic
  add_field(header, 0x12, AXLE_VERSION_STRING);  // axle_version
  header.insert(header.end(), {0x18, 0x01});     // tensor_count 1
  std::vector<uint8_t> meta;
  add_field(meta, 0x0a, "w");                               // name
  add_field(meta, 0x12, "f32");                             // dtype
  meta.insert(meta.end(), {0x1a, 0x01, 0x02, 0x20, 0x08});  // dims [2] (packed), byte_size 8
  if (fnv) {
    uint64_t sum = 0xcbf29ce484222325ULL;
    for (uint8_t b : data) sum = (sum ^ b) * 0x100000001b3ULL;
    meta.push_back(0x29);  // checksum, fixed64
    for (int i = 0; i < 8; ++i) meta.push_back(static_cast<uint8_t>(sum >> (8 * i)));
  } else {
    const auto crc =
        static_cast<uint32_t>(::crc32(0L, data.data(), static_cast<uInt>(data.size())));
    meta.push_back(0x35);  // crc32, fixed32
    for (int i = 0; i < 4; ++i) meta.push_back(static_cast<uint8_t>(crc >> (8 * i)));
  }
  std::vector<uint8_t> out;
  add_framed(out, header);
  add_framed(out, meta);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> two_floats() {
  std::vector<uint8_t> data(8);
  const float values[] = {1.0f, 2.0f};
  std::memcpy(data.data(), values, data.size());
  return data;
}

TEST(CheckpointCodec, WritesTheDocumentedBytes) {
  TempDir dir;
  write_checkpoint(dir / "w.axle", {{"w", host<float>(DType::kFloat32, {2}, {1.0f, 2.0f})}});
  EXPECT_EQ(read_file(dir / "w.axle"), documented_bytes(two_floats(), /*fnv=*/false));
}

// A file written before the CRC-32 reads back, and its FNV-1a still finds a flipped byte.
TEST(CheckpointCodec, FilesOfTheEarlierChecksumStillReadAndAreChecked) {
  TempDir dir;
  std::vector<uint8_t> bytes = documented_bytes(two_floats(), /*fnv=*/true);
  write_file(dir / "old.axle", bytes);
  expect_same(read_checkpoint(dir / "old.axle"),
              {{"w", host<float>(DType::kFloat32, {2}, {1.0f, 2.0f})}});
  bytes[bytes.size() - 3] ^= 0x10;
  write_file(dir / "old.axle", bytes);
  const std::string what =
      error_message<FileError>([&] { (void)read_checkpoint(dir / "old.axle"); });
  EXPECT_TRUE(contains(what, "key \"w\": checksum")) << what;
}

TEST(CheckpointCodec, EntriesAreReadOneAtATimeAndCheckedWhenReached) {
  TempDir dir;
  std::vector<CheckpointEntry> entries = {
      {"first", host<float>(DType::kFloat32, {2}, {1, 2})},
      {"second", host<uint8_t>(DType::kBool, {6}, {0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0xa5})}};
  write_checkpoint(dir / "model.axle", entries);
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes[find(bytes, std::vector<uint8_t>(6, 0xa5)) + 2] ^= 0x01;
  write_file(dir / "model.axle", bytes);

  CheckpointReader in(dir / "model.axle");
  std::optional<CheckpointEntry> first = in.next();
  ASSERT_TRUE(first.has_value());
  expect_same({*first}, {entries[0]});
  const std::string what = error_message<FileError>([&] { (void)in.next(); });
  EXPECT_TRUE(contains(what, (dir / "model.axle").string() + ": key \"second\": checksum")) << what;
}

TEST(CheckpointCodec, EveryTruncationIsAnErrorNamingTheFile) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", sample());
  const std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  for (std::size_t keep = 0; keep < bytes.size(); ++keep) {
    write_file(dir / "cut.axle", std::vector<uint8_t>(bytes.begin(), bytes.begin() + keep));
    const std::string what =
        error_message<FileError>([&] { (void)read_checkpoint(dir / "cut.axle"); });
    ASSERT_TRUE(contains(what, (dir / "cut.axle").string() + ": ")) << keep << ": " << what;
  }
}

TEST(CheckpointCodec, ATruncatedTensorNamesItsKey) {
  TempDir dir;
  write_checkpoint(dir / "model.axle",
                   {{"a", host<float>(DType::kFloat32, {2}, {1, 2})},
                    {"layer.weight", host<double>(DType::kFloat64, {3}, {1, 2, 3})}});
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes.resize(bytes.size() - 5);  // inside the last tensor's 24 bytes
  write_file(dir / "model.axle", bytes);
  const std::string what =
      error_message<FileError>([&] { (void)read_checkpoint(dir / "model.axle"); });
  EXPECT_TRUE(contains(what, "truncated: key \"layer.weight\" needs 24 bytes, 19 remain")) << what;
}

TEST(CheckpointCodec, AnUnknownDTypeNamesTheKey) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", {{"w", host<float>(DType::kFloat32, {1}, {1})}});
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes[find(bytes, {'f', '3', '2'})] = 'q';  // same length: the description still parses
  write_file(dir / "model.axle", bytes);
  const std::string what =
      error_message<FileError>([&] { (void)read_checkpoint(dir / "model.axle"); });
  EXPECT_TRUE(contains(what, "key \"w\": unknown dtype \"q32\"")) << what;
}

// Found by fuzzing: names were proto3 strings, so a dtype damaged into bytes that are not UTF-8
// made the protobuf library log to stderr before the reader refused the file.
TEST(CheckpointCodec, ADTypeDamagedIntoNonUtf8BytesIsRefusedQuietly) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", {{"w", host<float>(DType::kFloat32, {1}, {1})}});
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes[find(bytes, {'f', '3', '2'})] = 0xff;
  write_file(dir / "model.axle", bytes);
  ::testing::internal::CaptureStderr();
  const std::string what =
      error_message<FileError>([&] { (void)read_checkpoint(dir / "model.axle"); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(contains(what, "key \"w\": unknown dtype \"\\xff32\"")) << what;
}

// A key is any bytes, as the writer takes it: one that is not UTF-8 reads back (a proto3 string
// wrote it with a logged error and made the file unreadable).
TEST(CheckpointCodec, AKeyThatIsNotUtf8RoundTrips) {
  TempDir dir;
  const std::vector<CheckpointEntry> entries = {
      {std::string("w\xff\xfe"), host<float>(DType::kFloat32, {1}, {1})}};
  ::testing::internal::CaptureStderr();
  write_checkpoint(dir / "model.axle", entries);
  const std::vector<CheckpointEntry> got = read_checkpoint(dir / "model.axle");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  expect_same(got, entries);
}

TEST(CheckpointCodec, DimsThatDoNotMatchTheByteSizeNameTheKey) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", {{"w", host<float>(DType::kFloat32, {2}, {1, 2})}});
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes[find(bytes, {0x1a, 0x01, 0x02}) + 2] = 0x03;  // dims [3] for 8 bytes
  write_file(dir / "model.axle", bytes);
  const std::string what =
      error_message<FileError>([&] { (void)read_checkpoint(dir / "model.axle"); });
  EXPECT_TRUE(contains(what, "key \"w\": dims [3] do not fit its 8 bytes")) << what;
}

TEST(CheckpointCodec, AnotherFormatAndTrailingBytesAreRefused) {
  TempDir dir;
  write_file(dir / "other.axle", std::string_view("\x05\0\0\0\0\0\0\0hello", 13));
  std::string what = error_message<FileError>([&] { CheckpointReader in(dir / "other.axle"); });
  EXPECT_TRUE(contains(what, "other.axle: ")) << what;

  write_checkpoint(dir / "model.axle", {{"w", host<float>(DType::kFloat32, {1}, {1})}});
  std::vector<uint8_t> bytes = read_file(dir / "model.axle");
  bytes.push_back(0);
  write_file(dir / "model.axle", bytes);
  what = error_message<FileError>([&] { (void)read_checkpoint(dir / "model.axle"); });
  EXPECT_TRUE(contains(what, "model.axle: damaged: bytes after the last tensor")) << what;
}

TEST(CheckpointCodec, AMissingFileNamesIt) {
  TempDir dir;
  const std::string what =
      error_message<FileError>([&] { CheckpointReader in(dir / "absent.axle"); });
  EXPECT_EQ(what, (dir / "absent.axle").string() + ": cannot be opened");
}

TEST(CheckpointCodec, AWriterDestroyedWithoutCommitLeavesTheOldFileUntouched) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", sample());
  const std::vector<uint8_t> old = read_file(dir / "model.axle");
  {
    CheckpointWriter out(dir / "model.axle", 2);
    out.add("only", host<float>(DType::kFloat32, {1}, {5}));
    EXPECT_EQ(files_in(dir.path()), 2u);  // the old file and the new one being written
  }
  EXPECT_EQ(read_file(dir / "model.axle"), old);
  EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(CheckpointCodec, CommittingFewerTensorsThanAnnouncedIsAnError) {
  TempDir dir;
  write_checkpoint(dir / "model.axle", sample());
  const std::vector<uint8_t> old = read_file(dir / "model.axle");
  CheckpointWriter out(dir / "model.axle", 2);
  out.add("only", host<float>(DType::kFloat32, {1}, {5}));
  const std::string what = error_message<FileError>([&] { out.commit(); });
  EXPECT_TRUE(contains(what, "model.axle: 1 of the 2 announced tensors were written")) << what;
  EXPECT_EQ(read_file(dir / "model.axle"), old);
}

TEST(CheckpointCodec, AddingMoreThanAnnouncedNamesTheKey) {
  TempDir dir;
  CheckpointWriter out(dir / "model.axle", 1);
  out.add("a", host<float>(DType::kFloat32, {1}, {5}));
  const std::string what =
      error_message<FileError>([&] { out.add("b", host<float>(DType::kFloat32, {1}, {6})); });
  EXPECT_TRUE(contains(what, "key \"b\": one tensor more than the 1 announced")) << what;
}

TEST(CheckpointCodec, BytesThatDoNotHoldTheShapeNameTheKey) {
  TempDir dir;
  CheckpointWriter out(dir / "model.axle", 1);
  const std::string what = error_message<FileError>([&] {
    out.add("w", host<float>(DType::kFloat32, {2, 2}, {1, 2, 3}));
  });
  EXPECT_TRUE(contains(what, "key \"w\": 12 bytes do not hold f32[2,2]")) << what;
}

}  // namespace
}  // namespace axle
