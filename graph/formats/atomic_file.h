// graph/formats: writing a file so that a crash or a concurrent reader never sees half of it.
// Checkpoints, safetensors files and the persistent compile cache's entries are written through
// it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace axle {

/// Writes a file atomically: the bytes go to a temporary file in the target's directory, which
/// commit() flushes to disk (fsync) and renames over the target, then flushes the directory.
/// Readers see the old file or the whole new one. Without commit() (an error on the way, an
/// exception) the destructor removes the temporary file and the target is untouched.
/// Writers of one target in several threads or processes at once each fill a temporary file of
/// their own; the last commit wins whole. Every failure throws FileError naming the target.
class AtomicFileWriter {
 public:
  /// Creates the temporary file beside `path` (a hidden name unique to this process, thread and
  /// call).
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Appends `bytes`.
  void write(std::span<const std::byte> bytes);
  void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }
  /// Makes the written bytes the content of the target path.
  void commit();

  /// The file being written.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void discard() noexcept;

  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
};

}  // namespace axle
