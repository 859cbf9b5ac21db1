// actors: DeviceFeed — a parallel loader's actors and the blocking calls its per-device
// iterators make. It owns a small actor runtime of its own (the LoaderActor, the reader thread,
// the transfer threads), so closing it stops and joins every one of them. Replicas block here,
// on the reply to their own request, and nowhere inside the actors.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "axle/actors/runtime/loader_actor.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/engine/runtime.h"

namespace axle {

class DeviceFeed {
 public:
  /// Starts the actors; nothing is read until a device begins an epoch. `devices` must be
  /// distinct devices of the process, `transfer_threads` and the limits at least 1.
  DeviceFeed(std::unique_ptr<BatchSource> source, std::vector<Device> devices, LoaderLimits limits,
             int transfer_threads);
  /// Closes the feed.
  ~DeviceFeed();
  DeviceFeed(const DeviceFeed&) = delete;
  DeviceFeed& operator=(const DeviceFeed&) = delete;

  [[nodiscard]] const std::vector<Device>& devices() const noexcept { return devices_; }
  /// Batches each device gets per epoch: the source's size / the device count, rounded down.
  [[nodiscard]] int64_t per_device_size() const noexcept { return per_device_size_; }
  /// The position of `device` in devices(), or -1.
  [[nodiscard]] int slot_of(Device device) const noexcept;

  /// Starts the next epoch for `slot` (see BeginEpoch), waiting for the other devices to be done
  /// with the current one; returns its number.
  int64_t begin_epoch(int slot);
  /// The slot's next batch, waiting for it (the wait is recorded in InputWaitTime, and charged to
  /// `account`, the waiting replica's, when given); nothing at the end of the epoch. Throws
  /// LoaderError when the batch could not be loaded. Having returned a batch, it asks for the
  /// following one at once, so that by the replica's next call the reply is usually there and no
  /// thread has to wake for it; that batch counts as handed out.
  std::optional<DeviceBatch> next(int slot, StepBreakdown* account = nullptr);
  /// `slot` stops iterating `epoch` early (dropping the batch asked for ahead).
  void leave(int slot, int64_t epoch) noexcept;
  /// Stops reading and transferring (a read under way finishes its batch), joins the threads and
  /// lets go of the source. A replica still waiting on the feed, and every later call, gets a
  /// LoaderError; leave() does nothing. Idempotent; call it from one thread.
  void close() noexcept;

 private:
  std::unique_ptr<BatchSource> source_;
  std::vector<Device> devices_;
  int64_t per_device_size_;
  std::atomic<bool> stopping_{false};  // read by the reader and the transfer workers
  std::atomic<bool> closed_{false};
  Runtime runtime_;
  ActorRef<LoaderActor> loader_;
  // Per slot, the reply to the TakeBatch sent ahead; touched only by the slot's own thread.
  std::vector<Future<std::optional<DeviceBatch>>> asked_ahead_;
};

}  // namespace axle
