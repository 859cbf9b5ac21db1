// Tests graph/formats/safetensors.h: round trips, the exact bytes of the format, and damaged files.
#include "axle/graph/formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

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

// The file the format describes: 8-byte little-endian header length, header, data.
std::vector<uint8_t> safetensors_bytes(std::string_view header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void expect_same(const CpuTensorMap& a, const CpuTensorMap& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.contains(name)) << name;
    const CpuTensor& u = b.at(name);
    EXPECT_EQ(t.dtype, u.dtype) << name;
    EXPECT_EQ(t.shape, u.shape) << name;
    EXPECT_EQ(t.bytes, u.bytes) << name;
  }
}

TEST(Safetensors, RoundTripsEveryDType) {
  TempDir dir;
  const CpuTensorMap tensors = {
      {"f32", host<float>(DType::kFloat32, {2, 3}, {1.5f, -2, 0, 3e38f, -1e-30f, 7})},
      {"f64", host<double>(DType::kFloat64, {2}, {3.141592653589793, -1e300})},
      {"bf16", host<uint16_t>(
                   DType::kBFloat16, {3},
                   {float_to_bf16_bits(1), float_to_bf16_bits(-2.5f), float_to_bf16_bits(1e20f)})},
      {"i32", host<int32_t>(DType::kInt32, {1, 2, 2}, {-1, 2, INT32_MIN, INT32_MAX})},
      {"i64", host<int64_t>(DType::kInt64, {}, {int64_t{1} << 40})},
      {"bool", host<uint8_t>(DType::kBool, {4}, {1, 0, 0, 1})},
      {"empty", host<float>(DType::kFloat32, {0, 5}, {})},
  };
  save_safetensors(dir / "all.safetensors", tensors);
  expect_same(load_safetensors(dir / "all.safetensors"), tensors);
}

TEST(Safetensors, RoundTripsMetadata) {
  TempDir dir;
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"step", "1200"}};
  save_safetensors(dir / "m.safetensors", {{"w", host<float>(DType::kFloat32, {1}, {2})}},
                   metadata);
  EXPECT_EQ(load_safetensors_metadata(dir / "m.safetensors"), metadata);
  save_safetensors(dir / "none.safetensors", {{"w", host<float>(DType::kFloat32, {1}, {2})}});
  EXPECT_TRUE(load_safetensors_metadata(dir / "none.safetensors").empty());
}

// The reference implementation's own test vector (safetensors/src/tensor.rs,
// test_serialization): one f32 [1,2,3] tensor named "attn.0" holding 0 to 5.
TEST(Safetensors, WritesTheReferenceImplementationsBytes) {
  TempDir dir;
  save_safetensors(dir / "ref.safetensors",
                   {{"attn.0", host<float>(DType::kFloat32, {1, 2, 3}, {0, 1, 2, 3, 4, 5})}});
  const std::vector<uint8_t> expected = {
      64, 0,  0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,
      34, 58, 123, 34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,
      44, 34, 115, 104, 97,  112, 101, 34,  58,  91,  49,  44,  50,  44,  51,  93,
      44, 34, 100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,  58,
      91, 48, 44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,
      0,  0,  0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  EXPECT_EQ(read_file(dir / "ref.safetensors"), expected);
}

// Built from the format's description: metadata first, tensors by falling dtype rank (I64, F32,
// BF16, BOOL) so each is aligned, keys dtype/shape/data_offsets, header padded with spaces to 8.
TEST(Safetensors, WritesTheLayoutTheFormatDescribes) {
  TempDir dir;
  const CpuTensorMap tensors = {
      {"weight", host<float>(DType::kFloat32, {2, 2}, {1, 2, 3, 4})},
      {"step", host<int64_t>(DType::kInt64, {}, {7})},
      {"mask", host<uint8_t>(DType::kBool, {3}, {1, 0, 1})},
      {"half", host<uint16_t>(DType::kBFloat16, {2}, {0x3f80, 0xc000})},
  };
  save_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}});

  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("step":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                       R"("half":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
                       R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[28,31]}})";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::vector<uint8_t> data = {7, 0, 0, 0, 0, 0, 0, 0};  // step
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) {             // weight
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    data.insert(data.end(), b, b + 4);
  }
  data.insert(data.end(), {0x80, 0x3f, 0x00, 0xc0});  // half
  data.insert(data.end(), {1, 0, 1});                 // mask
  EXPECT_EQ(read_file(dir / "x.safetensors"), safetensors_bytes(header, data));
}

