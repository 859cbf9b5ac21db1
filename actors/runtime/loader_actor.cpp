// actors: the LoaderActor's flow control, its reader and its transfer workers. Batches move
// source -> host queue -> transfer -> device queue -> replica; every queue is bounded, so a slow
// replica stops the reader instead of piling up batches.
#include "axle/actors/runtime/loader_actor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "axle/engine/exception_text.h"
#include "axle/engine/metrics.h"
#include "axle/engine/trace.h"

namespace axle {
namespace {

// Fails `promise` with a LoaderError saying `what`. The error is made first and then handed
// over whole, so that this thread keeps no share of it once the replica wakes: libstdc++ shares
// an exception and its message by reference counts that ThreadSanitizer cannot see, and a last
// release here would look like a race with the replica's reading of the message.
template <class T>
void fail(Promise<T>& promise, const std::string& what) {
  std::exception_ptr error = std::make_exception_ptr(LoaderError(what));
  promise.set_error(std::move(error));
}

}  // namespace

LoaderActor::LoaderActor(std::vector<Device> devices, int64_t source_size, LoaderLimits limits,
                         ActorRef<BatchReader> reader,
                         std::vector<ActorRef<TransferWorker>> workers)
    : devices_(std::move(devices)),
      per_device_(source_size / static_cast<int64_t>(devices_.size())),
      limits_(limits),
      reader_(std::move(reader)),
      workers_(std::move(workers)),
      slots_(devices_.size()) {}

void LoaderActor::handle(BeginEpoch& m, Promise<int64_t>&& reply) {
  if (closed_) {
    fail(reply, "ParallelLoader: the loader is closed");
    return;
  }
  Slot& slot = slots_[m.slot];
  // A second begin() abandons the iteration in progress, as the host DataLoader's does.
  if (epoch_ >= 0 && slot.joined_epoch == epoch_ && !slot.done) leave(m.slot);
  if (slot.joined_epoch < epoch_) {
    slot.joined_epoch = epoch_;
    reply.set_value(epoch_);
    return;
  }
  slot.waiting_begin = std::move(reply);
  start_next_epoch_if_wanted();
}

void LoaderActor::handle(TakeBatch& m, Promise<std::optional<DeviceBatch>>&& reply) {
  if (closed_) {
    fail(reply, "ParallelLoader: the loader is closed");
    return;
  }
  Slot& slot = slots_[m.slot];
  if (slot.joined_epoch != epoch_ || slot.done) {
    reply.set_value(std::nullopt);
    return;
  }
  // What the replica found when it asked: how far ahead the loader was.
  AXLE_METRIC_ADD("LoaderQueueDepth", MetricKind::kValue, static_cast<double>(host_queue_.size()));
  AXLE_METRIC_ADD("DeviceQueueDepth", MetricKind::kValue,
                  static_cast<double>(slot.ready.size() + slot.in_transfer));
  if (slot.taken == per_device_) {
    slot.done = true;
    reply.set_value(std::nullopt);
    finish_epoch_if_over();
    return;
  }
  slot.waiting_take = std::move(reply);
  serve(m.slot);
}

void LoaderActor::handle(LeaveEpoch& m) {
  const Slot& slot = slots_[m.slot];
  if (!closed_ && m.epoch == epoch_ && slot.joined_epoch == epoch_ && !slot.done) leave(m.slot);
}

void LoaderActor::handle(CloseLoader&) {
  closed_ = true;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const std::string what = fmt::format(
        "ParallelLoader: the loader was destroyed while {} waited for it", devices_[i].to_string());
    if (slots_[i].waiting_take.pending()) fail(slots_[i].waiting_take, what);
    if (slots_[i].waiting_begin.pending()) fail(slots_[i].waiting_begin, what);
    slots_[i].ready.clear();
  }
  host_queue_.clear();
  if (reading_open_) reader_.tell(CloseEpoch{});
  reading_open_ = false;
}

