// io: the DataLoader's epochs. Workers take batch numbers in order from a shared counter and
// file their results under that number; the iterator takes them back in order. A window bounds
// how far the workers run ahead, so memory stays at a few batches whatever the epoch's length.
#include "axle/io/data_loader.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>

#include "axle/io/splitmix.h"

namespace axle {
namespace {

std::string describe(const CpuTensor& t) {
  return fmt::format("{}{}", dtype_name(t.dtype), t.shape.to_string());
}

// Stacks the samples' fields along a new first dimension; `indices` name the samples in errors.
Batch stack(const std::vector<Sample>& samples, std::span<const int64_t> indices) {
  const Sample& first = samples.front();
  Batch batch;
  batch.reserve(first.size());
  for (std::size_t f = 0; f < first.size(); ++f) {
    const CpuTensor& like = first[f];
    const std::size_t sample_bytes = like.bytes.size();
    Shape shape{static_cast<int64_t>(samples.size())};
    for (int64_t d : like.shape.dims()) shape.push_back(d);
    CpuTensor out{like.dtype, shape, std::vector<std::byte>(sample_bytes * samples.size())};
    for (std::size_t s = 0; s < samples.size(); ++s) {
      if (samples[s].size() != first.size()) {
        throw std::runtime_error(fmt::format(
            "DataLoader: sample {} has {} fields but sample {} of the same batch has {}",
            indices[s], samples[s].size(), indices[0], first.size()));
      }
      const CpuTensor& t = samples[s][f];
      if (t.dtype != like.dtype || !(t.shape == like.shape) || t.bytes.size() != sample_bytes) {
        throw std::runtime_error(fmt::format(
            "DataLoader: field {} of sample {} is {} but of sample {} in the same batch is {}; "
            "samples must match to be stacked",
            f, indices[s], describe(t), indices[0], describe(like)));
      }
      if (sample_bytes != 0)
        std::memcpy(out.bytes.data() + s * sample_bytes, t.bytes.data(), sample_bytes);
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

}  // namespace

class DataLoader::Epoch {
 public:
  // Batches first_batch, first_batch + 1, ... of `num_batches`.
  Epoch(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
        int64_t num_batches, std::vector<int64_t> order, int64_t first_batch)
      : dataset_(std::move(dataset)),
        batch_size_(options.batch_size),
        num_batches_(num_batches),
        window_(int64_t{options.num_workers} * options.prefetch_factor),
        order_(std::move(order)),
        next_assign_(first_batch),
        next_take_(first_batch) {
    try {
      for (int i = 0; i < options.num_workers; ++i) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~Epoch() { stop(); }
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;

  [[nodiscard]] int64_t num_batches() const noexcept { return num_batches_; }

  // Batch `k`, for k = first_batch, first_batch + 1, ... in turn; throws the error that
  // assembling it raised.
  Batch take(int64_t k) {
    if (workers_.empty()) return assemble(k);
    Result result;
    {
      std::unique_lock lock(mutex_);
      ready_cv_.wait(lock, [&] { return ready_.contains(k); });
      auto node = ready_.extract(k);
      result = std::move(node.mapped());
      next_take_ = k + 1;
    }
    space_cv_.notify_all();
    if (result.error) std::rethrow_exception(result.error);
    return std::move(result.batch);
  }

 private:
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    stop_flag_.store(true, std::memory_order_relaxed);
    space_cv_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      space_cv_.wait(lock, [&] {
        return stopping_ || next_assign_ >= num_batches_ || next_assign_ < next_take_ + window_;
      });
      if (stopping_ || next_assign_ >= num_batches_) return;
      const int64_t k = next_assign_++;
      lock.unlock();
      Result result;
      try {
        result.batch = assemble(k);
      } catch (...) {
        result.error = std::current_exception();
      }
      lock.lock();
      if (stopping_) return;
      ready_.emplace(k, std::move(result));
      ready_cv_.notify_all();
    }
  }

  Batch assemble(int64_t k) const {
    const int64_t begin = k * batch_size_;
    const int64_t end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(order_.size()));
    const std::span<const int64_t> indices(order_.data() + begin,
                                           static_cast<std::size_t>(end - begin));
    std::vector<Sample> samples;
    samples.reserve(indices.size());
    for (int64_t index : indices) {
      // A stopping epoch's batches are never read: give up between samples, not after all.
      if (stop_flag_.load(std::memory_order_relaxed)) return {};
      samples.push_back(dataset_->get(index));
    }
    return stack(samples, indices);
  }

  const std::shared_ptr<const Dataset> dataset_;
  const int64_t batch_size_;
  const int64_t num_batches_;
  const int64_t window_;
  const std::vector<int64_t> order_;

  std::mutex mutex_;
  std::condition_variable ready_cv_;  // a batch was filed
  std::condition_variable space_cv_;  // the window moved, or the epoch is stopping
  std::map<int64_t, Result> ready_;
  int64_t next_assign_ = 0;
  int64_t next_take_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stop_flag_{false};
  std::vector<std::thread> workers_;
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw std::invalid_argument("DataLoader: the dataset is null");
  if (options_.batch_size < 1) {
    throw std::invalid_argument(
        fmt::format("DataLoader: batch_size {} must be at least 1", options_.batch_size));
  }
  if (options_.num_workers < 0) {
    throw std::invalid_argument(
        fmt::format("DataLoader: num_workers {} is negative", options_.num_workers));
  }
  if (options_.prefetch_factor < 1) {
    throw std::invalid_argument(
        fmt::format("DataLoader: prefetch_factor {} must be at least 1", options_.prefetch_factor));
  }
  if (options_.sampler && options_.shuffle) {
    throw std::invalid_argument(
        "DataLoader: sampler option is mutually exclusive with shuffle (the sampler orders the "
        "samples)");
  }
  const int64_t n = samples_per_epoch();
  num_batches_ = options_.drop_last ? n / options_.batch_size
                                    : (n + options_.batch_size - 1) / options_.batch_size;
}

int64_t DataLoader::samples_per_epoch() const {
  return options_.sampler ? options_.sampler->size() : dataset_->size();
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

DataLoader::Iterator DataLoader::begin() {
  epoch_.reset();  // joins the previous epoch's workers before new ones start
  const int64_t epoch = next_epoch_++;
  std::vector<int64_t> order;
  if (options_.sampler) {
    order = options_.sampler->indices();
  } else {
    order.resize(static_cast<std::size_t>(dataset_->size()));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  if (options_.shuffle) {
    // Fisher-Yates on SplitMix64, not std::shuffle, whose result differs between libraries.
    detail::SplitMix64 stream(options_.seed, static_cast<uint64_t>(epoch));
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[stream.next_below(i)]);
    }
  }
  const int64_t first = std::exchange(first_batch_, 0);
  // The loop takes batch `first` with this begin(), unless a ParallelLoader hands it out.
  const bool counted = !progress_->fed.load(std::memory_order_relaxed);
  progress_->epoch.store(epoch, std::memory_order_relaxed);
  progress_->taken.store(first + (counted && first < num_batches_ ? 1 : 0),
                         std::memory_order_relaxed);
  Iterator it;
  it.progress_ = progress_.get();
  if (first >= num_batches_) return it;
  epoch_ = std::make_unique<Epoch>(dataset_, options_, num_batches_, std::move(order), first);
  it.epoch_ = epoch_.get();
  it.index_ = first;
  it.batch_ = epoch_->take(first);
  return it;
}

void DataLoader::resume_at(int64_t epoch, int64_t batch) {
  if (epoch < 0 || batch < 0 || batch > num_batches_) {
    throw std::invalid_argument(fmt::format(
        "DataLoader.resume_at: epoch {} batch {} is not a position of a loader of {} batches an "
        "epoch",
        epoch, batch, num_batches_));
  }
  next_epoch_ = epoch;
  first_batch_ = batch;
  progress_->epoch.store(epoch, std::memory_order_relaxed);
  progress_->taken.store(batch, std::memory_order_relaxed);
}

void DataLoader::set_epoch(int64_t epoch) noexcept {
  next_epoch_ = epoch;
  progress_->epoch.store(epoch, std::memory_order_relaxed);
  progress_->taken.store(first_batch_, std::memory_order_relaxed);
}

DataLoaderState DataLoader::state_dict() const {
  const DataLoaderState state{.epoch = progress_->epoch.load(std::memory_order_relaxed),
                              .batch = progress_->taken.load(std::memory_order_relaxed),
                              .batches = num_batches_,
                              .samples = samples_per_epoch(),
                              .batch_size = options_.batch_size,
                              .shuffle = options_.shuffle,
                              .seed = options_.seed};
  return state;
}

std::string DataLoader::state_mismatch(const DataLoaderState& state) const {
  const auto differs = [](std::string_view field, auto saved, auto mine) {
    return fmt::format("the state is of a loader with {} {}, this one has {}", field, saved, mine);
  };
  if (state.batch_size != options_.batch_size) {
    return differs("batch_size", state.batch_size, options_.batch_size);
  }
  if (state.shuffle != options_.shuffle) return differs("shuffle", state.shuffle, options_.shuffle);
  if (state.seed != options_.seed) return differs("seed", state.seed, options_.seed);
  // A shuffled epoch's order depends on its length; an ordered one's first batches do not.
  if (options_.shuffle && state.samples != samples_per_epoch()) {
    return differs("samples per epoch", state.samples, samples_per_epoch());
  }
  if (options_.shuffle && state.batches != num_batches_) {
    return differs("batches per epoch", state.batches, num_batches_);
  }
  if (state.epoch < 0 || state.batch < 0 || state.batch > num_batches_) {
    return fmt::format("epoch {} batch {} is not a position of a loader of {} batches an epoch",
                       state.epoch, state.batch, num_batches_);
  }
  return {};
}

void DataLoader::load_state_dict(const DataLoaderState& state) {
  if (const std::string why = state_mismatch(state); !why.empty()) {
    throw std::invalid_argument("DataLoader.load_state_dict: " + why);
  }
  // An epoch the loop took whole is done: the next one starts, unless this loader's epochs are
  // longer (a longer run's), which go on from there.
  if (state.batch == state.batches && state.batches == num_batches_) {
    resume_at(state.epoch + 1, 0);
  } else {
    resume_at(state.epoch, state.batch);
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (epoch_ == nullptr) return *this;
  if (index_ + 1 >= epoch_->num_batches()) {
    epoch_ = nullptr;
    batch_ = {};
    return *this;
  }
  ++index_;
  batch_.clear();  // if batch index_ failed, the iterator holds no stale batch
  batch_ = epoch_->take(index_);
  if (!progress_->fed.load(std::memory_order_relaxed)) {
    progress_->taken.fetch_add(1, std::memory_order_relaxed);
  }
  return *this;
}

}  // namespace axle
