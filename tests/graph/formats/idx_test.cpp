// Tests graph/formats/idx.h: reading IDX files, plain and gzip, and the errors for damaged ones.
#include "axle/graph/formats/idx.h"

#include <gtest/gtest.h>

#include <cstring>

#include "axle/graph/formats/error.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;
using testing::gzip;
using testing::TempDir;
using testing::write_file;

// An IDX file: magic (0, 0, type, rank), big-endian dimensions, then `elements` as given.
std::vector<uint8_t> idx_bytes(uint8_t type, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& elements) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), elements.begin(), elements.end());
  return out;
}

TEST(Idx, ReadsPlainU8FileAsU8) {
  TempDir dir;
  write_file(dir / "a-idx2-ubyte", idx_bytes(0x08, {2, 3}, {0, 1, 2, 127, 128, 255}));
  const CpuTensor t = read_idx(dir / "a-idx2-ubyte");
  EXPECT_EQ(t.dtype, DType::kUInt8);
  EXPECT_EQ(t.shape, (Shape{2, 3}));
  EXPECT_EQ(t.values<uint8_t>(), (std::vector<uint8_t>{0, 1, 2, 127, 128, 255}));
}

TEST(Idx, ReadsGzipFileAsThePlainOne) {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {4}, {9, 8, 7, 6});
  write_file(dir / "a", bytes);
  write_file(dir / "a.gz", gzip(bytes));
  const IdxArray plain = read_idx_array(dir / "a");
  const IdxArray compressed = read_idx_array(dir / "a.gz");
  EXPECT_EQ(compressed.type, IdxType::kU8);
  EXPECT_EQ(compressed.shape, (Shape{4}));
  EXPECT_EQ(compressed.bytes, plain.bytes);
}

TEST(Idx, TellsGzipFromPlainByContentNotName) {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {2}, {1, 2});
  write_file(dir / "plain.gz", bytes);
  write_file(dir / "compressed", gzip(bytes));
  EXPECT_EQ(read_idx(dir / "plain.gz").values<uint8_t>(), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(read_idx(dir / "compressed").values<uint8_t>(), (std::vector<uint8_t>{1, 2}));
}

TEST(Idx, ConvertsBigEndianElementsToHostOrder) {
  TempDir dir;
  // i16 -2 and 258; f32 1.5 (0x3fc00000) big-endian.
  write_file(dir / "i16", idx_bytes(0x0B, {2}, {0xff, 0xfe, 0x01, 0x02}));
  write_file(dir / "f32", idx_bytes(0x0D, {1}, {0x3f, 0xc0, 0x00, 0x00}));
  write_file(dir / "s8", idx_bytes(0x09, {2}, {0xff, 0x05}));
  write_file(dir / "i32", idx_bytes(0x0C, {1}, {0xff, 0xff, 0xff, 0xfd}));
  const CpuTensor i16 = read_idx(dir / "i16");
  EXPECT_EQ(i16.dtype, DType::kInt16);
  EXPECT_EQ(i16.values<int16_t>(), (std::vector<int16_t>{-2, 258}));
  const CpuTensor i32 = read_idx(dir / "i32");
  EXPECT_EQ(i32.dtype, DType::kInt32);
  EXPECT_EQ(i32.values<int32_t>(), (std::vector<int32_t>{-3}));
  const CpuTensor f = read_idx(dir / "f32");
  EXPECT_EQ(f.dtype, DType::kFloat32);
  EXPECT_EQ(f.values<float>(), (std::vector<float>{1.5f}));
  const CpuTensor s8 = read_idx(dir / "s8");
  EXPECT_EQ(s8.dtype, DType::kInt8);
  EXPECT_EQ(s8.values<int8_t>(), (std::vector<int8_t>{-1, 5}));
}

TEST(Idx, ConvertsToTheRequestedDTypeWithoutScaling) {
  TempDir dir;
  write_file(dir / "a", idx_bytes(0x08, {3}, {0, 3, 255}));
  const CpuTensor f = read_idx(dir / "a", DType::kFloat32);
  EXPECT_EQ(f.dtype, DType::kFloat32);
  EXPECT_EQ(f.values<float>(), (std::vector<float>{0, 3, 255}));
  const CpuTensor l = read_idx(dir / "a", DType::kInt64);
  EXPECT_EQ(l.values<int64_t>(), (std::vector<int64_t>{0, 3, 255}));
}

TEST(Idx, MissingFileIsNamed) {
  TempDir dir;
  const std::string message =
      error_message<FileError>([&] { (void)read_idx(dir / "nothing-idx1-ubyte.gz"); });
  EXPECT_TRUE(contains(message, "nothing-idx1-ubyte.gz: no such file")) << message;
}

