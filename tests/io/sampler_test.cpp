// DistributedSampler, as PyTorch's: replica r of R gets every R-th index of the epoch's list from
// r on; the list is padded with its own start (or cut, with drop_last) to a multiple of R; the
// replicas' shares are disjoint but for padding and cover the dataset; shuffling gives every
// replica the same permutation per epoch and another one the next epoch; defaults come from the
// caller's replica; and a DataLoader visits what its sampler gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replicas.h"
#include "axle/io/data_loader.h"
#include "axle/io/sampler.h"
#include "tests/io/loader_test_util.h"

namespace axle {
namespace {

std::vector<std::vector<int64_t>> shares(int64_t n, int replicas, DistributedSamplerOptions options,
                                         int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> all;
  for (int r = 0; r < replicas; ++r) {
    options.num_replicas = replicas;
    options.rank = r;
    DistributedSampler sampler(n, options);
    sampler.set_epoch(epoch);
    all.push_back(sampler.indices());
    EXPECT_EQ(static_cast<int64_t>(all.back().size()), sampler.size());
  }
  return all;
}

TEST(DistributedSampler, WithoutShuffleEachReplicaTakesEveryRthIndexPaddedFromTheStart) {
  // PyTorch: list(range(10)) + [0, 1], then indices[rank::3].
  EXPECT_EQ(shares(10, 3, {.shuffle = false}),
            (std::vector<std::vector<int64_t>>{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}}));
  // Padding longer than the dataset repeats it.
  EXPECT_EQ(shares(2, 5, {.shuffle = false}),
            (std::vector<std::vector<int64_t>>{{0}, {1}, {0}, {1}, {0}}));
}

TEST(DistributedSampler, DropLastCutsTheTailThatDoesNotSplitEvenly) {
  const auto all = shares(10, 3, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(all, (std::vector<std::vector<int64_t>>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}}));
  const auto even = shares(12, 3, {.shuffle = false, .drop_last = true});
  for (const auto& share : even) EXPECT_EQ(share.size(), 4u);
}

TEST(DistributedSampler, ShuffledSharesSplitOnePermutationPerEpoch) {
  constexpr int64_t kN = 103;
  for (int replicas : {1, 2, 4, 7}) {
    for (bool drop_last : {false, true}) {
      const DistributedSamplerOptions options{.shuffle = true, .seed = 5, .drop_last = drop_last};
      const auto epoch0 = shares(kN, replicas, options, 0);
      std::map<int64_t, int> seen;
      for (const auto& share : epoch0) {
        EXPECT_EQ(share.size(), epoch0[0].size());  // every replica as many
        for (int64_t i : share) ++seen[i];
      }
      const int64_t total = static_cast<int64_t>(epoch0[0].size()) * replicas;
      int64_t repeated = 0;
      for (const auto& [index, count] : seen) {
        ASSERT_GE(index, 0);
        ASSERT_LT(index, kN);
        repeated += count - 1;
      }
      if (drop_last) {
        EXPECT_EQ(repeated, 0);
        EXPECT_EQ(static_cast<int64_t>(seen.size()), total);
      } else {
        EXPECT_EQ(static_cast<int64_t>(seen.size()), kN);  // the whole dataset
        EXPECT_EQ(repeated, total - kN);                   // only the padding twice
      }
      if (replicas > 1) {
        EXPECT_NE(shares(kN, replicas, options, 1), epoch0) << "epoch 1 repeats epoch 0";
        EXPECT_EQ(shares(kN, replicas, options, 0), epoch0) << "epoch 0 is not reproducible";
      }
    }
  }
}

TEST(DistributedSampler, DefaultsToTheCallersReplicaAndRejectsBadRanks) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 3});
  std::vector<std::pair<int, int>> seen(3);
  spawn([&](int ordinal) {
    DistributedSampler sampler(30);
    seen[static_cast<std::size_t>(ordinal)] = {sampler.num_replicas(), sampler.rank()};
  });
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{3, 0}, {3, 1}, {3, 2}}));
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(-1, {.num_replicas = 1, .rank = 0}), std::invalid_argument);
  LazySystem::restart();
}

TEST(DistributedSampler, ADataLoaderReadsOnlyTheSamplersShareInItsOrder) {
  auto dataset = std::make_shared<testing::RecordingDataset>(20);
  auto sampler = std::make_shared<DistributedSampler>(
      20, DistributedSamplerOptions{.num_replicas = 4, .rank = 1, .shuffle = true, .seed = 3});
  DataLoader loader(dataset, {.batch_size = 2, .sampler = sampler});
  EXPECT_EQ(loader.size(), 3);  // 5 samples
  for (int64_t epoch : {0, 1}) {
    sampler->set_epoch(epoch);
    const std::size_t before = dataset->read_count();
    std::vector<int64_t> visited;
    for (const Batch& batch : loader) {
      for (int64_t i : batch[0].values<int64_t>()) visited.push_back(i);
    }
    EXPECT_EQ(visited, sampler->indices()) << "epoch " << epoch;
    std::vector<int64_t> reads = dataset->reads();
    reads.erase(reads.begin(), reads.begin() + static_cast<std::ptrdiff_t>(before));
    std::ranges::sort(reads);
    std::vector<int64_t> mine = sampler->indices();
    std::ranges::sort(mine);
    EXPECT_EQ(reads, mine) << "the loader read samples outside its share";
  }
  EXPECT_THROW(DataLoader(dataset, {.shuffle = true, .sampler = sampler}), std::invalid_argument);
}

}  // namespace
}  // namespace axle
