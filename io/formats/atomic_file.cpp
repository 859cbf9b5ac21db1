// io/formats: atomic file writes on POSIX: rename() within one directory replaces a file
// atomically, and the fsyncs make the new content durable before and the rename durable after.
#include "io/formats/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "io/formats/error.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  // Unique per process, thread and call, so concurrent writers of one target never share a file;
  // the leading dot keeps it out of plain directory listings.
  static std::atomic<uint64_t> counter{0};
  const fs::path dir = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  temp_ = dir / fmt::format(".{}.{}.{}.{}.tmp", path_.filename().string(), ::getpid(), ::gettid(),
                            counter++);
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
