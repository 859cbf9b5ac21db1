// graph/formats: IDX reading through zlib, so that .gz files need no separate decompression step.
#include "axle/graph/formats/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "axle/engine/element.h"
#include "axle/graph/formats/error.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

// Reads a file through zlib's gz* interface, which decompresses gzip and passes any other file
// through unchanged ("transparent" mode): one reader serves both kinds of file.
class GzReader {
 public:
  explicit GzReader(const fs::path& path) : path_(path) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (!fs::exists(status)) throw FileError(path, "no such file");
    if (fs::is_directory(status)) throw FileError(path, "is a directory, not an IDX file");
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) {
      throw FileError(path, fmt::format("cannot open: {}", std::strerror(errno ? errno : EIO)));
    }
    gzbuffer(file_, 256 * 1024);  // the default 8 KiB costs many more calls on 26 MB files
  }
  ~GzReader() { gzclose(file_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to `n` bytes into `out`; fewer only at the end of the data.
  std::size_t read(std::byte* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      // gzread counts in unsigned int and returns int: stay well inside both.
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(file_, out + done, chunk);
      if (got < 0) throw FileError(path_, fmt::format("cannot read: {}", zlib_message()));
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    if (done < n) {
      // Z_BUF_ERROR here means the input ended inside a gzip stream: a cut-off download.
      int code = Z_OK;
      gzerror(file_, &code);
      if (code == Z_BUF_ERROR) {
        throw FileError(path_, "truncated: the gzip stream ends before its end marker");
      }
      if (code != Z_OK) throw FileError(path_, fmt::format("cannot read: {}", zlib_message()));
    }
    return done;
  }

 private:
  std::string zlib_message() {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_ERRNO) return std::strerror(errno);
    return message != nullptr && *message ? message : "zlib error";
  }

  fs::path path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian_u32(const std::byte* p) noexcept {
  return (std::to_integer<uint32_t>(p[0]) << 24) | (std::to_integer<uint32_t>(p[1]) << 16) |
         (std::to_integer<uint32_t>(p[2]) << 8) | std::to_integer<uint32_t>(p[3]);
}

bool known_type(uint8_t code) noexcept {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C || code == 0x0D ||
         code == 0x0E;
}

// IDX elements are big-endian; this turns them into host order in place.
void to_host_order(std::vector<std::byte>& bytes, std::size_t element_size) noexcept {
  if (std::endian::native == std::endian::big || element_size == 1) return;
  for (std::size_t i = 0; i + element_size <= bytes.size(); i += element_size) {
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + element_size));
  }
}

double element_as_double(IdxType type, const std::byte* p) noexcept {
  switch (type) {
    case IdxType::kU8:
      return std::to_integer<uint8_t>(*p);
    case IdxType::kS8:
      return static_cast<int8_t>(std::to_integer<uint8_t>(*p));
    case IdxType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case IdxType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case IdxType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case IdxType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
  return 0;
}

}  // namespace

std::size_t idx_type_size(IdxType type) noexcept {
  switch (type) {
    case IdxType::kU8:
    case IdxType::kS8:
      return 1;
    case IdxType::kI16:
      return 2;
    case IdxType::kI32:
    case IdxType::kF32:
      return 4;
    case IdxType::kF64:
      return 8;
  }
  return 0;
}

std::string_view idx_type_name(IdxType type) noexcept {
  switch (type) {
    case IdxType::kU8:
      return "u8";
    case IdxType::kS8:
      return "s8";
    case IdxType::kI16:
      return "i16";
    case IdxType::kI32:
      return "i32";
    case IdxType::kF32:
      return "f32";
    case IdxType::kF64:
      return "f64";
  }
  return "?";
}

