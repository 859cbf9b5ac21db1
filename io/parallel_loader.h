// io: the parallel loader of several devices, as torch_xla.distributed.parallel_loader — it
// reads a DataLoader's batches ahead on a thread of its own, moves them to the devices on
// transfer threads while the devices compute, and hands each device's replica its own stream.
// The actors doing the work (LoaderActor, its reader and transfer workers) are in actors/; this
// is the DataLoader side and the iteration replicas write.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "axle/actors/runtime/errors.h"
#include "axle/graph/device.h"
#include "axle/graph/sharding.h"
#include "axle/graph/tensor.h"
#include "axle/io/data_loader.h"

namespace axle {

class DeviceFeed;

/// A batch on a device: the DataLoader batch's fields, as device tensors in the same order.
using DeviceBatch = std::vector<Tensor>;

/// SPMD: how the parallel loader lays each batch out over the mesh as it places it, as
/// torch_xla's input_sharding=xs.ShardingSpec(mesh, partition_spec). A field whose rank is the
/// spec's length takes the spec; any other field (labels beside images) is split along
/// `batchdim` by the spec's entry for that dimension, its other dimensions replicated.
struct InputSharding {
  /// The mesh the batches are laid out over (ShardingSpec's mesh).
  Mesh mesh;
  /// The mesh axes of each dimension of a batch field (ShardingSpec's partition_spec).
  PartitionSpec partition_spec;
};

/// How a ParallelLoader prefetches and steps. The defaults are PyTorch/XLA's.
struct ParallelLoaderOptions {
  /// The dimension of each field that holds the batch (input_sharding splits fields along it).
  int batchdim = 0;
  /// Under use_spmd(): each device receives only its shard of every batch (null: whole batches,
  /// replicated on every device).
  std::optional<InputSharding> input_sharding;
  /// Iterating marks a step (mark_step) after every this many batches, and at the epoch's end.
  int batches_per_execution = 1;
  /// Host batches read ahead of the transfers.
  int loader_prefetch_size = 8;
  /// Batches per device moved (or being moved) to the device ahead of its replica.
  int device_prefetch_size = 4;
  /// Threads moving host batches to the devices.
  int host_to_device_transfer_threads = 1;
};

class PerDeviceLoader;

/// Feeds several devices from one DataLoader: batch i of an epoch goes to devices[i % n], and
/// every device gets loader.size() / n batches per epoch (the uneven last ones are left out, as
/// in PyTorch/XLA). Each device's replica iterates `per_device_loader(device)`, inside spawn or
/// from one thread; the devices' loaders advance together, since a device that falls behind by
/// more than the prefetch sizes holds the others back.
///
/// Reading, transfers and the replicas' compute overlap: while a device runs step k, batch k+1
/// and those after it are read and moved to it, up to the prefetch sizes; a replica's iteration
/// also asks for the batch after the one it holds, so that the reply is there when the loop comes
/// back for it. The metrics LoaderQueueDepth and DeviceQueueDepth record how many batches were
/// ready when a replica asked for one, and InputWaitTime how long it waited.
///
/// The DataLoader must outlive the ParallelLoader, and nothing else may iterate it meanwhile:
/// each epoch of the ParallelLoader is one epoch (one begin()) of the DataLoader. Destroying the
/// ParallelLoader stops its threads (a read under way finishes its batch) and joins them; its
/// iterators then throw LoaderError when used, and a replica waiting on one gets that error.
///
/// Devices begin an epoch together: a device's begin() waits until every device has finished or
/// left the previous epoch. One thread iterating several devices must therefore let all their
/// iterators reach the end, or destroy them all, before it begins the next epoch.
class ParallelLoader {
 public:
  /// Throws std::invalid_argument for no devices, a device given twice or an option out of
  /// range, and std::out_of_range for a device the process does not have.
  ParallelLoader(DataLoader& loader, std::vector<Device> devices,
                 ParallelLoaderOptions options = {});
  ~ParallelLoader();
  ParallelLoader(const ParallelLoader&) = delete;
  ParallelLoader& operator=(const ParallelLoader&) = delete;
  /// Per-device loaders keep working across a move.
  ParallelLoader(ParallelLoader&&) noexcept;
  /// As above, for move assignment; the loader assigned over first stops as when destroyed.
  ParallelLoader& operator=(ParallelLoader&&) noexcept;

  /// The stream of batches of `device`, one of devices(); throws std::invalid_argument for
  /// another device.
  [[nodiscard]] PerDeviceLoader per_device_loader(Device device) const;
  /// The devices fed, in the order batches are dealt to them.
  [[nodiscard]] const std::vector<Device>& devices() const noexcept;
  /// Batches each device gets per epoch.
  [[nodiscard]] int64_t per_device_size() const noexcept;
  /// The options the loader was made with.
  [[nodiscard]] const ParallelLoaderOptions& options() const noexcept { return options_; }

