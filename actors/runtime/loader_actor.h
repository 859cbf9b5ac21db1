// actors: the LoaderActor — one per parallel loader. It reads host batches from a BatchSource
// through a BatchReader (a thread of its own, at most loader_prefetch_size batches ahead), has
// TransferWorkers (host_to_device_transfer_threads of them) move each batch to its device, and
// keeps one queue of at most device_prefetch_size batches per device for that device's replica.
// Batch i of an epoch goes to device i % n, and each device gets size() / n batches (the uneven
// rest is never read). Replicas ask for their next batch and block on the reply, at the API
// boundary; no handler waits on another actor. A batch that fails to load fails the epoch: each
// device gets the batches before it, then the error.
//
// A transfer worker does the host side of a transfer (the batch's bytes in the device's storage
// dtype) and hands the copy to the DeviceActor, which makes it in stream order between the
// executions around it; the batch enters its device queue once all its data is on the device.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/actors/runtime/errors.h"
#include "axle/engine/actor.h"
#include "axle/graph/device.h"
#include "axle/graph/tensor.h"

namespace axle {

/// A batch on the host: one tensor per field, each stacked along the batch dimension.
using HostBatch = std::vector<CpuTensor>;
/// A batch on a device: the fields of a HostBatch as device tensors.
using DeviceBatch = std::vector<Tensor>;

/// Where a loader's batches come from, an epoch at a time (io adapts its DataLoader to it). Only
/// the loader's reader thread calls it, one call at a time.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Batches in one epoch.
  [[nodiscard]] virtual int64_t size() const = 0;
  /// Starts an epoch; the next() calls that follow read it in order.
  virtual void begin_epoch() = 0;
  /// The epoch's next batch; called at most size() times per epoch. May throw.
  virtual HostBatch next() = 0;
  /// The epoch is over, possibly before its last batch: let go of what it holds.
  virtual void end_epoch() = 0;
};

/// How far a LoaderActor reads and transfers ahead.
/// How a batch field reaches its device (null: tensor_from_bytes).
using PlaceField = std::function<Tensor(const CpuTensor& field, Device device)>;

struct LoaderLimits {
  int loader_prefetch_size = 8;  ///< host batches read and not yet sent to a device
  int device_prefetch_size = 4;  ///< batches per device transferred or in transfer, not yet taken
  std::shared_ptr<const PlaceField> place_field;  ///< e.g. laid out over the SPMD mesh
};

class BatchReader;
class TransferWorker;
class LoaderActor;

// --- Messages of the LoaderActor, from replicas (through DeviceFeed) ---

/// Device slot `slot` starts an epoch: the one running if it has not joined it yet, else the next
/// (leaving the one it is in), once every device is done with the current one. Replies with the
/// epoch's number.
struct BeginEpoch {
  using Reply = int64_t;
  int slot;
};
/// The next batch of slot `slot` in its epoch; nothing at the end. Fails with LoaderError.
struct TakeBatch {
  using Reply = std::optional<DeviceBatch>;
  int slot;
};
/// Slot `slot` stops iterating epoch `epoch` before its end: its batches are dropped from now on.
struct LeaveEpoch {
  int slot;
  int64_t epoch;
};
/// The loader is going away: waiting replicas fail, reading stops.
struct CloseLoader {};

// --- Messages of the LoaderActor, from its reader and transfer workers ---

/// Batch `index` of `epoch` as read, or the error that reading it raised.
struct BatchRead {
  int64_t epoch;
  int64_t index;
  HostBatch batch;
  std::exception_ptr error;
};
/// Batch `index` of `epoch` is on slot `slot`'s device, or failed to get there.
struct BatchOnDevice {
  int64_t epoch;
  int slot;
  int64_t index;
  DeviceBatch batch;
  std::exception_ptr error;
};