namespace {

// The magic number and the dimensions: an array with its type and shape and no elements yet.
IdxArray read_idx_header(GzReader& reader, const fs::path& path) {
  std::array<std::byte, 4> magic{};
  const std::size_t got_magic = reader.read(magic.data(), magic.size());
  if (got_magic == 0) throw FileError(path, "empty file: no IDX magic number");
  if (got_magic < magic.size()) {
    throw FileError(
        path, fmt::format("truncated: {} bytes, less than the 4-byte IDX magic number", got_magic));
  }
  const uint32_t magic_value = big_endian_u32(magic.data());
  if (magic[0] != std::byte{0} || magic[1] != std::byte{0}) {
    throw FileError(path, fmt::format("not an IDX file: magic number 0x{:08x} does not start "
                                      "with two zero bytes",
                                      magic_value));
  }
  const auto code = std::to_integer<uint8_t>(magic[2]);
  if (!known_type(code)) {
    throw FileError(path, fmt::format("unknown IDX element type 0x{:02x} in magic number "
                                      "0x{:08x} (known: 0x08 u8, 0x09 s8, 0x0b i16, 0x0c i32, "
                                      "0x0d f32, 0x0e f64)",
                                      code, magic_value));
  }
  const int rank = std::to_integer<int>(magic[3]);
  if (rank > Shape::kMaxRank) {
    throw FileError(path, fmt::format("rank {} in magic number 0x{:08x} is above {}, the most "
                                      "axle supports",
                                      rank, magic_value, Shape::kMaxRank));
  }

  IdxArray array;
  array.type = static_cast<IdxType>(code);
  std::array<std::byte, 4 * Shape::kMaxRank> dims{};
  const std::size_t got_dims = reader.read(dims.data(), 4 * static_cast<std::size_t>(rank));
  if (got_dims < 4 * static_cast<std::size_t>(rank)) {
    throw FileError(path, fmt::format("truncated: the header declares {} dimensions but the file "
                                      "ends after {} of their 4-byte sizes",
                                      rank, got_dims / 4));
  }
  for (int d = 0; d < rank; ++d) array.shape.push_back(big_endian_u32(dims.data() + 4 * d));
  return array;
}

// The bytes of the elements `array`'s header declares.
uint64_t element_bytes(const IdxArray& array, const fs::path& path) {
  // Dimensions below 2^32 each, at most 8 of them: the product can overflow, so check it. In
  // int64 and at every step, as Shape::numel() multiplies: a later 0 does not make an earlier
  // overflow fit.
  int64_t element_count = 1;
  for (int64_t size : array.shape.dims()) {
    if (__builtin_mul_overflow(element_count, size, &element_count)) {
      throw FileError(path, fmt::format("shape {} is too large", array.shape.to_string()));
    }
  }
  const std::size_t element_size = idx_type_size(array.type);
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(element_count), uint64_t{element_size},
                             &expected) ||
      expected > std::numeric_limits<std::size_t>::max() / 2) {
    throw FileError(path, fmt::format("shape {} is too large", array.shape.to_string()));
  }
  return expected;
}

}  // namespace

IdxArray read_idx_array(const fs::path& path) {
  GzReader reader(path);
  IdxArray array = read_idx_header(reader, path);
  const uint64_t expected = element_bytes(array, path);
  // Grows the buffer as bytes arrive instead of trusting the header's size up front: a damaged
  // header then reads as a truncated file, not as an attempt to allocate terabytes.
  constexpr std::size_t kChunk = std::size_t{16} << 20;
  std::size_t done = 0;
  while (done < expected) {
    const std::size_t want = std::min<std::size_t>(kChunk, expected - done);
    array.bytes.resize(done + want);
    const std::size_t got = reader.read(array.bytes.data() + done, want);
    done += got;
    if (got < want) break;
  }
  if (done < expected) {
    throw FileError(
        path, fmt::format("truncated: shape {} of {} needs {} bytes of elements, the "
                          "file holds {}",
                          array.shape.to_string(), idx_type_name(array.type), expected, done));
  }
  std::byte extra{};
  if (reader.read(&extra, 1) != 0) {
    throw FileError(path,
                    fmt::format("unexpected data after the {} bytes of elements that shape "
                                "{} of {} needs (wrong dimensions in the header?)",
                                expected, array.shape.to_string(), idx_type_name(array.type)));
  }
  to_host_order(array.bytes, idx_type_size(array.type));
  return array;
}

CpuTensor idx_to_tensor(const IdxArray& array, DType dtype) {
  const std::size_t in_size = idx_type_size(array.type);
  const std::size_t out_size = dtype_size(dtype);
  const std::size_t count = array.bytes.size() / in_size;
  CpuTensor out{dtype, array.shape, std::vector<std::byte>(count * out_size)};
  for (std::size_t i = 0; i < count; ++i) {
    store_element(dtype, element_as_double(array.type, array.bytes.data() + i * in_size),
                  out.bytes.data() + i * out_size);
  }
  return out;
}

namespace {
DType dtype_of(IdxType type) {
  switch (type) {
    case IdxType::kU8:
      return DType::kUInt8;
    case IdxType::kS8:
      return DType::kInt8;
    case IdxType::kI16:
      return DType::kInt16;
    case IdxType::kI32:
      return DType::kInt32;
    case IdxType::kF32:
      return DType::kFloat32;
    case IdxType::kF64:
      return DType::kFloat64;
  }
  return DType::kInt32;  // read_idx_array refuses every other type code
}
}  // namespace

CpuTensor read_idx(const fs::path& path) {
  const IdxArray array = read_idx_array(path);
  return idx_to_tensor(array, dtype_of(array.type));
}

CpuTensor read_idx(const fs::path& path, DType dtype) {
  return idx_to_tensor(read_idx_array(path), dtype);
}

}  // namespace axle
