// io: the host DataLoader (PyTorch's torch.utils.data.DataLoader): batches of a Dataset, in
// order or shuffled, assembled ahead by worker threads. It is what a LoaderActor reads from
// before moving batches to the devices.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

#include "axle/io/dataset.h"
#include "axle/io/sampler.h"

namespace axle {

/// How a DataLoader batches its dataset. The defaults are PyTorch's.
struct DataLoaderOptions {
  int64_t batch_size = 1;   ///< samples per batch
  bool shuffle = false;     ///< a new permutation of the samples each epoch
  uint64_t seed = 0;        ///< with shuffle: epoch e's order depends only on (seed, e)
  bool drop_last = false;   ///< leave out the last batch when it would be smaller
  int num_workers = 0;      ///< threads assembling batches ahead; 0: on the iterating thread
  int prefetch_factor = 2;  ///< batches each worker may have ready ahead of the iteration
  /// Which samples each epoch visits, in order (e.g. a DistributedSampler); null: all of them.
  /// Exclusive with shuffle, as in PyTorch. Read at every begin(), so set_epoch on it applies
  /// from the next epoch.
  std::shared_ptr<const Sampler> sampler;
};

/// Where the loop stands in a DataLoader's batches, as torchdata's StatefulDataLoader keeps it:
/// what DataLoader::state_dict() gives and load_state_dict() takes (CheckpointManager saves it
/// with TrainingState::data_loader). The options that fix each epoch's batches come along, so that
/// a position is never applied to other batches.
struct DataLoaderState {
  int64_t epoch = 0;    ///< the epoch the loop is in (the last one begun)
  int64_t batch = 0;    ///< batches of it the loop has taken
  int64_t batches = 0;  ///< batches per epoch
  int64_t samples = 0;  ///< samples per epoch (the sampler's, or the dataset's)
  /// The loader's DataLoaderOptions::batch_size.
  int64_t batch_size = 1;
  /// The loader's DataLoaderOptions::shuffle.
  bool shuffle = false;
  /// The loader's DataLoaderOptions::seed.
  uint64_t seed = 0;

  /// Field-by-field equality.
  friend bool operator==(const DataLoaderState&, const DataLoaderState&) = default;
};

namespace detail {
/// The batches the loop has taken, shared by a DataLoader and what hands its batches to the loop:
/// its own iterators, or a ParallelLoader's (then the loader's reading ahead does not count).
struct LoaderProgress {
  std::atomic<int64_t> epoch{0};
  std::atomic<int64_t> taken{0};
  std::atomic<bool> fed{false};  // a ParallelLoader hands the batches out
};
}  // namespace detail

/// Batches of a dataset: `for (const Batch& batch : loader)` runs one epoch. Each field of the
/// samples is stacked into a tensor of [batch_size, ...] (the last may be smaller unless
/// drop_last). Batches come out in the same order and with the same content for any number of
/// workers; each begin() starts the next epoch, with a new order when shuffling.
///
/// With workers, the batches after k are assembled while the caller uses batch k, at most
/// num_workers * prefetch_factor batches ahead. An error from the dataset (or samples that do
/// not stack) is thrown by the iterator when the iteration reaches that batch. Leaving the loop
/// early, starting another epoch, or destroying the loader stops the workers and waits for them.
/// Iterators are invalidated by the next begin() and by destroying the loader.
class DataLoader {
 public:
  class Iterator;

  /// Throws std::invalid_argument for a null dataset, batch_size < 1, num_workers < 0,
  /// prefetch_factor < 1, or a sampler with shuffle.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  /// Takes a dataset by value (moved in, shared with the workers).
  template <std::derived_from<Dataset> D>
  explicit DataLoader(D dataset, DataLoaderOptions options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<D>(std::move(dataset))),
                   options) {}
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  /// Moving keeps the epoch in progress and its iterators valid; assigning over a loader stops
  /// that loader's epoch first.
  DataLoader(DataLoader&&) noexcept;
  /// As above, for move assignment.
  DataLoader& operator=(DataLoader&&) noexcept;