TEST(Safetensors, FileBytesDoNotDependOnInsertionOrder) {
  TempDir dir;
  CpuTensorMap a, b;
  a["x"] = host<float>(DType::kFloat32, {1}, {1});
  a["y"] = host<int32_t>(DType::kInt32, {1}, {2});
  b["y"] = host<int32_t>(DType::kInt32, {1}, {2});
  b["x"] = host<float>(DType::kFloat32, {1}, {1});
  save_safetensors(dir / "a", a);
  save_safetensors(dir / "b", b);
  EXPECT_EQ(read_file(dir / "a"), read_file(dir / "b"));
}

TEST(Safetensors, ReadsHeadersInAnyKeyAndOffsetOrder) {
  TempDir dir;
  // Keys neither sorted nor in data order, no padding: other writers do this.
  write_file(dir / "any",
             safetensors_bytes(R"({"b":{"data_offsets":[4,6],"shape":[2],"dtype":"BOOL"},)"
                               R"("c":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                               R"("__metadata__":{"k":"v"},"a":{"dtype":"BOOL","shape":[0],)"
                               R"("data_offsets":[6,6]}})",
                               {5, 0, 0, 0, 1, 0}));
  const CpuTensorMap tensors = load_safetensors(dir / "any");
  expect_same(tensors, {{"a", host<uint8_t>(DType::kBool, {0}, {})},
                        {"b", host<uint8_t>(DType::kBool, {2}, {1, 0})},
                        {"c", host<int32_t>(DType::kInt32, {1}, {5})}});
}

TEST(Safetensors, SavingReplacesAFileWhole) {
  TempDir dir;
  save_safetensors(dir / "w", {{"a", host<float>(DType::kFloat32, {1}, {1})}});
  save_safetensors(dir / "w", {{"b", host<float>(DType::kFloat32, {2}, {2, 3})}});
  const CpuTensorMap tensors = load_safetensors(dir / "w");
  EXPECT_EQ(tensors.size(), 1u);
  EXPECT_TRUE(tensors.contains("b"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), {}), 1);  // no temporary left
}

TEST(Safetensors, RejectsTensorsItCannotWriteAndKeepsTheOldFile) {
  TempDir dir;
  save_safetensors(dir / "w", {{"a", host<float>(DType::kFloat32, {1}, {1})}});
  const std::vector<uint8_t> before = read_file(dir / "w");
  CpuTensor wrong = host<float>(DType::kFloat32, {3}, {1, 2});
  const std::string message = error_message<std::invalid_argument>([&] {
    save_safetensors(dir / "w", {{"a", host<float>(DType::kFloat32, {1}, {1})}, {"bad", wrong}});
  });
  EXPECT_TRUE(contains(message, "tensor \"bad\" holds 8 bytes but shape [3] of f32 needs 12"))
      << message;
  EXPECT_THROW(
      save_safetensors(dir / "w", {{"__metadata__", host<float>(DType::kFloat32, {1}, {1})}}),
      std::invalid_argument);
  EXPECT_EQ(read_file(dir / "w"), before);
}

// Each kind of damage: the message names the file and what is wrong (and the key, if one is).
struct Damage {
  const char* name;
  std::vector<uint8_t> bytes;
  const char* message;
};

