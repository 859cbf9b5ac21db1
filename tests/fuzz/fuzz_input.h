// tests/fuzz: helpers of the fuzz targets. The readers of IDX, safetensors and checkpoint files
// take paths, so a target writes each input to a scratch file of its process (in /dev/shm when
// there is one: no disk traffic) and reads that.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace axle::fuzz {

/// A file of this process named after `suffix`, removed when the object is destroyed.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    path_ = dir / ("axle-fuzz-" + std::to_string(::getpid()) + suffix);
  }
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Makes `size` bytes at `data` the file's content; returns its path.
  const std::filesystem::path& write(const uint8_t* data, std::size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

/// Stops the run when a reader broke its own promise (a tensor whose bytes do not fill its
/// shape, say): libFuzzer reports the input as a crash.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: broken invariant: %s\n", what);
    std::abort();
  }
}

}  // namespace axle::fuzz