 private:
  ParallelLoaderOptions options_;
  std::shared_ptr<DeviceFeed> feed_;  // shared with the iterators, which outlive it safely
  // The DataLoader's count of the batches the loop took, which the devices' iterations keep
  // while this loader hands the batches out.
  std::shared_ptr<detail::LoaderProgress> progress_;
};

/// One device's batches of a ParallelLoader: `for (const DeviceBatch& batch : loader)` runs one
/// epoch on the calling thread. Once the ParallelLoader is destroyed, begin() and ++ throw
/// LoaderError.
class PerDeviceLoader {
 public:
  class Iterator;

  /// Starts this device's next epoch and waits for its first batch. The epoch starts once every
  /// device of the loader has finished (or left) the previous one; a begin() during an epoch
  /// leaves that epoch first.
  [[nodiscard]] Iterator begin() const;
  /// The end of the epoch, for range-for: an iterator past its last batch compares equal to it.
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Batches per epoch (len(per_device_loader) in PyTorch/XLA).
  [[nodiscard]] int64_t size() const noexcept { return size_; }
  /// The device whose batches these are.
  [[nodiscard]] Device device() const noexcept { return device_; }

 private:
  friend class ParallelLoader;
  PerDeviceLoader(std::shared_ptr<DeviceFeed> feed,
                  std::shared_ptr<detail::LoaderProgress> progress, int slot, Device device,
                  int batches_per_execution, int64_t size) noexcept
      : feed_(std::move(feed)),
        progress_(std::move(progress)),
        slot_(slot),
        device_(device),
        batches_per_execution_(batches_per_execution),
        size_(size) {}

  std::shared_ptr<DeviceFeed> feed_;
  std::shared_ptr<detail::LoaderProgress> progress_;
  int slot_;
  Device device_;
  int batches_per_execution_;
  int64_t size_;
};

/// Walks one device's epoch; compares equal to end() after the last batch. Leaving the loop
/// early (destroying the iterator before the end) tells the loader to stop preparing this
/// device's batches; batches already handed out stay valid.
class PerDeviceLoader::Iterator {
 public:
  /// A single-pass input iterator.
  using iterator_concept = std::input_iterator_tag;
  /// The device batch the iterator holds.
  using value_type = DeviceBatch;
  /// Signed distance type, as std::input_iterator requires.
  using difference_type = std::ptrdiff_t;

  Iterator() = default;
  ~Iterator();
  /// Takes over `other`'s place in the epoch; `other` is then at the end.
  Iterator(Iterator&& other) noexcept;
  /// As above, for move assignment; this iterator leaves its own epoch first.
  Iterator& operator=(Iterator&& other) noexcept;
  Iterator(const Iterator&) = delete;
  Iterator& operator=(const Iterator&) = delete;

  /// The current batch.
  [[nodiscard]] const DeviceBatch& operator*() const noexcept { return batch_; }
  /// As above, by pointer.
  [[nodiscard]] const DeviceBatch* operator->() const noexcept { return &batch_; }
  /// Marks a step when batches_per_execution batches went by since the last one, then waits for
  /// the next batch (marking a step for batches not yet stepped at the end). Throws LoaderError
  /// when the batch could not be loaded; the iterator is then at the end.
  Iterator& operator++();
  /// As operator++(), returning nothing (input iterators need not return a copy).
  void operator++(int) { ++*this; }
  /// Index of the current batch in this device's epoch.
  [[nodiscard]] int64_t index() const noexcept { return index_; }

  /// Whether `it` is past this device's last batch of the epoch (or default-constructed).
  friend bool operator==(const Iterator& it, std::default_sentinel_t) noexcept {
    return it.feed_ == nullptr;
  }

 private:
  friend class PerDeviceLoader;
  void leave() noexcept;

  std::shared_ptr<DeviceFeed> feed_;                  // null at the end
  std::shared_ptr<detail::LoaderProgress> progress_;  // counts each batch handed to the loop
  int slot_ = 0;
  int64_t epoch_ = 0;
  int batches_per_execution_ = 1;
  int since_step_ = 0;  // batches handed out since the last mark_step
  int64_t index_ = 0;
  DeviceBatch batch_;
};

/// A ParallelLoader of one device, as torch_xla's MpDeviceLoader:
/// `for (const DeviceBatch& batch : MpDeviceLoader(loader, device))`.
class MpDeviceLoader {
 public:
  /// Throws as ParallelLoader does.
  MpDeviceLoader(DataLoader& loader, Device device, ParallelLoaderOptions options = {})
      : parallel_(loader, {device}, options), per_device_(parallel_.per_device_loader(device)) {}

  /// Starts the next epoch and waits for its first batch, as PerDeviceLoader::begin().
  [[nodiscard]] PerDeviceLoader::Iterator begin() const { return per_device_.begin(); }
  /// The end of the epoch, for range-for.
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Batches per epoch: the DataLoader's.
  [[nodiscard]] int64_t size() const noexcept { return per_device_.size(); }

 private:
  ParallelLoader parallel_;
  PerDeviceLoader per_device_;
};

}  // namespace axle
