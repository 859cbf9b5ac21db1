// Tests io/data_loader.h: batching, shuffling, drop_last, workers and errors.
#include "axle/io/data_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "axle/io/fake_data.h"
#include "io_test_util.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;

// Sample i is {s64 i, f32 [2] {i, -i}}; index `fail_at` throws, and `odd_shape_at` is [3].
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int64_t fail_at = -1, int64_t odd_shape_at = -1)
      : n_(n), fail_at_(fail_at), odd_shape_at_(odd_shape_at) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    if (i == fail_at_) throw std::runtime_error("sample " + std::to_string(i) + " is broken");
    const auto x = static_cast<float>(i);
    if (i == odd_shape_at_) return {CpuTensor({i}, {}), CpuTensor({x, -x, 0.0f}, {3})};
    return {CpuTensor({i}, {}), CpuTensor({x, -x}, {2})};
  }

 private:
  int64_t n_, fail_at_, odd_shape_at_;
};

// The sample indices of each batch of one epoch.
std::vector<std::vector<int64_t>> epoch_indices(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (const Batch& batch : loader) out.push_back(batch[0].values<int64_t>());
  return out;
}

TEST(CpuTensor, BuildsFromValuesAndAShapeAsTorchTensorDoes) {
  const CpuTensor matrix(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(matrix.dtype, DType::kFloat32);
  EXPECT_EQ(matrix.shape, (Shape{2, 3}));
  EXPECT_EQ(matrix.values<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const CpuTensor labels({int64_t{7}, int64_t{-1}}, {2});
  EXPECT_EQ(labels.dtype, DType::kInt64);
  EXPECT_EQ(labels.values<int64_t>(), (std::vector<int64_t>{7, -1}));
  const CpuTensor scalar({2.5}, {});
  EXPECT_EQ(scalar.dtype, DType::kFloat64);
  EXPECT_EQ(scalar.shape.rank(), 0);
  EXPECT_EQ(scalar.values<double>(), std::vector<double>{2.5});
  const CpuTensor mask({true, false, true}, {3});
  EXPECT_EQ(mask.dtype, DType::kBool);
  EXPECT_EQ(mask.values<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(error_message<std::invalid_argument>([] {
              CpuTensor(std::vector<float>{1, 2, 3}, {2, 2});
            }),
            "CpuTensor: 3 values cannot fill shape [2,2] (4 elements)");
}

TEST(DataLoader, BatchesInOrderWithAShortLastBatch) {
  DataLoader loader(IndexDataset(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  EXPECT_EQ(epoch_indices(loader),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
}

TEST(DataLoader, StacksEachFieldAlongANewFirstDimension) {
  DataLoader loader(IndexDataset(5), {.batch_size = 2});
  auto it = loader.begin();
  ++it;
  const Batch& batch = *it;
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].dtype, DType::kInt64);
  EXPECT_EQ(batch[0].shape, (Shape{2}));
  EXPECT_EQ(batch[1].dtype, DType::kFloat32);
  EXPECT_EQ(batch[1].shape, (Shape{2, 2}));
  EXPECT_EQ(batch[1].values<float>(), (std::vector<float>{2, -2, 3, -3}));
  EXPECT_EQ(it.index(), 1);
}

TEST(DataLoader, StacksImagesIntoBatchShape) {
  DataLoader loader(FakeData({.size = 20, .sample_shape = {1, 28, 28}}), {.batch_size = 8});
  const auto it = loader.begin();  // the batch lives in the iterator
  const Batch& batch = *it;
  EXPECT_EQ(batch[0].shape, (Shape{8, 1, 28, 28}));
  EXPECT_EQ(batch[1].shape, (Shape{8}));
}

TEST(DataLoader, DropLastLeavesOutTheShortBatch) {
  DataLoader loader(IndexDataset(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(epoch_indices(loader).size(), 2u);
  DataLoader exact(IndexDataset(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(epoch_indices(exact).size(), 2u);
}

TEST(DataLoader, ShuffleGivesAPermutationPerEpochThatChanges) {
  DataLoader loader(IndexDataset(50), {.batch_size = 7, .shuffle = true, .seed = 3});
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> all;
    for (const auto& b : epoch_indices(loader)) all.insert(all.end(), b.begin(), b.end());
    epochs.push_back(all);
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expected(50);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);
}

TEST(DataLoader, ShuffleIsReproducibleFromTheSeed) {
  DataLoader a(IndexDataset(40), {.batch_size = 5, .shuffle = true, .seed = 11});
  DataLoader b(IndexDataset(40), {.batch_size = 5, .shuffle = true, .seed = 11});
  DataLoader c(IndexDataset(40), {.batch_size = 5, .shuffle = true, .seed = 12});
  for (int e = 0; e < 2; ++e) {
    const auto ea = epoch_indices(a);
    EXPECT_EQ(ea, epoch_indices(b));
    EXPECT_NE(ea, epoch_indices(c));
  }
}

TEST(DataLoader, SetEpochReplaysThatEpochsOrder) {
  DataLoader loader(IndexDataset(30), {.batch_size = 4, .shuffle = true, .seed = 5});
  (void)epoch_indices(loader);
  const auto second = epoch_indices(loader);
  EXPECT_EQ(loader.epoch(), 2);
  loader.set_epoch(1);
  EXPECT_EQ(epoch_indices(loader), second);
}

TEST(DataLoader, ResumeAtGivesTheRestOfThatEpochThenWholeOnes) {
  for (int workers : {0, 2}) {
    DataLoader whole(IndexDataset(30),
                     {.batch_size = 4, .shuffle = true, .seed = 5, .num_workers = workers});
    (void)epoch_indices(whole);
    const auto second = epoch_indices(whole);
    const auto third = epoch_indices(whole);

    DataLoader resumed(IndexDataset(30),
                       {.batch_size = 4, .shuffle = true, .seed = 5, .num_workers = workers});
    resumed.resume_at(1, 3);
    EXPECT_EQ(resumed.next_epoch_size(), 5);
    std::vector<std::vector<int64_t>> rest;
    std::vector<int64_t> indices;
    for (auto it = resumed.begin(); it != resumed.end(); ++it) {
      rest.push_back((*it)[0].values<int64_t>());
      indices.push_back(it.index());
    }
    EXPECT_EQ(rest, std::vector(second.begin() + 3, second.end())) << workers << " workers";
    EXPECT_EQ(indices, (std::vector<int64_t>{3, 4, 5, 6, 7}));
    EXPECT_EQ(resumed.next_epoch_size(), 8);
    EXPECT_EQ(epoch_indices(resumed), third);
  }
}

TEST(DataLoader, ResumeAtTheEndOfAnEpochGivesNothingOfIt) {
  DataLoader loader(IndexDataset(8), {.batch_size = 4});
  loader.resume_at(0, 2);
  EXPECT_TRUE(epoch_indices(loader).empty());
  EXPECT_EQ(epoch_indices(loader).size(), 2U);
  EXPECT_THROW(loader.resume_at(0, 3), std::invalid_argument);
  EXPECT_THROW(loader.resume_at(-1, 0), std::invalid_argument);
  EXPECT_THROW(loader.resume_at(0, -1), std::invalid_argument);
}

// state_dict counts the batches the loop took, however far the workers read ahead; a loader
// given that state goes on with the next batch, and after an epoch taken whole with the next
// epoch.
TEST(DataLoader, StateDictIsWhereTheLoopStandsAndLoadStateDictGoesOnFromThere) {
  for (int workers : {0, 3}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    const DataLoaderOptions options{
        .batch_size = 4, .shuffle = true, .seed = 5, .num_workers = workers, .prefetch_factor = 4};
    DataLoader twin(IndexDataset(30), options);
    const std::vector<std::vector<int64_t>> first = epoch_indices(twin),
                                            second = epoch_indices(twin);

    DataLoader loader(IndexDataset(30), options);
    EXPECT_EQ(loader.state_dict(), (DataLoaderState{.epoch = 0,
                                                    .batch = 0,
                                                    .batches = 8,
                                                    .samples = 30,
                                                    .batch_size = 4,
                                                    .shuffle = true,
                                                    .seed = 5}));
    DataLoaderState at;
    auto it = loader.begin();
    for (int taken = 1; taken <= 3; ++taken, ++it) {
      EXPECT_EQ(loader.state_dict().batch, taken);  // the batch the loop holds is taken
      at = loader.state_dict();
    }
    EXPECT_EQ(at.epoch, 0);
    DataLoader resumed(IndexDataset(30), options);
    resumed.load_state_dict(at);
    EXPECT_EQ(resumed.state_dict(), at);
    EXPECT_EQ(epoch_indices(resumed), std::vector(first.begin() + 3, first.end()));
    EXPECT_EQ(resumed.state_dict().epoch, 0);  // taken whole: the next one comes after it
    EXPECT_EQ(resumed.state_dict().batch, 8);
    DataLoader next(IndexDataset(30), options);
    next.load_state_dict(resumed.state_dict());
    EXPECT_EQ(next.epoch(), 1);
    EXPECT_EQ(epoch_indices(next), second);
  }
}

TEST(DataLoader, AStateOfOtherBatchesIsRefusedByName) {
  DataLoader loader(IndexDataset(30), {.batch_size = 4, .shuffle = true, .seed = 5});
  const DataLoaderState state = loader.state_dict();
  const auto refused = [&](DataLoaderOptions options, const char* field) {
    DataLoader other(IndexDataset(30), options);
    try {
      other.load_state_dict(state);
      ADD_FAILURE() << "expected std::invalid_argument for " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused({.batch_size = 5, .shuffle = true, .seed = 5}, "batch_size");
  refused({.batch_size = 4, .shuffle = true, .seed = 6}, "seed");
  refused({.batch_size = 4, .seed = 5}, "shuffle");
  // A shuffled order depends on the epoch's length; an ordered loader of more batches (a longer
  // run's) goes on from the same position.
  DataLoader ordered(IndexDataset(30), {.batch_size = 4});
  ordered.resume_at(0, 7);
  DataLoader longer(IndexDataset(60), {.batch_size = 4});
  longer.load_state_dict(ordered.state_dict());
  EXPECT_EQ(epoch_indices(longer).front(), (std::vector<int64_t>{28, 29, 30, 31}));
  // ... also after the shorter epoch was taken whole.
  (void)epoch_indices(ordered);
  EXPECT_EQ(ordered.state_dict().batch, 8);
  DataLoader longest(IndexDataset(60), {.batch_size = 4});
  longest.load_state_dict(ordered.state_dict());
  EXPECT_EQ(longest.epoch(), 0);
  EXPECT_EQ(epoch_indices(longest).front(), (std::vector<int64_t>{32, 33, 34, 35}));
  DataLoaderState outside = ordered.state_dict();
  outside.batch = 9;
  EXPECT_THROW(ordered.load_state_dict(outside), std::invalid_argument);
  DataLoader other(IndexDataset(31), {.batch_size = 4, .shuffle = true, .seed = 5});
  EXPECT_EQ(other.size(), loader.size());
  try {
    other.load_state_dict(state);
    ADD_FAILURE() << "expected std::invalid_argument for the samples";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("samples per epoch"), std::string::npos) << e.what();
  }
}

TEST(DataLoader, WorkerCountsGiveTheSameBatches) {
  std::vector<std::vector<Batch>> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(FakeData({.size = 37, .sample_shape = {3, 5}, .seed = 9}),
                      {.batch_size = 4, .shuffle = true, .seed = 21, .num_workers = workers});
    std::vector<Batch> batches;
    for (int e = 0; e < 2; ++e) {
      for (const Batch& b : loader) batches.push_back(b);
    }
    runs.push_back(std::move(batches));
  }
  for (std::size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].size(), runs[0].size());
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      for (std::size_t f = 0; f < 2; ++f) {
        EXPECT_EQ(runs[r][i][f].shape, runs[0][i][f].shape);
        EXPECT_EQ(runs[r][i][f].bytes, runs[0][i][f].bytes) << "run " << r << " batch " << i;
      }
    }
  }
}

TEST(DataLoader, ADatasetErrorSurfacesAtItsBatch) {
  for (int workers : {0, 2}) {
    DataLoader loader(IndexDataset(10, /*fail_at=*/7), {.batch_size = 2, .num_workers = workers});
    auto it = loader.begin();
    for (int k = 1; k < 3; ++k) ++it;  // batches 0 to 2 are whole
    EXPECT_EQ(it->at(0).values<int64_t>(), (std::vector<int64_t>{4, 5}));
    const std::string message = error_message<std::runtime_error>([&] { ++it; });
    EXPECT_EQ(message, "sample 7 is broken");
    ++it;  // the epoch goes on after the failed batch
    EXPECT_EQ(it->at(0).values<int64_t>(), (std::vector<int64_t>{8, 9}));
  }
}

TEST(DataLoader, SamplesThatDoNotStackAreNamed) {
  DataLoader loader(IndexDataset(6, -1, /*odd_shape_at=*/3), {.batch_size = 3});
  auto it = loader.begin();
  const std::string message = error_message<std::runtime_error>([&] { ++it; });
  EXPECT_TRUE(contains(message,
                       "field 1 of sample 4 is f32[2] but of sample 3 in the same "
                       "batch is f32[3]"))
      << message;
}

TEST(DataLoader, AnEmptyDatasetHasNoBatches) {
  DataLoader loader(IndexDataset(0), {.batch_size = 3, .num_workers = 2});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(loader.begin() == loader.end());
}

TEST(DataLoader, BeginAgainStartsTheNextEpoch) {
  DataLoader loader(IndexDataset(9), {.batch_size = 3, .num_workers = 2});
  auto first = loader.begin();
  EXPECT_EQ(first->at(0).values<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  auto second = loader.begin();  // stops the first epoch
  ++second;
  EXPECT_EQ(second->at(0).values<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(loader.epoch(), 2);
}

TEST(DataLoader, MovingKeepsTheEpochGoing) {
  DataLoader a(IndexDataset(6), {.batch_size = 2, .num_workers = 2});
  auto it = a.begin();
  DataLoader b = std::move(a);
  ++it;
  EXPECT_EQ(it->at(0).values<int64_t>(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.epoch(), 1);
}

TEST(DataLoader, BadOptionsThrow) {
  EXPECT_THROW(DataLoader(IndexDataset(4), {.batch_size = 0}), std::invalid_argument);
  EXPECT_THROW(DataLoader(IndexDataset(4), {.num_workers = -1}), std::invalid_argument);
  EXPECT_THROW(DataLoader(IndexDataset(4), {.prefetch_factor = 0}), std::invalid_argument);
  EXPECT_THROW(DataLoader(std::shared_ptr<const Dataset>{}), std::invalid_argument);
}

}  // namespace
}  // namespace axle
