// Tests io/parallel_loader.h (and the LoaderActor behind it): every batch reaches exactly one
// device, in order, once per epoch; prefetching stays within its limits; leaving an epoch early
// stops reading; mark_step follows batches_per_execution; dataset errors reach the iteration.
#include "axle/io/parallel_loader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/loader_actor.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "loader_test_util.h"
#include "tests/error_text.h"

namespace axle {
namespace {

using testing::contains;
using testing::error_message;
using testing::RecordingDataset;
using testing::sample_indices;
using Batches = std::vector<std::vector<int64_t>>;

// The sample indices of each batch of the DataLoader's next epoch.
Batches host_epoch(DataLoader& loader) {
  Batches out;
  for (const Batch& batch : loader) out.push_back(batch[0].values<int64_t>());
  return out;
}

// What device `slot` of `n` should get from an epoch of `all`: batches slot, slot + n, ...,
// without the uneven rest.
Batches share_of(const Batches& all, int slot, int n) {
  Batches out;
  const std::size_t used = all.size() / n * n;
  for (std::size_t i = slot; i < used; i += n) out.push_back(all[i]);
  return out;
}

class ParallelLoaderDevices : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()}); }
  [[nodiscard]] int n() const { return GetParam(); }
  // 3-sample batches: 6n - 1 of them (the last has 2 samples), so with n > 1 the last n - 1
  // batches are left out.
  [[nodiscard]] int64_t samples() const { return 18 * n() - 4; }
};

INSTANTIATE_TEST_SUITE_P(Devices, ParallelLoaderDevices, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "devices"; });

TEST_P(ParallelLoaderDevices, EveryReplicaGetsItsShareOfEveryEpochOnItsDevice) {
  const auto data = std::make_shared<RecordingDataset>(samples());
  const DataLoaderOptions options{.batch_size = 3, .shuffle = true, .seed = 5};
  DataLoader loader(data, options), twin(data, options);
  ParallelLoader parallel(loader, devices());
  EXPECT_EQ(parallel.per_device_size(), loader.size() / n());
  for (int epoch = 0; epoch < 2; ++epoch) {
    const Batches all = host_epoch(twin);
    std::mutex mutex;
    std::map<int, Batches> seen;
    std::map<int, int> wrong_device;
    spawn([&](int ordinal) {
      Batches mine;
      int misplaced = 0;
      for (const DeviceBatch& batch : parallel.per_device_loader(xla_device())) {
        for (const Tensor& field : batch) misplaced += field.device() != xla_device();
        mine.push_back(sample_indices(batch));
      }
      std::lock_guard lock(mutex);
      seen[ordinal] = std::move(mine);
      wrong_device[ordinal] = misplaced;
    });
    for (int slot = 0; slot < n(); ++slot) {
      EXPECT_EQ(seen[slot], share_of(all, slot, n())) << "replica " << slot << ", epoch " << epoch;
      EXPECT_EQ(wrong_device[slot], 0) << "replica " << slot;
    }
  }
}

TEST_P(ParallelLoaderDevices, OneThreadCanIterateEveryDeviceInStep) {
  const auto data = std::make_shared<RecordingDataset>(samples());
  DataLoader loader(data, {.batch_size = 3}), twin(data, {.batch_size = 3});
  const Batches all = host_epoch(twin);
  ParallelLoader parallel(loader, devices(), {.host_to_device_transfer_threads = 3});
  std::vector<PerDeviceLoader::Iterator> its;
  for (const Device d : devices()) its.push_back(parallel.per_device_loader(d).begin());
  std::vector<Batches> seen(n());
  while (its[0] != std::default_sentinel) {
    for (int slot = 0; slot < n(); ++slot) {
      ASSERT_NE(its[slot], std::default_sentinel) << "device " << slot << " ended early";
      EXPECT_EQ((*its[slot])[1].device(), device(slot));
      seen[slot].push_back(sample_indices(*its[slot]));
      ++its[slot];
    }
  }
  for (int slot = 0; slot < n(); ++slot) {
    EXPECT_EQ(its[slot], std::default_sentinel);
    EXPECT_EQ(seen[slot], share_of(all, slot, n())) << "device " << slot;
  }
}