void LoaderActor::handle(BatchRead& m) {
  if (closed_ || m.epoch != epoch_) return;  // a read of an epoch that ended meanwhile
  reading_ = false;
  if (m.error) {
    fail_from(m.index, m.error);
    return;
  }
  if (failure_ && m.index >= failed_index_) return;
  host_queue_.emplace_back(m.index, std::move(m.batch));
  dispatch();
  read_ahead();
}

void LoaderActor::handle(BatchOnDevice& m) {
  if (closed_ || m.epoch != epoch_) return;
  Slot& slot = slots_[m.slot];
  --slot.in_transfer;
  if (m.error) {
    fail_from(m.index, m.error);
  } else if (!slot.done) {
    slot.ready.emplace(m.index, std::move(m.batch));
    serve(m.slot);
  }
  dispatch();
  read_ahead();
}

void LoaderActor::leave(int index) {
  Slot& slot = slots_[index];
  slot.done = true;
  slot.ready.clear();  // queued batches of this slot are dropped, and dispatch() drops later ones
  if (slot.waiting_take.pending()) slot.waiting_take.set_value(std::nullopt);
  dispatch();
  read_ahead();
  finish_epoch_if_over();
}

bool LoaderActor::epoch_over() const {
  return epoch_ < 0 || std::all_of(slots_.begin(), slots_.end(), [&](const Slot& slot) {
           return slot.joined_epoch == epoch_ && slot.done;
         });
}

void LoaderActor::finish_epoch_if_over() {
  if (!epoch_over()) return;
  if (reading_open_) {
    reader_.tell(CloseEpoch{});
    reading_open_ = false;
  }
  host_queue_.clear();
  start_next_epoch_if_wanted();
}

void LoaderActor::start_next_epoch_if_wanted() {
  const bool wanted = std::any_of(slots_.begin(), slots_.end(),
                                  [](const Slot& slot) { return slot.waiting_begin.pending(); });
  if (!wanted || !epoch_over()) return;
  ++epoch_;
  host_queue_.clear();
  next_read_ = 0;
  reading_ = false;
  failed_index_ = -1;
  failure_ = nullptr;
  reader_.tell(OpenEpoch{epoch_});
  reading_open_ = true;
  // Transfers of the previous epoch still under way are dropped when they land (epoch tag).
  for (Slot& slot : slots_) {
    slot.done = false;
    slot.taken = 0;
    slot.in_transfer = 0;
    slot.ready.clear();
    if (slot.waiting_begin.pending()) {
      slot.joined_epoch = epoch_;
      slot.waiting_begin.set_value(epoch_);
    }
  }
  read_ahead();
}

void LoaderActor::serve(int index) {
  Slot& slot = slots_[index];
  if (!slot.waiting_take.pending()) return;
  const int64_t wanted = next_index(index);
  // Batches after a failed one are not handed out, even those that made it to a device.
  if (failure_ && wanted >= failed_index_) {
    slot.done = true;
    slot.waiting_take.set_error(failure_);
    finish_epoch_if_over();
  } else if (!slot.ready.empty() && slot.ready.begin()->first == wanted) {
    auto node = slot.ready.extract(slot.ready.begin());
    ++slot.taken;
    slot.waiting_take.set_value(std::move(node.mapped()));
    dispatch();  // the slot has room again
    read_ahead();
  }
}

void LoaderActor::dispatch() {
  if (closed_) return;
  const auto n = static_cast<int64_t>(slots_.size());
  for (auto it = host_queue_.begin(); it != host_queue_.end();) {
    const int index = static_cast<int>(it->first % n);
    Slot& slot = slots_[index];
    if (slot.done) {
      it = host_queue_.erase(it);
      continue;
    }
    // A full device queue holds back only its own batches; later ones for other devices go on.
    if (static_cast<int>(slot.ready.size()) + slot.in_transfer >= limits_.device_prefetch_size) {
      ++it;
      continue;
    }
    ++slot.in_transfer;
    ActorRef<TransferWorker>& worker = workers_[next_worker_++ % workers_.size()];
    worker.tell(TransferBatch{epoch_, index, devices_[index], it->first, std::move(it->second),
                              self(), limits_.place_field});
    it = host_queue_.erase(it);
  }
}