std::vector<Damage> damages() {
  const std::vector<uint8_t> four = {1, 2, 3, 4};
  return {
      {"short", {1, 0, 0}, "truncated: 3 bytes, fewer than the 8-byte header length"},
      {"long_header", safetensors_bytes("{}", {}), ""},  // fixed below: a lying length
      {"not_json", safetensors_bytes(R"({"a":{"dtype":"F32",)", four), "header is not valid JSON"},
      {"not_object", safetensors_bytes("[1, 2]", {}), "header is not a JSON object"},
      {"unknown_dtype",
       safetensors_bytes(R"({"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})", four),
       R"(tensor "w": dtype "U16" is not one axle has)"},
      {"no_shape", safetensors_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", four),
       R"(tensor "w": no "shape" array)"},
      {"negative_dim",
       safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four),
       R"(tensor "w": shape [-1] is not a list of sizes)"},
      {"bad_offsets",
       safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four),
       R"(tensor "w": no "data_offsets" pair)"},
      {"size_mismatch",
       safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four),
       R"(tensor "w": data_offsets [0,4] span 4 bytes but shape [2] of F32 needs 8)"},
      {"out_of_range",
       safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four),
       R"(tensor "w": data_offsets [0,8] reach beyond the 4 bytes of data)"},
      {"overlap",
       safetensors_bytes(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[2,4]}})",
                         four),
       R"(tensor "b": data_offsets [2,4] overlap those of "a" [0,4])"},
      {"hole",
       safetensors_bytes(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[2,4]}})", four),
       R"(tensor "a": data_offsets [2,4] leave bytes [0,2) of the data to no tensor)"},
      {"trailing",
       safetensors_bytes(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", four),
       "2 bytes after the last tensor's data belong to no tensor"},
      {"duplicate",
       safetensors_bytes(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},)"
                         R"("a":{"dtype":"BOOL","shape":[2],"data_offsets":[2,4]}})",
                         four),
       R"(tensor "a": appears twice in the header)"},
      {"bad_metadata", safetensors_bytes(R"({"__metadata__":{"k":1}})", {}),
       R"("__metadata__" entry "k" is not a string)"},
  };
}

TEST(Safetensors, DamagedFilesAreReportedWithFileAndKey) {
  TempDir dir;
  for (Damage& d : damages()) {
    if (std::string_view(d.name) == "long_header") {
      d.bytes[0] = 200;  // the header claims 200 bytes; the file has 2 after the length
      d.message = "header length 200 goes beyond the end of the file (2 bytes after the length";
    }
    const fs::path path = dir / (std::string(d.name) + ".safetensors");
    write_file(path, d.bytes);
    const std::string message = error_message<FileError>([&] { (void)load_safetensors(path); });
    EXPECT_TRUE(contains(message, path.string() + ": ")) << d.name << ": " << message;
    EXPECT_TRUE(contains(message, d.message)) << d.name << ": " << message;
  }
}

TEST(Safetensors, ATruncatedCopyOfAGoodFileIsReported) {
  TempDir dir;
  save_safetensors(dir / "good",
                   {{"w", host<float>(DType::kFloat32, {64}, std::vector<float>(64, 1))}});
  std::vector<uint8_t> bytes = read_file(dir / "good");
  bytes.resize(bytes.size() - 10);
  write_file(dir / "cut", bytes);
  const std::string message =
      error_message<FileError>([&] { (void)load_safetensors(dir / "cut"); });
  EXPECT_TRUE(contains(message, R"(tensor "w": data_offsets [0,256] reach beyond the 246 bytes)"))
      << message;
}

TEST(Safetensors, AMissingFileIsNamed) {
  TempDir dir;
  const std::string message =
      error_message<FileError>([&] { (void)load_safetensors(dir / "nothing.safetensors"); });
  EXPECT_TRUE(contains(message, "nothing.safetensors: no such file")) << message;
}

TEST(Safetensors, DTypeNamesMapBothWays) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto dtype = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_safetensors_name(safetensors_dtype_name(dtype)), dtype);
  }
  EXPECT_EQ(dtype_from_safetensors_name("F16"), DType::kFloat16);
  EXPECT_EQ(dtype_from_safetensors_name("I8"), DType::kInt8);
  EXPECT_EQ(dtype_from_safetensors_name("U8"), DType::kUInt8);
  EXPECT_EQ(dtype_from_safetensors_name("I16"), DType::kInt16);
  EXPECT_EQ(dtype_from_safetensors_name("U16"), std::nullopt);  // axle has no u16
}

}  // namespace
}  // namespace axle