// The DataLoader's state_dict counts the batches the devices' iterations took, not those read
// and moved ahead; a loader given it feeds the batches after them, none lost or repeated.
TEST_P(ParallelLoaderDevices, TheDataLoaderStateCountsTheBatchesTheDevicesTook) {
  const auto data = std::make_shared<RecordingDataset>(samples());
  const DataLoaderOptions options{.batch_size = 3, .shuffle = true, .seed = 4, .num_workers = 2};
  DataLoader loader(data, options), twin(data, options);
  const Batches all = host_epoch(twin);
  DataLoaderState at;
  {
    ParallelLoader parallel(loader, devices(),
                            {.loader_prefetch_size = 8, .device_prefetch_size = 4});
    std::vector<PerDeviceLoader::Iterator> its;
    for (const Device d : devices()) its.push_back(parallel.per_device_loader(d).begin());
    EXPECT_EQ(loader.state_dict().batch, n());
    for (int round = 1; round < 3; ++round) {
      for (int slot = 0; slot < n(); ++slot) ++its[slot];
    }
    at = loader.state_dict();  // every device holds its third batch
  }
  EXPECT_EQ(at.epoch, 0);
  EXPECT_EQ(at.batch, 3 * n());
  DataLoader resumed(data, options);
  resumed.load_state_dict(at);
  ParallelLoader rest(resumed, devices());
  std::vector<Batches> seen(n());
  std::vector<PerDeviceLoader::Iterator> its;
  for (const Device d : devices()) its.push_back(rest.per_device_loader(d).begin());
  while (its[0] != std::default_sentinel) {
    for (int slot = 0; slot < n(); ++slot) {
      seen[slot].push_back(sample_indices(*its[slot]));
      ++its[slot];
    }
  }
  const Batches after(all.begin() + 3 * n(), all.end());
  for (int slot = 0; slot < n(); ++slot) {
    EXPECT_EQ(seen[slot], share_of(after, slot, n())) << "device " << slot;
  }
  // The devices took their shares of the rest; the uneven last batches nobody takes.
  EXPECT_EQ(resumed.state_dict().epoch, 0);
  EXPECT_EQ(resumed.state_dict().batch, 3 * n() + n() * (static_cast<int64_t>(after.size()) / n()));
}

TEST_P(ParallelLoaderDevices, ReadsNoFurtherAheadThanThePrefetchSizes) {
  constexpr int kLoaderPrefetch = 3, kDevicePrefetch = 2, kTaken = 4;
  const auto data = std::make_shared<RecordingDataset>(1000);
  DataLoader loader(data, {.batch_size = 1});
  clear_metrics();
  auto parallel = std::make_unique<ParallelLoader>(
      loader, devices(),
      ParallelLoaderOptions{.loader_prefetch_size = kLoaderPrefetch,
                            .device_prefetch_size = kDevicePrefetch});
  std::vector<PerDeviceLoader::Iterator> its;
  for (const Device d : devices()) its.push_back(parallel->per_device_loader(d).begin());
  for (int step = 1; step < kTaken; ++step) {
    for (auto& it : its) ++it;
  }
  // Each device has handed out batch kTaken - 1 and, asked for ahead, batch kTaken; then its
  // queue fills, then the host queue.
  const std::size_t limit =
      static_cast<std::size_t>(n()) * (kTaken + 1 + kDevicePrefetch) + kLoaderPrefetch;
  ASSERT_TRUE(data->wait_for_reads(limit)) << "read " << data->read_count() << " of " << limit;
  // Room for a reader that does not stop there to show it (not a timing assertion: a correct
  // loader reads nothing more however long this is).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  parallel.reset();  // joins the reader: nothing more can be read
  EXPECT_EQ(data->read_count(), limit);
  const auto device_depth = metric_data("DeviceQueueDepth");
  const auto loader_depth = metric_data("LoaderQueueDepth");
  ASSERT_TRUE(device_depth && loader_depth);
  for (const auto& [time, depth] : device_depth->samples) EXPECT_LE(depth, kDevicePrefetch);
  for (const auto& [time, depth] : loader_depth->samples) EXPECT_LE(depth, kLoaderPrefetch);
}

TEST_P(ParallelLoaderDevices, LeavingAnEpochEarlyStopsReadingAndTheNextEpochIsWhole) {
  constexpr int kLoaderPrefetch = 2, kDevicePrefetch = 1, kKept = 2;
  const auto data = std::make_shared<RecordingDataset>(200);
  DataLoader loader(data, {.batch_size = 1});
  ParallelLoader parallel(
      loader, devices(),
      {.loader_prefetch_size = kLoaderPrefetch, .device_prefetch_size = kDevicePrefetch});
  {
    std::vector<PerDeviceLoader::Iterator> its;
    for (const Device d : devices()) its.push_back(parallel.per_device_loader(d).begin());
    for (int step = 1; step < kKept; ++step) {
      for (auto& it : its) ++it;
    }
    for (int slot = 0; slot < n(); ++slot) {
      EXPECT_EQ(sample_indices(*its[slot]), std::vector<int64_t>{(kKept - 1) * n() + slot});
    }
  }  // every device leaves the epoch here
  std::vector<Batches> second(n());
  spawn([&](int ordinal) {
    for (const DeviceBatch& batch : parallel.per_device_loader(xla_device())) {
      second[ordinal].push_back(sample_indices(batch));
    }
  });
  for (int slot = 0; slot < n(); ++slot) {
    ASSERT_EQ(second[slot].size(), static_cast<std::size_t>(200 / n()));
    for (std::size_t k = 0; k < second[slot].size(); ++k) {
      EXPECT_EQ(second[slot][k], std::vector<int64_t>{static_cast<int64_t>(k) * n() + slot});
    }
  }
  // The first epoch's reads are those before sample 0 is read again: what was handed out (the
  // batches kept and the one asked for ahead), what the queues held, and — while the devices
  // leave one after the other — what the reader read on for those still in the epoch (at most a
  // host queue's worth each) and dropped for the others. Far from the 200 of a whole epoch.
  const std::vector<int64_t> reads = data->reads();
  std::size_t first_epoch = 1;
  while (first_epoch < reads.size() && reads[first_epoch] != 0) ++first_epoch;
  const int bound = n() * (kKept + 1) + kLoaderPrefetch + n() * kDevicePrefetch +
                    (n() - 1) * (kLoaderPrefetch + 1);
  EXPECT_LE(first_epoch, static_cast<std::size_t>(bound));
}

