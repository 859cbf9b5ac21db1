// graph/formats: the error every reader and writer of io/ (the formats and the layer above them)
// throws for a file it cannot use.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace axle {

/// Thrown when a file cannot be read or written, or its content is not what its format says.
/// The message starts with the file's path and says what is wrong with it ("…/train-images-idx3-
/// ubyte.gz: truncated: …"), so a person can act on it without a debugger.
class FileError : public std::runtime_error {
 public:
  /// An error about the file at `path`; `what` says what is wrong (reason()).
  FileError(const std::filesystem::path& path, std::string_view what)
      : std::runtime_error(path.string() + ": " + std::string(what)), path_(path), reason_(what) {}

  /// The file the error is about.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// What is wrong with it: the message without the leading path, for callers that name the
  /// file themselves.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }

 private:
  std::filesystem::path path_;
  std::string reason_;
};

}  // namespace axle
