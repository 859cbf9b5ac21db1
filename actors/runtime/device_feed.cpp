// actors: DeviceFeed.
#include "axle/actors/runtime/device_feed.h"

#include "axle/actors/runtime/step_breakdown.h"

#include <algorithm>
#include <chrono>

#include "axle/engine/metrics.h"
#include "axle/engine/spawn.h"

namespace axle {

DeviceFeed::DeviceFeed(std::unique_ptr<BatchSource> source, std::vector<Device> devices,
                       LoaderLimits limits, int transfer_threads)
    : source_(std::move(source)),
      devices_(std::move(devices)),
      per_device_size_(source_->size() / static_cast<int64_t>(devices_.size())),
      // One pool thread serves the LoaderActor; the reader and the transfers get threads of
      // their own, since a read or a transfer holds its thread for a while.
      runtime_(RuntimeOptions{.threads = 1}) {
  auto reader =
      spawn<BatchReader>(runtime_, SpawnOptions{.name = "loader_reader", .dedicated_thread = true},
                         *source_, stopping_);
  std::vector<ActorRef<TransferWorker>> workers;
  for (int i = 0; i < transfer_threads; ++i) {
    workers.push_back(spawn<TransferWorker>(
        runtime_, SpawnOptions{.name = "loader_transfer", .dedicated_thread = true}, stopping_));
  }
  loader_ = spawn<LoaderActor>(runtime_, SpawnOptions{.name = "loader"}, devices_, source_->size(),
                               limits, std::move(reader), std::move(workers));
  asked_ahead_.resize(devices_.size());
}

DeviceFeed::~DeviceFeed() { close(); }

void DeviceFeed::close() noexcept {
  if (closed_.exchange(true)) return;
  stopping_.store(true, std::memory_order_relaxed);
  loader_.tell(CloseLoader{});
  runtime_.shutdown();
  source_.reset();  // no thread reads it any more
}

namespace {

[[noreturn]] void throw_closed() {
  throw LoaderError(
      "ParallelLoader: the loader was destroyed; its iterators can no longer be used");
}

// The reply to `request`, waited for. A LoaderError is thrown again as a copy of this thread's
// own: the actor's thread shares the original and may free it last, a hand-over made through
// the exception's reference count, which ThreadSanitizer cannot see inside libstdc++.
template <class T>
Stored<T> reply_to(Future<T> request) {
  try {
    return request.get();
  } catch (const RuntimeStopped&) {
    throw_closed();  // closed between the caller's check and its ask
  } catch (const LoaderError& e) {
    throw LoaderError(e.what(), e.original());
  }
}

}  // namespace

int DeviceFeed::slot_of(Device device) const noexcept {
  const auto it = std::find(devices_.begin(), devices_.end(), device);
  return it == devices_.end() ? -1 : static_cast<int>(it - devices_.begin());
}

int64_t DeviceFeed::begin_epoch(int slot) {
  if (closed_.load()) throw_closed();
  asked_ahead_[slot] = {};  // answered before the BeginEpoch, from the epoch being left
  return reply_to(loader_.ask(BeginEpoch{slot}));
}

std::optional<DeviceBatch> DeviceFeed::next(int slot, StepBreakdown* account) {
  if (closed_.load()) throw_closed();
  Future<std::optional<DeviceBatch>> asked = std::move(asked_ahead_[slot]);
  asked_ahead_[slot] = {};
  if (!asked.valid()) asked = loader_.ask(TakeBatch{slot});
  std::optional<DeviceBatch> batch;
  {
    // The time waited for the batch, recorded on failure too. Asking for the next one ahead, below,
    // is the loop's own work, not a wait.
    struct RecordWait {
      StepBreakdown* account;
      std::chrono::steady_clock::time_point start;
      ~RecordWait() {
        using Nanoseconds = std::chrono::duration<double, std::nano>;
        const double waited = Nanoseconds(std::chrono::steady_clock::now() - start).count();
        AXLE_METRIC_ADD("InputWaitTime", MetricKind::kTime, waited);
        if (account) account->add_host_wait(StepBreakdown::kInputWait, waited);
      }
    } record{account, std::chrono::steady_clock::now()};
    batch = reply_to(std::move(asked));
  }
  if (batch) asked_ahead_[slot] = loader_.ask(TakeBatch{slot});
  return batch;
}

void DeviceFeed::leave(int slot, int64_t epoch) noexcept {
  asked_ahead_[slot] = {};
  if (closed_.load()) return;
  try {
    loader_.tell(LeaveEpoch{slot, epoch});
  } catch (...) {
    // Only the mailbox's allocation can fail: the slot then stays in the epoch until its next
    // begin_epoch, which leaves it.
  }
}

}  // namespace axle