class LoaderActor : public Actor<LoaderActor, BeginEpoch, TakeBatch, LeaveEpoch, CloseLoader,
                                 BatchRead, BatchOnDevice> {
 public:
  LoaderActor(std::vector<Device> devices, int64_t source_size, LoaderLimits limits,
              ActorRef<BatchReader> reader, std::vector<ActorRef<TransferWorker>> workers);

  void handle(BeginEpoch& m, Promise<int64_t>&& reply);
  void handle(TakeBatch& m, Promise<std::optional<DeviceBatch>>&& reply);
  void handle(LeaveEpoch& m);
  void handle(CloseLoader& m);
  void handle(BatchRead& m);
  void handle(BatchOnDevice& m);

 private:
  // One device's view of the current epoch.
  struct Slot {
    int64_t joined_epoch = -1;  // the last epoch this slot began
    bool done = false;          // finished, failed or left the current epoch
    int64_t taken = 0;          // batches handed out this epoch
    int in_transfer = 0;
    std::map<int64_t, DeviceBatch> ready;  // by batch index; transfers may land out of order
    Promise<std::optional<DeviceBatch>> waiting_take;
    Promise<int64_t> waiting_begin;
  };

  void leave(int slot);
  void finish_epoch_if_over();
  void start_next_epoch_if_wanted();
  void serve(int slot);
  void dispatch();
  void read_ahead();
  void fail_from(int64_t index, std::exception_ptr error);
  [[nodiscard]] bool epoch_over() const;
  [[nodiscard]] int64_t next_index(int slot) const {
    return slots_[slot].taken * static_cast<int64_t>(slots_.size()) + slot;
  }

  const std::vector<Device> devices_;
  const int64_t per_device_;  // batches each device gets per epoch
  const LoaderLimits limits_;
  ActorRef<BatchReader> reader_;
  std::vector<ActorRef<TransferWorker>> workers_;
  std::size_t next_worker_ = 0;

  std::vector<Slot> slots_;
  int64_t epoch_ = -1;         // the current epoch; -1 before the first
  bool reading_open_ = false;  // the reader is inside the current epoch
  bool reading_ = false;       // a read is outstanding
  int64_t next_read_ = 0;
  std::deque<std::pair<int64_t, HostBatch>> host_queue_;  // read, not yet sent to a device
  int64_t failed_index_ = -1;
  std::exception_ptr failure_;
  bool closed_ = false;
};

// --- The reader: one thread reading the source, a batch per request ---

/// The source starts epoch `epoch`.
struct OpenEpoch {
  int64_t epoch;
};
/// Read batch `index` of `epoch` and send it to `loader`.
struct ReadBatch {
  int64_t epoch;
  int64_t index;
  ActorRef<LoaderActor> loader;
};
/// The source's epoch is over.
struct CloseEpoch {};

class BatchReader : public Actor<BatchReader, OpenEpoch, ReadBatch, CloseEpoch> {
 public:
  /// `stopping` turns remaining reads into no-ops once the loader is going away.
  BatchReader(BatchSource& source, const std::atomic<bool>& stopping)
      : source_(source), stopping_(stopping) {}

  void handle(OpenEpoch& m);
  void handle(ReadBatch& m);
  void handle(CloseEpoch& m);

 private:
  BatchSource& source_;
  const std::atomic<bool>& stopping_;
  int64_t epoch_ = -1;
  bool open_ = false;
};

// --- Transfer workers: host batch in, device tensors out ---

/// Move batch `index` of `epoch` to `device` and tell `loader`.
struct TransferBatch {
  int64_t epoch;
  int slot;
  Device device;
  int64_t index;
  HostBatch batch;
  ActorRef<LoaderActor> loader;
  std::shared_ptr<const PlaceField> place_field;  // null: tensor_from_bytes
};

class TransferWorker : public Actor<TransferWorker, TransferBatch> {
 public:
  explicit TransferWorker(const std::atomic<bool>& stopping) : stopping_(stopping) {}

  void handle(TransferBatch& m);

 private:
  const std::atomic<bool>& stopping_;
};

}  // namespace axle
