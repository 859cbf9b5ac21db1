// io: the ParallelLoader — a DataLoader as the LoaderActor's batch source, and the per-device
// iteration that marks steps.
#include "axle/io/parallel_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "axle/actors/host/api.h"
#include "axle/actors/host/replica_host.h"
#include "axle/actors/runtime/device_feed.h"
#include "axle/graph/spmd.h"

namespace axle {
namespace {

// One epoch of the DataLoader per epoch of the loader, read by the loader's reader thread.
class DataLoaderSource final : public BatchSource {
 public:
  // The epochs are of the size of the DataLoader's next one: a loader resumed inside an epoch
  // (DataLoader::resume_at) gives the rest of it.
  explicit DataLoaderSource(DataLoader& loader)
      : loader_(loader), size_(loader.next_epoch_size()) {}

  int64_t size() const override { return size_; }
  // The DataLoader's begin() already reads the first batch: it waits for the first next(), so
  // that a failure there is reported as batch 0's.
  void begin_epoch() override { iterator_.reset(); }
  HostBatch next() override {
    if (iterator_) {
      ++*iterator_;
    } else {
      if (loader_.next_epoch_size() != size_) {
        throw std::invalid_argument(fmt::format(
            "the DataLoader's next epoch has {} batches, not the {} of the epoch this "
            "ParallelLoader was made for (after DataLoader::resume_at, make a ParallelLoader for "
            "the rest of that epoch and another for the epochs after it)",
            loader_.next_epoch_size(), size_));
      }
      iterator_.emplace(loader_.begin());
    }
    return iterator_->take();
  }
  void end_epoch() override { iterator_.reset(); }

 private:
  DataLoader& loader_;
  const int64_t size_;
  std::optional<DataLoader::Iterator> iterator_;
};

std::string device_list(const std::vector<Device>& devices) {
  std::string list;
  for (const Device d : devices) list += (list.empty() ? "" : ", ") + d.to_string();
  return list;
}

void check_at_least(const char* name, int value, int least) {
  if (value < least) {
    throw std::invalid_argument(
        fmt::format("ParallelLoader: {} is {}, must be at least {}", name, value, least));
  }
}

}  // namespace

ParallelLoader::ParallelLoader(DataLoader& loader, std::vector<Device> devices,
                               ParallelLoaderOptions options)
    : options_(options), progress_(loader.progress_) {
  if (devices.empty()) throw std::invalid_argument("ParallelLoader: no devices given");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    (void)axle::device(devices[i].ordinal);  // throws std::out_of_range for a missing device
    if (std::find(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(i), devices[i]) !=
        devices.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw std::invalid_argument(fmt::format("ParallelLoader: {} is given twice in [{}]",
                                              devices[i].to_string(), device_list(devices)));
    }
  }
  check_at_least("batchdim", options.batchdim, 0);
  check_at_least("batches_per_execution", options.batches_per_execution, 1);
  check_at_least("loader_prefetch_size", options.loader_prefetch_size, 1);
  check_at_least("device_prefetch_size", options.device_prefetch_size, 1);
  check_at_least("host_to_device_transfer_threads", options.host_to_device_transfer_threads, 1);
  std::shared_ptr<const PlaceField> place_field;
  if (options.input_sharding) {
    place_field = std::make_shared<const PlaceField>(
        [sharding = *options.input_sharding, batchdim = options.batchdim](const CpuTensor& field,
                                                                          Device device) {
          const int rank = field.shape.rank();
          PartitionSpec spec = sharding.partition_spec;
          if (static_cast<int>(spec.size()) != rank) {
            const std::size_t from = static_cast<std::size_t>(batchdim);
            if (batchdim >= rank || from >= sharding.partition_spec.size()) {
              throw std::invalid_argument(fmt::format(
                  "ParallelLoader input_sharding {}: a batch field of shape {} has no batchdim {}",
                  to_string(sharding.partition_spec), field.shape.to_string(), batchdim));
            }
            spec.assign(static_cast<std::size_t>(rank), PartitionDim(std::nullopt));
            spec[from] = sharding.partition_spec[from];
          }
          return spmd::tensor_from_host_sharded(field, sharding.mesh, spec, device);
        });
  }
  feed_ = std::make_shared<DeviceFeed>(
      std::make_unique<DataLoaderSource>(loader), std::move(devices),
      LoaderLimits{.loader_prefetch_size = options.loader_prefetch_size,
                   .device_prefetch_size = options.device_prefetch_size,
                   .place_field = std::move(place_field)},
      options.host_to_device_transfer_threads);
  // From here on the loop takes the batches from the devices' iterations, not from the
  // DataLoader's, which reads ahead.
  progress_->fed.store(true, std::memory_order_relaxed);
}

