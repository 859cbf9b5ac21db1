// io: samplers, as torch.utils.data's — which samples of a dataset a DataLoader visits, in what
// order. DistributedSampler gives each replica of a job its own share, as PyTorch's: the data is
// split by global ordinal, every replica gets as many samples, and each process reads only the
// samples of its replicas.
#pragma once

#include <cstdint>
#include <vector>

namespace axle {

/// The samples a DataLoader visits in one epoch, in order (DataLoaderOptions::sampler).
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The dataset indices of the current epoch.
  [[nodiscard]] virtual std::vector<int64_t> indices() const = 0;
  /// How many indices() gives (len(sampler)).
  [[nodiscard]] virtual int64_t size() const = 0;
};

/// How a DistributedSampler splits and orders the samples. The defaults are PyTorch's.
struct DistributedSamplerOptions {
  /// Replicas the data is split among; -1: world_size().
  int num_replicas = -1;
  /// This replica's share; -1: global_ordinal().
  int rank = -1;
  /// A new permutation of the whole dataset each epoch (set_epoch), the same on every replica.
  bool shuffle = true;
  /// With shuffle: epoch e's permutation depends only on (seed, e).
  uint64_t seed = 0;
  /// Drop the tail that does not split evenly; otherwise the permutation is padded with its own
  /// first indices up to a multiple of num_replicas.
  bool drop_last = false;
};

/// torch.utils.data.distributed.DistributedSampler: replica `rank` of `num_replicas` gets
/// indices rank, rank + num_replicas, ... of the epoch's (shuffled, padded or cut) index list,
/// so the replicas' shares are disjoint (but for padding) and of equal size:
/// ceil(n / num_replicas), or with drop_last ceil((n - num_replicas) / num_replicas) when n does
/// not divide evenly. Call set_epoch(e) before each epoch, as in PyTorch, or every epoch has the
/// same order. The permutation comes from axle's SplitMix64 stream (the same on every platform),
/// not from torch.randperm.
class DistributedSampler final : public Sampler {
 public:
  /// Throws std::invalid_argument for a negative size, num_replicas < 1 or a rank outside
  /// [0, num_replicas).
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});

  /// Makes indices() give epoch `epoch`'s share (DistributedSampler.set_epoch).
  void set_epoch(int64_t epoch) noexcept { epoch_ = epoch; }
  /// The epoch indices() gives: the last set_epoch's, 0 at first.
  [[nodiscard]] int64_t epoch() const noexcept { return epoch_; }
  /// Replicas the data is split among (world_size() when the options left it at -1).
  [[nodiscard]] int num_replicas() const noexcept { return options_.num_replicas; }
  /// This replica's share (global_ordinal() when the options left it at -1).
  [[nodiscard]] int rank() const noexcept { return options_.rank; }
  /// Samples across every replica: size() * num_replicas().
  [[nodiscard]] int64_t total_size() const noexcept { return num_samples_ * options_.num_replicas; }

  [[nodiscard]] std::vector<int64_t> indices() const override;
  [[nodiscard]] int64_t size() const override { return num_samples_; }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace axle
