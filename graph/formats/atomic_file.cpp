// graph/formats: atomic file writes on POSIX: rename() within one directory replaces a file
// atomically, and the fsyncs make the new content durable before and the rename durable after.
#include "axle/graph/formats/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <string>

#include "axle/graph/formats/error.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// Tells this process from every other that may write the same directory: pids repeat across
// machines sharing a file system, across pid namespaces, and over time (a crashed writer's
// temporary file can outlive its pid).
uint64_t process_token() {
  static const uint64_t token = [] {
    uint64_t value =
        static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    try {
      std::random_device random;
      value ^= (uint64_t{random()} << 32) | random();
    } catch (const std::exception&) {
      // No entropy source: the clock and the pid, which the name carries too, still differ.
    }
    return value;
  }();
  return token;
}

// A new temporary file name beside `target`: unique per process (pid and token), thread (tid)
// and call (counter), so concurrent writers of one target never share a file. The leading dot
// keeps it out of plain directory listings; a long target name is shortened so the whole name
// stays within the file system's 255 bytes.
fs::path temporary_path(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  constexpr std::size_t kMaxNameBytes = 160;
  const std::string name = target.filename().string().substr(0, kMaxNameBytes);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  return dir / fmt::format(".{}.{}.{}.{}.{:016x}.tmp", name, ::getpid(), ::gettid(), counter++,
                           process_token());
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path path)
    : path_(std::move(path)), temp_(temporary_path(path_)) {
  // O_EXCL: never open, and so never truncate, a file another writer is filling.
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw FileError(path_, fmt::format("cannot create the temporary file {}: {}", temp_.string(),
                                       errno_text()));
  }
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_.c_str());
  }
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (fd_ < 0) throw FileError(path_, "write after commit or after a failed write");
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      discard();
      throw FileError(path_, fmt::format("cannot write: {}", why));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw FileError(path_, "commit after commit or after a failed write");
  if (::fsync(fd_) != 0) {
    const std::string why = errno_text();
    discard();
    throw FileError(path_, fmt::format("cannot flush to disk: {}", why));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    throw FileError(path_, fmt::format("cannot write: {}", why));
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    throw FileError(path_, fmt::format("cannot rename {} to it: {}", temp_.string(), why));
  }
  // The rename lives in the directory: without this a crash could bring the old file back.
  const fs::path dir = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);  // best effort: some file systems refuse fsync on directories
    ::close(dir_fd);
  }
}

}  // namespace axle
