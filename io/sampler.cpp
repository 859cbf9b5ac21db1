// io: DistributedSampler's epochs.
#include "axle/io/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "axle/actors/host/replicas.h"
#include "axle/io/splitmix.h"

namespace axle {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (options_.num_replicas < 0) options_.num_replicas = world_size();
  if (options_.rank < 0) options_.rank = global_ordinal();
  if (dataset_size < 0 || options_.num_replicas < 1 || options_.rank >= options_.num_replicas) {
    throw std::invalid_argument(fmt::format(
        "DistributedSampler: rank {} of {} replicas over a dataset of {} samples: the rank must "
        "be in [0, num_replicas) and the size not negative",
        options_.rank, options_.num_replicas, dataset_size));
  }
  const int64_t r = options_.num_replicas;
  num_samples_ = options_.drop_last && dataset_size % r != 0
                     ? (dataset_size - r + r - 1) / r  // ceil((n - r) / r)
                     : (dataset_size + r - 1) / r;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<std::size_t>(dataset_size_));
  std::iota(all.begin(), all.end(), int64_t{0});
  if (options_.shuffle) {
    // The DataLoader's Fisher-Yates, on the stream of (seed, epoch): every replica the same.
    detail::SplitMix64 stream(options_.seed, static_cast<uint64_t>(epoch_));
    for (std::size_t i = all.size(); i > 1; --i) {
      std::swap(all[i - 1], all[stream.next_below(i)]);
    }
  }
  const auto total = static_cast<std::size_t>(total_size());
  if (all.size() < total && !all.empty()) {
    // Padding repeats the list's own start, as often as it takes.
    const std::size_t n = all.size();
    for (std::size_t i = 0; all.size() < total; ++i) all.push_back(all[i % n]);
  }
  all.resize(std::min(all.size(), total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::size_t i = static_cast<std::size_t>(options_.rank); i < all.size();
       i += static_cast<std::size_t>(options_.num_replicas)) {
    mine.push_back(all[i]);
  }
  return mine;
}

}  // namespace axle
