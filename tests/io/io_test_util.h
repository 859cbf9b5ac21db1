// Helpers for the io tests: a scratch directory, file writers, and catching an error's message.
#pragma once

#include "axle/graph/tensor.h"
#include "tests/error_text.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace axle::testing {

/// The TempDirs this process made and has not removed: a death test's child runs its fixture and
/// ends in std::exit, which skips the fixture's destructor but destroys this, so the child's
/// directory goes too (a forked child leaves its parent's, which it did not make).
class LiveTempDirs {
 public:
  static LiveTempDirs& get() {
    static LiveTempDirs dirs;
    return dirs;
  }
  void add(const std::filesystem::path& path) {
    std::lock_guard lock(mutex_);
    paths_.insert({path, ::getpid()});
  }
  void remove(const std::filesystem::path& path) {
    std::lock_guard lock(mutex_);
    paths_.erase({path, ::getpid()});
    std::error_code error;
    std::filesystem::remove_all(path, error);
  }
  ~LiveTempDirs() {
    for (const auto& [path, maker] : paths_) {
      std::error_code error;
      if (maker == ::getpid()) std::filesystem::remove_all(path, error);
    }
  }

 private:
  std::mutex mutex_;
  std::set<std::pair<std::filesystem::path, pid_t>> paths_;
};

/// A fresh directory under the system's temp directory, removed with everything in it (at the
/// latest when the process exits).
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("axle_io_" + std::string(info ? info->name() : "test") + "_" +
             std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    LiveTempDirs::get().add(path_);
  }
  ~TempDir() { LiveTempDirs::get().remove(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::filesystem::path operator/(std::string_view name) const {
    return path_ / std::string(name);
  }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_file(const std::filesystem::path& path, std::string_view text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// `bytes` gzip-compressed, as a .gz file holds them.
inline std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's own.
  EXPECT_EQ(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&stream, bytes.size()) + 64);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

/// A host tensor of `dtype` and `shape` holding `values`' bytes.
template <class T>
CpuTensor host(DType dtype, Shape shape, const std::vector<T>& values) {
  CpuTensor t{dtype, shape, std::vector<std::byte>(values.size() * sizeof(T))};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

}  // namespace axle::testing
