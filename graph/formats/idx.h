// graph/formats: the IDX file format of MNIST and Fashion-MNIST. A file is a magic number (two zero
// bytes, the element type code, the rank), one big-endian 32-bit size per dimension, then the
// elements, big-endian, row-major. Files are read gzip-compressed or plain.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/shape.h"
#include "axle/graph/tensor.h"

namespace axle {

/// Element type of an IDX file: the third byte of its magic number.
enum class IdxType : uint8_t {
  kU8 = 0x08,
  kS8 = 0x09,
  kI16 = 0x0B,
  kI32 = 0x0C,
  kF32 = 0x0D,
  kF64 = 0x0E,
};

/// Bytes per element of `type`.
[[nodiscard]] std::size_t idx_type_size(IdxType type) noexcept;
/// "u8", "s8", "i16", "i32", "f32", "f64".
[[nodiscard]] std::string_view idx_type_name(IdxType type) noexcept;

/// An IDX file's content as stored: its element type and shape, and the elements in host byte
/// order. Datasets keep u8 images in this form (a quarter of the memory of f32) and convert
/// one sample at a time.
struct IdxArray {
  IdxType type = IdxType::kU8;
  Shape shape;
  std::vector<std::byte> bytes;  ///< row-major elements, host byte order
};

/// Reads the IDX file at `path`, gzip-compressed or plain (told apart by content, not name).
/// Throws FileError naming the file when it is missing, truncated (compressed stream or
/// elements), malformed (magic number, type code, rank above 8) or followed by extra bytes.
[[nodiscard]] IdxArray read_idx_array(const std::filesystem::path& path);

/// Reads the IDX file at `path` as a host tensor of its elements' own dtype, as torchvision's
/// reader gives them: u8, s8, s16, s32, f32 or f64 (MNIST's pixels and labels are u8).
[[nodiscard]] CpuTensor read_idx(const std::filesystem::path& path);

/// Reads the IDX file at `path` as a host tensor of `dtype`, converting each value as a cast
/// would (a u8 pixel 255 reads as 255.0f: scaling is the dataset's business).
[[nodiscard]] CpuTensor read_idx(const std::filesystem::path& path, DType dtype);

/// `array` as a host tensor of `dtype` (each value converted as a cast would).
[[nodiscard]] CpuTensor idx_to_tensor(const IdxArray& array, DType dtype);

}  // namespace axle