TEST_P(ParallelLoaderDevices, ADatasetErrorEndsEveryReplicasEpochAfterTheBatchesBeforeIt) {
  const int64_t failing = 2 * n() + 1;
  const auto data = std::make_shared<RecordingDataset>(100, failing);
  DataLoader loader(data, {.batch_size = 1});
  ParallelLoader parallel(loader, devices());
  std::vector<Batches> seen(n());
  std::vector<std::string> errors(n());
  spawn([&](int ordinal) {
    try {
      for (const DeviceBatch& batch : parallel.per_device_loader(xla_device())) {
        seen[ordinal].push_back(sample_indices(batch));
      }
    } catch (const LoaderError& e) {
      errors[ordinal] = e.what();
    }
  });
  for (int slot = 0; slot < n(); ++slot) {
    Batches before;
    for (int64_t i = slot; i < failing; i += n()) before.push_back({i});
    EXPECT_EQ(seen[slot], before) << "device " << slot;
    EXPECT_TRUE(contains(errors[slot], "batch " + std::to_string(failing)) &&
                contains(errors[slot], "sample " + std::to_string(failing) + " is broken"))
        << errors[slot];
  }
}

TEST(ParallelLoader, MarksAStepEveryBatchesPerExecutionBatchesAndAtTheEnd) {
  LazySystem::restart();
  const auto data = std::make_shared<RecordingDataset>(5);
  DataLoader loader(data, {.batch_size = 1});
  for (int per_execution : {1, 2, 3}) {
    MpDeviceLoader device_loader(loader, device(0), {.batches_per_execution = per_execution});
    const auto marks = [] { return counter_value("MarkStep").value_or(0); };
    Tensor total = zeros(Shape{}, DType::kInt64);
    std::vector<int64_t> marked_after;  // steps marked by each ++, and by reaching the end
    auto it = device_loader.begin();
    while (it != device_loader.end()) {
      total = total + sum((*it)[0]);
      const int64_t before = marks();
      ++it;
      marked_after.push_back(marks() - before);
    }
    std::vector<int64_t> expected;
    for (int k = 1; k <= 5; ++k) expected.push_back(k % per_execution == 0 || k == 5 ? 1 : 0);
    EXPECT_EQ(marked_after, expected) << "batches_per_execution " << per_execution;
    EXPECT_FALSE(total.impl()->pending_ir()) << "the last step was not marked";
    EXPECT_EQ(total.item<int64_t>(), 0 + 1 + 2 + 3 + 4);
  }
}

