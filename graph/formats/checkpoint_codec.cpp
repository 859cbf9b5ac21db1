// graph/formats: checkpoint files. The only file that sees the protobuf messages of
// graph/formats/checkpoint.proto.
#include "axle/graph/formats/checkpoint_codec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "axle/graph/formats/error.h"
#include "graph/formats/checkpoint.pb.h"

#ifndef AXLE_VERSION_STRING
#error "AXLE_VERSION_STRING (the project version) is defined by graph/formats/CMakeLists.txt"
#endif

namespace axle {
namespace {

constexpr std::string_view kMagic = "axle checkpoint";
// A TensorMeta or header is small; anything larger is a damaged length.
constexpr uint64_t kMaxMessageBytes = 1 << 20;

uint32_t crc32_of(std::span<const std::byte> bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes a uInt length: 1 GiB at a time.
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t n = std::min<std::size_t>(bytes.size() - at, std::size_t{1} << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
    at += n;
  }
  return static_cast<uint32_t>(crc);
}

// What files written before the CRC-32 carry.
uint64_t fnv1a(std::span<const std::byte> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 0x100000001b3ULL;
  return h;
}

std::optional<DType> dtype_named(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

// Quoted and escaped: a name is any bytes, and a damaged one must still print as text.
std::string key_text(std::string_view name) { return fmt::format("key {:?}", name); }

}  // namespace

CheckpointWriter::CheckpointWriter(std::filesystem::path path, uint64_t tensor_count)
    : out_(std::move(path)), tensor_count_(tensor_count) {
  proto::CheckpointHeader header;
  header.set_magic(std::string(kMagic));
  header.set_axle_version(AXLE_VERSION_STRING);
  header.set_tensor_count(tensor_count);
  file_crc32_ = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  write_framed(header.SerializeAsString());
}

void CheckpointWriter::write_framed(const std::string& message) {
  std::array<std::byte, 8> length{};
  for (std::size_t i = 0; i < 8; ++i) {
    length[i] = static_cast<std::byte>((message.size() >> (8 * i)) & 0xff);
  }
  out_.write(length);
  out_.write(message);
  uLong crc = ::crc32(file_crc32_, reinterpret_cast<const Bytef*>(length.data()), length.size());
  crc = ::crc32(crc, reinterpret_cast<const Bytef*>(message.data()),
                static_cast<uInt>(message.size()));
  file_crc32_ = static_cast<uint32_t>(crc);
  bytes_written_ += length.size() + message.size();
}

void CheckpointWriter::add(std::string_view name, const CpuTensor& tensor) {
  if (added_ == tensor_count_) {
    throw FileError(path(), fmt::format("{}: one tensor more than the {} announced", key_text(name),
                                        tensor_count_));
  }
  const uint64_t expected = static_cast<uint64_t>(tensor.shape.numel()) * dtype_size(tensor.dtype);
  if (tensor.bytes.size() != expected) {
    throw FileError(
        path(), fmt::format("{}: {} bytes do not hold {}{}", key_text(name), tensor.bytes.size(),
                            dtype_name(tensor.dtype), tensor.shape.to_string()));
  }
  proto::TensorMeta meta;
  meta.set_name(std::string(name));
  meta.set_dtype(std::string(dtype_name(tensor.dtype)));
  for (int64_t d : tensor.shape.dims()) meta.add_dims(d);
  meta.set_byte_size(tensor.bytes.size());
  const uint32_t crc = crc32_of(tensor.bytes);
  meta.set_crc32(crc);
  write_framed(meta.SerializeAsString());
  out_.write(tensor.bytes);
  file_crc32_ = static_cast<uint32_t>(
      ::crc32_combine(file_crc32_, crc, static_cast<z_off_t>(tensor.bytes.size())));
  bytes_written_ += tensor.bytes.size();
  ++added_;
}

void CheckpointWriter::commit() {
  if (added_ != tensor_count_) {
    throw FileError(
        path(), fmt::format("{} of the {} announced tensors were written", added_, tensor_count_));
  }
  out_.commit();
}

CheckpointReader::CheckpointReader(std::filesystem::path path)
    : path_(std::move(path)), in_(path_, std::ios::binary) {
  if (!in_) fail("cannot be opened");
  in_.seekg(0, std::ios::end);
  size_ = static_cast<uint64_t>(in_.tellg());
  in_.seekg(0);
  proto::CheckpointHeader header;
  if (!header.ParseFromString(framed("the header"))) fail("damaged: the header does not parse");
  if (header.magic() != kMagic) fail("not an axle checkpoint (wrong magic)");
  tensor_count_ = header.tensor_count();
}

std::optional<CheckpointEntry> CheckpointReader::next() {
  if (read_ == tensor_count_) {
    if (offset_ != size_) fail("damaged: bytes after the last tensor");
    return std::nullopt;
  }
  const std::string what = fmt::format("the description of tensor {}", read_);
  proto::TensorMeta meta;
  if (!meta.ParseFromString(framed(what))) fail(fmt::format("damaged: {} does not parse", what));
  const std::string key = key_text(meta.name());
  const std::optional<DType> dtype = dtype_named(meta.dtype());
  if (!dtype) fail(fmt::format("{}: unknown dtype {:?}", key, meta.dtype().substr(0, 40)));
  if (meta.dims_size() > Shape::kMaxRank) fail(fmt::format("{}: rank {}", key, meta.dims_size()));
  uint64_t expected = dtype_size(*dtype);
  for (int64_t d : meta.dims()) {
    if (d < 0 || (d > 0 && expected > meta.byte_size() / static_cast<uint64_t>(d))) {
      fail(fmt::format("{}: dims [{}] do not fit its {} bytes", key, fmt::join(meta.dims(), ","),
                       meta.byte_size()));
    }
    expected *= static_cast<uint64_t>(d);
  }
  CheckpointEntry entry{
      meta.name(),
      CpuTensor{*dtype, Shape(std::span<const int64_t>(meta.dims().data(), meta.dims_size()))}};
  if (expected != meta.byte_size()) {
    fail(fmt::format("{}: {} bytes do not hold {}{}", key, meta.byte_size(), dtype_name(*dtype),
                     entry.tensor.shape.to_string()));
  }
  // Checked against what remains before allocating, so a damaged size cannot ask for the moon.
  if (meta.byte_size() > size_ - offset_) {
    fail(fmt::format("truncated: {} needs {} bytes, {} remain", key, meta.byte_size(),
                     size_ - offset_));
  }
  entry.tensor.bytes.resize(meta.byte_size());
  read(entry.tensor.bytes.data(), entry.tensor.bytes.size(), key);
  const bool intact = meta.has_crc32() ? crc32_of(entry.tensor.bytes) == meta.crc32()
                                       : fnv1a(entry.tensor.bytes) == meta.checksum();
  if (!intact) fail(key + ": checksum mismatch");
  ++read_;
  return entry;
}

std::string CheckpointReader::framed(const std::string& what) {
  std::array<unsigned char, 8> length_bytes{};
  read(length_bytes.data(), 8, what);
  uint64_t length = 0;
  for (std::size_t i = 0; i < 8; ++i) length |= uint64_t{length_bytes[i]} << (8 * i);
  if (length > kMaxMessageBytes || length > size_ - offset_) {
    fail(fmt::format("truncated or damaged: {} claims {} bytes, {} remain", what, length,
                     size_ - offset_));
  }
  std::string bytes(length, '\0');
  read(bytes.data(), length, what);
  return bytes;
}

void CheckpointReader::read(void* into, uint64_t bytes, const std::string& what) {
  if (bytes > size_ - offset_) {
    fail(fmt::format("truncated: {} needs {} bytes, {} remain", what, bytes, size_ - offset_));
  }
  in_.read(static_cast<char*>(into), static_cast<std::streamsize>(bytes));
  if (!in_) fail(fmt::format("reading {} failed", what));
  offset_ += bytes;
}

void CheckpointReader::fail(const std::string& what) const { throw FileError(path_, what); }

}  // namespace axle