ParallelLoader::~ParallelLoader() {
  if (feed_) feed_->close();
  if (progress_) progress_->fed.store(false, std::memory_order_relaxed);
}

ParallelLoader::ParallelLoader(ParallelLoader&&) noexcept = default;

ParallelLoader& ParallelLoader::operator=(ParallelLoader&& other) noexcept {
  if (this != &other) {
    if (feed_) feed_->close();
    if (progress_) progress_->fed.store(false, std::memory_order_relaxed);
    options_ = other.options_;
    feed_ = std::move(other.feed_);
    progress_ = std::move(other.progress_);
  }
  return *this;
}

PerDeviceLoader ParallelLoader::per_device_loader(Device device) const {
  const int slot = feed_->slot_of(device);
  if (slot < 0) {
    throw std::invalid_argument(
        fmt::format("ParallelLoader: per_device_loader({}) of a loader of [{}]", device.to_string(),
                    device_list(feed_->devices())));
  }
  return PerDeviceLoader(feed_, progress_, slot, device, options_.batches_per_execution,
                         feed_->per_device_size());
}

const std::vector<Device>& ParallelLoader::devices() const noexcept { return feed_->devices(); }

int64_t ParallelLoader::per_device_size() const noexcept { return feed_->per_device_size(); }

PerDeviceLoader::Iterator PerDeviceLoader::begin() const {
  Iterator it;
  it.slot_ = slot_;
  it.batches_per_execution_ = batches_per_execution_;
  it.epoch_ = feed_->begin_epoch(slot_);
  it.feed_ = feed_;  // from here on, the iterator leaves the epoch when destroyed
  it.progress_ = progress_;
  std::optional<DeviceBatch> first;
  try {
    first = feed_->next(slot_, ReplicaHost::current().account().get());
  } catch (...) {
    it.feed_ = nullptr;  // the loader ended this device's epoch with the error
    throw;
  }
  if (first) {
    it.batch_ = std::move(*first);
    it.progress_->taken.fetch_add(1, std::memory_order_relaxed);
  } else {
    it.feed_ = nullptr;
  }
  return it;
}

PerDeviceLoader::Iterator::~Iterator() { leave(); }

PerDeviceLoader::Iterator::Iterator(Iterator&& other) noexcept
    : feed_(std::exchange(other.feed_, nullptr)),
      progress_(std::move(other.progress_)),
      slot_(other.slot_),
      epoch_(other.epoch_),
      batches_per_execution_(other.batches_per_execution_),
      since_step_(other.since_step_),
      index_(other.index_),
      batch_(std::move(other.batch_)) {}

PerDeviceLoader::Iterator& PerDeviceLoader::Iterator::operator=(Iterator&& other) noexcept {
  if (this != &other) {
    leave();
    feed_ = std::exchange(other.feed_, nullptr);
    progress_ = std::move(other.progress_);
    slot_ = other.slot_;
    epoch_ = other.epoch_;
    batches_per_execution_ = other.batches_per_execution_;
    since_step_ = other.since_step_;
    index_ = other.index_;
    batch_ = std::move(other.batch_);
  }
  return *this;
}

void PerDeviceLoader::Iterator::leave() noexcept {
  if (feed_ != nullptr) feed_->leave(slot_, epoch_);
  feed_.reset();
}

PerDeviceLoader::Iterator& PerDeviceLoader::Iterator::operator++() {
  if (feed_ == nullptr) return *this;
  batch_.clear();
  if (++since_step_ >= batches_per_execution_) {
    since_step_ = 0;
    detail::loader_step(std::source_location::current());
  }
  std::optional<DeviceBatch> next;
  try {
    next = feed_->next(slot_, ReplicaHost::current().account().get());
  } catch (...) {
    feed_ = nullptr;
    throw;
  }
  if (!next) {
    feed_ = nullptr;
    if (since_step_ > 0) {
      since_step_ = 0;
      detail::loader_step(std::source_location::current());
    }
    return *this;
  }
  batch_ = std::move(*next);
  ++index_;
  progress_->taken.fetch_add(1, std::memory_order_relaxed);
  return *this;
}

}  // namespace axle
