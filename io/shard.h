// io: one replica's share of a dataset, as PyTorch's DistributedSampler with drop_last: replica
// r of n sees samples r, r + n, r + 2n, ..., and every replica the same number of them.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <stdexcept>

#include "axle/io/dataset.h"

namespace axle {

/// Replica `rank`'s share of `dataset` among `num_replicas`: sample i is the dataset's sample
/// i * num_replicas + rank, and the tail that does not split evenly is left out.
class ShardedDataset final : public Dataset {
 public:
  /// Throws std::invalid_argument for a null dataset or a rank outside [0, num_replicas).
  ShardedDataset(std::shared_ptr<const Dataset> dataset, int num_replicas, int rank)
      : dataset_(std::move(dataset)), num_replicas_(num_replicas), rank_(rank) {
    if (!dataset_ || num_replicas < 1 || rank < 0 || rank >= num_replicas) {
      throw std::invalid_argument(fmt::format("ShardedDataset: rank {} of {} replicas over {}",
                                              rank, num_replicas,
                                              dataset_ ? "a dataset" : "no dataset"));
    }
  }
  [[nodiscard]] int64_t size() const override { return dataset_->size() / num_replicas_; }
  [[nodiscard]] Sample get(int64_t index) const override {
    if (index < 0 || index >= size()) {
      throw std::out_of_range(fmt::format("ShardedDataset: sample {} of {}", index, size()));
    }
    return dataset_->get(index * num_replicas_ + rank_);
  }

 private:
  std::shared_ptr<const Dataset> dataset_;
  int num_replicas_;
  int rank_;
};

}  // namespace axle
