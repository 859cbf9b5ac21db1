// graph/formats: the file format of axle's checkpoints, over named host tensors. save and load
// (io/checkpoint.h) move device tensors through it; this part needs no device. A file is a header
// (magic, version, tensor count), then per tensor a description (name, dtype, dims, byte size,
// CRC-32) and its raw little-endian bytes (graph/formats/checkpoint.proto). Both sides stream:
// the writer takes one tensor at a time and the reader yields one at a time, so neither holds
// more than one on the host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "axle/graph/formats/atomic_file.h"
#include "axle/graph/tensor.h"

namespace axle {

/// Writes a checkpoint file atomically, one tensor at a time: add() each of the announced
/// tensors, then commit(). Until commit() the old file (if any) stays as it was; a writer
/// destroyed without commit() (an error, an exception on the way) leaves it untouched and
/// removes its temporary file. Every failure throws FileError naming the file (and the key, for
/// a tensor that cannot be written).
class CheckpointWriter {
 public:
  /// Starts the file at `path` for `tensor_count` tensors; the count is the header's, which
  /// comes first in the file.
  CheckpointWriter(std::filesystem::path path, uint64_t tensor_count);

  /// Appends the tensor `name`. Throws FileError when it is one more than announced or its
  /// bytes do not hold its dtype and shape.
  void add(std::string_view name, const CpuTensor& tensor);
  /// Makes the file the checkpoint written. Throws FileError when fewer tensors were added than
  /// announced (the target is then untouched).
  void commit();

  /// The file being written.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return out_.path(); }
  /// The bytes written so far and their CRC-32 (zlib's), summed as they were written (each
  /// tensor's own CRC combined in, not computed twice): after commit(), the file's.
  [[nodiscard]] uint64_t bytes_written() const noexcept { return bytes_written_; }
  [[nodiscard]] uint32_t file_crc32() const noexcept { return file_crc32_; }

 private:
  // Writes a serialised message framed by its length, summing it into the file's CRC-32.
  void write_framed(const std::string& message);

  AtomicFileWriter out_;
  uint64_t tensor_count_;
  uint64_t added_ = 0;
  uint64_t bytes_written_ = 0;
  uint32_t file_crc32_ = 0;
};

/// One tensor of a checkpoint, by name.
struct CheckpointEntry {
  std::string name;
  CpuTensor tensor;
};

/// Reads a checkpoint file one tensor at a time. Each entry is checked before it is returned
/// (dtype, dims against byte size, checksum), and the file as a whole once the last is read
/// (nothing may follow it). A missing, truncated or damaged file throws FileError naming the
/// file, and the key of the tensor where one is at fault.
class CheckpointReader {
 public:
  /// Opens the file and reads its header.
  explicit CheckpointReader(std::filesystem::path path);

  /// The next tensor, or nullopt after the last (once the file is checked to end there).
  [[nodiscard]] std::optional<CheckpointEntry> next();

  /// How many tensors the file announces.
  [[nodiscard]] uint64_t tensor_count() const noexcept { return tensor_count_; }
  /// The file being read.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  // The next length-framed message's bytes; `what` names it in errors.
  [[nodiscard]] std::string framed(const std::string& what);
  void read(void* into, uint64_t bytes, const std::string& what);
  [[noreturn]] void fail(const std::string& what) const;

  std::filesystem::path path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t read_ = 0;
};

}  // namespace axle
