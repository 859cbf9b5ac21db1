// actors: the errors the runtime raises where a replica waits, which a program catches by type: a
// failed step closure, an out-of-graph collective that could not complete, a replica cancelled by
// another's failure, a loader that could not deliver, a step over the device memory limit, a
// step that produced a NaN. The parts that raise them include this; so does the user API.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace axle {

/// A step closure threw: the message names the line that added it and what it threw.
class StepClosureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An out-of-graph collective could not complete: mismatched tags or value types, or a member
/// that returned from its function without reaching it.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A rendezvous did not complete within AXLE_COLLECTIVE_TIMEOUT seconds; the message names the
/// tag and the replicas that never arrived.
class CollectiveTimeout : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

/// Another replica failed, so this wait on it was cancelled; the message names that replica.
class ReplicaCancelled : public std::runtime_error {
 public:
  /// `what` is the message; `failed_replica` the ordinal of the replica that failed.
  ReplicaCancelled(int failed_replica, const std::string& what)
      : std::runtime_error(what), failed_replica_(failed_replica) {}
  /// The ordinal of the replica whose failure cancelled the wait.
  [[nodiscard]] int failed_replica() const noexcept { return failed_replica_; }

 private:
  int failed_replica_;
};

/// A batch could not be read or moved to its device, or the loader went away while a replica
/// waited. The message says which batch and why.
class LoaderError : public std::runtime_error {
 public:
  /// `what` is the message; `original` what the source (or the transfer) threw, if anything.
  explicit LoaderError(const std::string& what, std::exception_ptr original = nullptr)
      : std::runtime_error(what), original_(std::move(original)) {}
  /// What the source (or the transfer) threw, if anything.
  [[nodiscard]] std::exception_ptr original() const noexcept { return original_; }

 private:
  std::exception_ptr original_;
};

/// A step that would need more device memory than AXLE_DEVICE_MEMORY_LIMIT allows; it fails
/// before it runs, and names the step's source line, the bytes it needs and the limit.
class DeviceMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A step produced a NaN or an infinity (AXLE_CHECK_FINITE); names the op that first did, and
/// its source line.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace axle