TEST(Idx, EmptyFileIsReported) {
  TempDir dir;
  write_file(dir / "empty", std::vector<uint8_t>{});
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "empty"); });
  EXPECT_TRUE(contains(message, "empty: empty file")) << message;
}

TEST(Idx, BadMagicNumberIsReported) {
  TempDir dir;
  write_file(dir / "bad", std::vector<uint8_t>{'P', 'K', 3, 4, 0, 0, 0, 0});
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "bad"); });
  EXPECT_TRUE(contains(message, "bad: not an IDX file: magic number 0x504b0304")) << message;
}

TEST(Idx, UnknownElementTypeIsReported) {
  TempDir dir;
  write_file(dir / "bad", idx_bytes(0x0A, {1}, {0}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "bad"); });
  EXPECT_TRUE(contains(message, "unknown IDX element type 0x0a")) << message;
}

TEST(Idx, RankAboveEightIsReported) {
  TempDir dir;
  write_file(dir / "bad", idx_bytes(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {0}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "bad"); });
  EXPECT_TRUE(contains(message, "rank 9")) << message;
}

TEST(Idx, TruncatedDimensionsAreReported) {
  TempDir dir;
  write_file(dir / "bad", std::vector<uint8_t>{0, 0, 8, 3, 0, 0, 0, 2, 0, 0});
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "bad"); });
  EXPECT_TRUE(contains(message, "truncated: the header declares 3 dimensions")) << message;
}

TEST(Idx, TruncatedElementsAreReportedPlainAndGzip) {
  TempDir dir;
  const auto bytes = idx_bytes(0x08, {2, 28, 28}, std::vector<uint8_t>(1000, 7));
  write_file(dir / "short", bytes);
  write_file(dir / "short.gz", gzip(bytes));
  for (const char* name : {"short", "short.gz"}) {
    const std::string message = error_message<FileError>([&] { (void)read_idx(dir / name); });
    EXPECT_TRUE(contains(message, std::string(name) +
                                      ": truncated: shape [2,28,28] of u8 needs "
                                      "1568 bytes of elements, the file holds 1000"))
        << message;
  }
}

TEST(Idx, CutOffGzipStreamIsReported) {
  TempDir dir;
  std::vector<uint8_t> compressed = gzip(idx_bytes(0x08, {64, 64}, std::vector<uint8_t>(4096, 1)));
  compressed.resize(compressed.size() / 2);
  write_file(dir / "cut.gz", compressed);
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "cut.gz"); });
  EXPECT_TRUE(contains(message, "cut.gz: truncated: the gzip stream ends")) << message;
}

TEST(Idx, DataAfterTheElementsIsReported) {
  TempDir dir;
  write_file(dir / "long", idx_bytes(0x08, {2}, {1, 2, 3}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "long"); });
  EXPECT_TRUE(contains(message, "long: unexpected data after the 2 bytes")) << message;
}

TEST(Idx, HugeDeclaredShapeReadsAsTruncatedNotAsAnAllocation) {
  TempDir dir;
  write_file(dir / "huge", idx_bytes(0x08, {0x7fffffff, 0x7fffffff}, {1, 2, 3}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "huge"); });
  EXPECT_TRUE(contains(message, "huge: truncated: shape [2147483647,2147483647] of u8")) << message;
}

TEST(Idx, ShapeBeyondAddressableMemoryIsReported) {
  TempDir dir;
  write_file(dir / "huge", idx_bytes(0x0E, {0xffffffff, 0xffffffff}, {1, 2, 3}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "huge"); });
  EXPECT_TRUE(contains(message, "huge: shape [4294967295,4294967295] is too large")) << message;
}

// Found by fuzzing: dimensions whose product passes 2^63 before a 0 dimension brings it back to 0
// made a shape whose numel() overflows int64 (it multiplies in order), read as an empty array.
TEST(Idx, ShapeWhoseProductOverflowsBeforeAZeroIsReported) {
  TempDir dir;
  write_file(dir / "zero", idx_bytes(0x0D, {2, 0x800000c0, 0xc0080e00, 0}, {}));
  const std::string message = error_message<FileError>([&] { (void)read_idx(dir / "zero"); });
  EXPECT_TRUE(contains(message, "zero: shape [2,2147483840,3221753344,0] is too large")) << message;
  // A 0 first keeps every product at 0: that file is an empty array.
  write_file(dir / "empty", idx_bytes(0x0D, {0, 0x800000c0, 0xc0080e00}, {}));
  EXPECT_EQ(read_idx_array(dir / "empty").shape, (Shape{0, 0x800000c0, 0xc0080e00}));
}

}  // namespace
}  // namespace axle