void LoaderActor::read_ahead() {
  if (closed_ || !reading_open_ || reading_ || failure_) return;
  if (next_read_ >= per_device_ * static_cast<int64_t>(slots_.size())) return;
  if (static_cast<int>(host_queue_.size()) >= limits_.loader_prefetch_size) return;
  if (std::all_of(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.done; })) return;
  reading_ = true;
  reader_.tell(ReadBatch{epoch_, next_read_++, self()});
}

void LoaderActor::fail_from(int64_t index, std::exception_ptr error) {
  if (failure_ && failed_index_ <= index) return;
  failed_index_ = index;
  failure_ = std::move(error);
  std::erase_if(host_queue_, [&](const auto& entry) { return entry.first >= failed_index_; });
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) serve(i);
}

void BatchReader::handle(OpenEpoch& m) {
  if (open_) source_.end_epoch();
  source_.begin_epoch();
  epoch_ = m.epoch;
  open_ = true;
}

void BatchReader::handle(ReadBatch& m) {
  // Reads left over from an epoch that ended, or from a loader going away, are not made.
  if (stopping_.load(std::memory_order_relaxed) || !open_ || m.epoch != epoch_) return;
  BatchRead read{m.epoch, m.index, {}, nullptr};
  const Trace span("loader read", "loader");
  try {
    read.batch = source_.next();
  } catch (...) {
    const std::exception_ptr original = std::current_exception();
    read.error = std::make_exception_ptr(
        LoaderError(fmt::format("ParallelLoader: batch {} of the epoch could not be read: {}",
                                m.index, exception_text(original)),
                    original));
  }
  m.loader.tell(std::move(read));
}

void BatchReader::handle(CloseEpoch&) {
  if (open_) source_.end_epoch();
  open_ = false;
}

namespace {

std::exception_ptr transfer_error(int64_t index, Device device, std::exception_ptr original) {
  return std::make_exception_ptr(
      LoaderError(fmt::format("ParallelLoader: batch {} of the epoch could not be moved to {}: {}",
                              index, device.to_string(), exception_text(original)),
                  original));
}

// A batch whose copies the device has yet to make. The last field to land sends it to the loader.
struct Landing {
  BatchOnDevice batch;
  Device device;
  ActorRef<LoaderActor> loader;
  std::atomic<std::size_t> pending{0};

  void field_landed() {
    if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    for (const Tensor& field : batch.batch) {
      if (field.impl()->data()->failed()) {
        batch.error = transfer_error(batch.index, device, field.impl()->data()->error());
        batch.batch.clear();
        break;
      }
    }
    loader.tell(std::move(batch));
  }
};

}  // namespace

void TransferWorker::handle(TransferBatch& m) {
  if (stopping_.load(std::memory_order_relaxed)) return;
  auto landing = std::make_shared<Landing>();
  landing->batch = BatchOnDevice{m.epoch, m.slot, m.index, {}, nullptr};
  landing->device = m.device;
  landing->loader = m.loader;
  DeviceBatch& fields = landing->batch.batch;
  const Trace span("loader transfer", "loader");
  try {
    fields.reserve(m.batch.size());
    for (CpuTensor& field : m.batch) {
      // The batch is this message's own: its bytes move to the device without another copy.
      fields.push_back(m.place_field ? (*m.place_field)(field, m.device)
                                     : tensor_from_host(std::move(field), m.device));
    }
  } catch (...) {
    fields.clear();
    landing->batch.error = transfer_error(m.index, m.device, std::current_exception());
    m.loader.tell(std::move(landing->batch));
    return;
  }
  // The batch goes to its device queue only once its data is on the device. The device copies
  // it in the order its messages arrive, and those from this thread and from the replica are not
  // ordered: a replica's step reading a batch still on the way could come first and wait at the
  // head of the device's queue for a copy queued behind it.
  landing->pending.store(fields.size() + 1, std::memory_order_relaxed);
  for (const Tensor& field : fields) {
    field.impl()->data()->when_done([landing] { landing->field_landed(); });
  }
  landing->field_landed();  // the +1: no field may send the batch before every wait is set
}

}  // namespace axle