TEST(ParallelLoader, ItsStepsAreNamedAsTheLoadersInTheDebugAnalysis) {
  config::set("PT_XLA_DEBUG_LEVEL", "1");
  LazySystem::restart();
  const auto data = std::make_shared<RecordingDataset>(3);
  DataLoader loader(data, {.batch_size = 1});
  MpDeviceLoader device_loader(loader, device(0));
  ::testing::internal::CaptureStderr();
  Tensor total = zeros(Shape{}, DType::kInt64);
  for (const DeviceBatch& batch : device_loader) total = total + sum(batch[0]);
  wait_device_ops();
  const std::string text = ::testing::internal::GetCapturedStderr();
  config::unset("PT_XLA_DEBUG_LEVEL");
  LazySystem::restart();
  EXPECT_NE(text.find("Compilation Analysis:   mark_step in parallel loader at step end"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("Compilation Analysis:   user mark_step"), std::string::npos) << text;
}

TEST(ParallelLoader, MpDeviceLoaderFeedsItsDeviceEveryBatchOfEachEpoch) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  const auto data = std::make_shared<RecordingDataset>(11);
  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  DataLoader twin(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  MpDeviceLoader device_loader(loader, device(1));
  EXPECT_EQ(device_loader.size(), 3);
  for (int epoch = 0; epoch < 2; ++epoch) {
    Batches seen;
    for (const DeviceBatch& batch : device_loader) {
      EXPECT_EQ(batch[0].device(), device(1));
      EXPECT_EQ(batch[1].shape(), (Shape{batch[0].size(0), 2}));
      seen.push_back(sample_indices(batch));
    }
    EXPECT_EQ(seen, host_epoch(twin)) << "epoch " << epoch;
  }
}

TEST(ParallelLoader, AResumedDataLoaderFeedsTheRestOfItsEpoch) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  const auto data = std::make_shared<RecordingDataset>(11);
  DataLoader twin(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  (void)host_epoch(twin);
  const Batches second = host_epoch(twin), third = host_epoch(twin);

  DataLoader loader(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  loader.resume_at(1, 1);
  Batches seen;
  {
    MpDeviceLoader rest_of_epoch(loader, device(1));
    EXPECT_EQ(rest_of_epoch.size(), 2);
    for (const DeviceBatch& batch : rest_of_epoch) seen.push_back(sample_indices(batch));
    EXPECT_EQ(seen, Batches(second.begin() + 1, second.end()));
    // Made for the resumed epoch's 2 batches, it refuses the whole epoch after it.
    const std::string what = error_message<LoaderError>([&] {
      for (const DeviceBatch& batch : rest_of_epoch) (void)batch;
    });
    EXPECT_TRUE(contains(what, "has 3 batches, not the 2") && contains(what, "resume_at")) << what;
  }
  loader.set_epoch(2);
  seen.clear();
  for (const DeviceBatch& batch : MpDeviceLoader(loader, device(1))) {
    seen.push_back(sample_indices(batch));
  }
  EXPECT_EQ(seen, third);
}

TEST(ParallelLoader, ADatasetErrorIsThrownByTheIterationAndEndsIt) {
  LazySystem::restart();
  DataLoader loader(std::make_shared<RecordingDataset>(10, 6), {.batch_size = 2});
  MpDeviceLoader device_loader(loader, device(0));
  auto it = device_loader.begin();
  ++it;
  ++it;
  EXPECT_EQ(it.index(), 2);
  const std::string what = error_message<LoaderError>([&] { ++it; });
  EXPECT_TRUE(contains(what, "ParallelLoader: batch 3") && contains(what, "sample 6 is broken"))
      << what;
  EXPECT_EQ(it, device_loader.end());
}

TEST(ParallelLoader, RejectsDevicesAndOptionsItCannotUse) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  DataLoader loader(std::make_shared<RecordingDataset>(4));
  const auto make = [&](std::vector<Device> devices, ParallelLoaderOptions options = {}) {
    ParallelLoader parallel(loader, std::move(devices), options);
  };
  EXPECT_TRUE(contains(error_message<std::invalid_argument>([&] { make({}); }), "no devices"));
  EXPECT_TRUE(contains(error_message<std::invalid_argument>([&] {
                         make({device(1), device(0), device(1)});
                       }),
                       "xla:1 is given twice in [xla:1, xla:0, xla:1]"));
  EXPECT_THROW(make({Device{5}}), std::out_of_range);
  EXPECT_TRUE(contains(
      error_message<std::invalid_argument>([&] { make({device(0)}, {.device_prefetch_size = 0}); }),
      "device_prefetch_size is 0, must be at least 1"));
  EXPECT_TRUE(contains(error_message<std::invalid_argument>(
                           [&] { make({device(0)}, {.batches_per_execution = -1}); }),
                       "batches_per_execution is -1"));
  ParallelLoader parallel(loader, {device(1)});
  EXPECT_TRUE(contains(
      error_message<std::invalid_argument>([&] { (void)parallel.per_device_loader(device(0)); }),
      "per_device_loader(xla:0) of a loader of [xla:1]"));
}

TEST(ParallelLoader, ItsQueueDepthsAndInputWaitAreInTheMetricsReport) {
  LazySystem::restart();
  clear_metrics();
  DataLoader loader(std::make_shared<RecordingDataset>(6), {.batch_size = 2});
  MpDeviceLoader device_loader(loader, device(0));
  int64_t batches = 0;
  for (const DeviceBatch& batch : device_loader) batches += batch.size() == 2;
  EXPECT_EQ(batches, 3);
  const std::string report = metrics_report();
  for (const char* name : {"InputWaitTime", "LoaderQueueDepth", "DeviceQueueDepth"}) {
    EXPECT_TRUE(contains(report, std::string("Metric: ") + name)) << name << "\n" << report;
  }
  EXPECT_EQ(metric_data("InputWaitTime")->total_samples, 4);  // three batches and the end
}

}  // namespace
}  // namespace axle