  /// Samples per epoch: the sampler's, or the dataset's.
  [[nodiscard]] int64_t samples_per_epoch() const;
  /// Batches per epoch (len(loader) in PyTorch).
  [[nodiscard]] int64_t size() const noexcept { return num_batches_; }
  /// The dataset the batches come from.
  [[nodiscard]] const Dataset& dataset() const noexcept { return *dataset_; }
  /// The options the loader was made with.
  [[nodiscard]] const DataLoaderOptions& options() const noexcept { return options_; }
  /// The epoch the next begin() starts: 0 at first, one more after each begin().
  [[nodiscard]] int64_t epoch() const noexcept { return next_epoch_; }
  /// Makes the next begin() start epoch `epoch` (to resume a run with its shuffled orders).
  void set_epoch(int64_t epoch) noexcept;
  /// Makes the next begin() start epoch `epoch` at its batch `batch`, the batches before it not
  /// read: a run restored from a checkpoint taken inside an epoch gets the rest of that epoch,
  /// the same batches in the same order (iterators' index() counts from `batch`). Later epochs
  /// start at batch 0. Throws std::invalid_argument for a negative epoch or a batch outside
  /// [0, size()].
  void resume_at(int64_t epoch, int64_t batch);
  /// Batches the next begin() gives: size(), less those resume_at leaves out.
  [[nodiscard]] int64_t next_epoch_size() const noexcept { return num_batches_ - first_batch_; }

  /// Where the loop stands: the epoch in progress (the last one begun) and the batches of it the
  /// loop has taken, the batch it holds included (all of them once the epoch is done) — through
  /// a ParallelLoader or MpDeviceLoader the batches its devices' iterations took, not those read
  /// or moved to the devices ahead.
  [[nodiscard]] DataLoaderState state_dict() const;
  /// Makes the next begin() go on where `state` stood (resume_at): the batches after the ones
  /// taken, none lost or repeated; after an epoch taken whole, the next epoch (epoch() tells
  /// which), unless this loader's epochs have more batches (an ordered loader of a longer run),
  /// which go on with that epoch. Throws std::invalid_argument with state_mismatch's reason when
  /// `state` comes from a loader of other batches.
  void load_state_dict(const DataLoaderState& state);
  /// Why `state` does not apply to this loader, naming the field — another batch_size, shuffle or
  /// seed; with shuffle, another count of samples or batches per epoch (a shuffled order depends
  /// on them; an ordered loader of more batches, a longer run's, goes on from the same position);
  /// a position outside an epoch — or empty when it does.
  [[nodiscard]] std::string state_mismatch(const DataLoaderState& state) const;

  /// Starts an epoch (stopping one in progress) and waits for its first batch.
  [[nodiscard]] Iterator begin();
  /// The end of the epoch, for range-for: an iterator past its last batch compares equal to it.
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

 private:
  class Epoch;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t num_batches_ = 0;
  int64_t next_epoch_ = 0;
  int64_t first_batch_ = 0;  // of the next epoch (resume_at)
  std::unique_ptr<Epoch> epoch_;
  std::shared_ptr<detail::LoaderProgress> progress_ = std::make_shared<detail::LoaderProgress>();
  friend class ParallelLoader;  // hands the batches out, and counts them (progress_)
};

/// Walks one epoch's batches; compares equal to end() after the last.
class DataLoader::Iterator {
 public:
  /// A single-pass input iterator.
  using iterator_concept = std::input_iterator_tag;
  /// The host batch the iterator holds.
  using value_type = Batch;
  /// Signed distance type, as std::input_iterator requires.
  using difference_type = std::ptrdiff_t;

  Iterator() = default;
  /// Moves the position and the current batch.
  Iterator(Iterator&&) noexcept = default;
  /// As above, for move assignment.
  Iterator& operator=(Iterator&&) noexcept = default;

  /// The current batch.
  [[nodiscard]] const Batch& operator*() const noexcept { return batch_; }
  /// As above, by pointer.
  [[nodiscard]] const Batch* operator->() const noexcept { return &batch_; }
  /// Moves the current batch out, for a consumer that keeps batches (the ParallelLoader's
  /// reader); the iterator holds none until the next ++.
  [[nodiscard]] Batch take() noexcept { return std::move(batch_); }
  /// Moves to the next batch, waiting for it; throws the error of a batch that failed.
  Iterator& operator++();
  /// As operator++(), returning nothing (input iterators need not return a copy).
  void operator++(int) { ++*this; }
  /// Index of the current batch in the epoch.
  [[nodiscard]] int64_t index() const noexcept { return index_; }

  /// Whether `it` is past the epoch's last batch (or default-constructed).
  friend bool operator==(const Iterator& it, std::default_sentinel_t) noexcept {
    return it.epoch_ == nullptr;
  }

 private:
  friend class DataLoader;
  Epoch* epoch_ = nullptr;  // null once past the last batch
  Batch batch_;
  int64_t index_ = 0;
  detail::LoaderProgress* progress_ = nullptr;  // the loader's; counts unless it is fed
};

}  // namespace axle
