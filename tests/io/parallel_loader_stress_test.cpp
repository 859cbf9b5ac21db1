// Stress tests of io/parallel_loader.h: replicas leaving epochs at random points, failing
// samples, slow reads, several transfer threads landing batches out of order, and loaders
// destroyed mid-epoch with iterators and reads still under way. Run under ThreadSanitizer as well
// (build-thread/).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/lazy_system.h"
#include "actors/loader_actor.h"
#include "axle.h"
#include "io/parallel_loader.h"
#include "io/splitmix.h"
#include "loader_test_util.h"

namespace axle {
namespace {

using testing::RecordingDataset;
using testing::sample_indices;
using Batches = std::vector<std::vector<int64_t>>;

// Options drawn for round `round`: small queues and one to three transfer threads.
ParallelLoaderOptions options_for(int round) {
  detail::SplitMix64 stream(3, static_cast<uint64_t>(round));
  return {.batches_per_execution = 1 + static_cast<int>(stream.next_below(3)),
          .loader_prefetch_size = 1 + static_cast<int>(stream.next_below(4)),
          .device_prefetch_size = 1 + static_cast<int>(stream.next_below(3)),
          .host_to_device_transfer_threads = 1 + static_cast<int>(stream.next_below(3))};
}

class ParallelLoaderStress : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()}); }
  [[nodiscard]] int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, ParallelLoaderStress, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "devices"; });

// Each replica stops after a random number of batches (or never); whatever it got is the start of
// its share, in order, and the epoch after is whole.
TEST_P(ParallelLoaderStress, RandomEarlyExitsLoseNoBatchAndNeverHang) {
  const auto data = std::make_shared<RecordingDataset>(60, -1, 100);
  for (int round = 0; round < 12; ++round) {
    DataLoader loader(data,
                      {.batch_size = 2, .shuffle = true, .seed = static_cast<uint64_t>(round)});
    DataLoader twin(data, {.batch_size = 2, .shuffle = true, .seed = static_cast<uint64_t>(round)});
    ParallelLoader parallel(loader, devices(), options_for(round));
    for (int epoch = 0; epoch < 2; ++epoch) {
      Batches all;
      for (const Batch& batch : twin) all.push_back(batch[0].values<int64_t>());
      std::vector<Batches> seen(n());
      std::vector<int64_t> stop_after(n());
      spawn([&](int ordinal) {
        detail::SplitMix64 stream(static_cast<uint64_t>(round * 10 + epoch),
                                  static_cast<uint64_t>(ordinal));
        // In the second epoch every replica runs to the end.
        stop_after[ordinal] = epoch == 0 ? static_cast<int64_t>(stream.next_below(20)) : 1000;
        for (const DeviceBatch& batch : parallel.per_device_loader(xla_device())) {
          seen[ordinal].push_back(sample_indices(batch));
          if (static_cast<int64_t>(seen[ordinal].size()) > stop_after[ordinal]) break;
        }
      });
      const int64_t per_device = parallel.per_device_size();
      for (int slot = 0; slot < n(); ++slot) {
        const auto expected_count =
            static_cast<std::size_t>(std::min<int64_t>(stop_after[slot] + 1, per_device));
        ASSERT_EQ(seen[slot].size(), expected_count) << "round " << round << " device " << slot;
        for (std::size_t k = 0; k < seen[slot].size(); ++k) {
          EXPECT_EQ(seen[slot][k], all[k * n() + slot]) << "round " << round << " batch " << k;
        }
      }
    }
  }
}

// A failing sample ends every replica's epoch with the error, whichever replica's batch it is and
// however far ahead the others are; a replica that stops first just stops.
TEST_P(ParallelLoaderStress, FailuresAndEarlyExitsTogetherNeverHang) {
  for (int round = 0; round < 12; ++round) {
    const int64_t failing = round * 3 % 40;
    DataLoader loader(std::make_shared<RecordingDataset>(40, failing, 50), {.batch_size = 1});
    ParallelLoader parallel(loader, devices(), options_for(round));
    std::atomic<int> errors{0};
    spawn([&](int ordinal) {
      int64_t count = 0;
      try {
        for (const DeviceBatch& batch : parallel.per_device_loader(xla_device())) {
          EXPECT_EQ(sample_indices(batch), std::vector<int64_t>{count * n() + ordinal});
          if (++count > 2 + (round + ordinal) % 5) break;
        }
      } catch (const LoaderError& e) {
        EXPECT_NE(std::string(e.what()).find("is broken"), std::string::npos) << e.what();
        EXPECT_GE(count * n() + ordinal, failing);
        ++errors;
      }
    });
    if (failing == 0) {
      EXPECT_EQ(errors.load(), n()) << "round " << round;
    }
  }
}

// Destroying the loader while iterators are alive, reads are slow and devices have batches
// queued: it returns, waiting replicas and later uses get LoaderError, and nothing crashes.
TEST_P(ParallelLoaderStress, DestroyingMidEpochDoesNotHangOrCrash) {
  const auto data = std::make_shared<RecordingDataset>(400, -1, 300);
  for (int round = 0; round < 10; ++round) {
    DataLoader loader(data, {.batch_size = 1 + round % 3, .num_workers = round % 2});
    auto parallel = std::make_unique<ParallelLoader>(loader, devices(), options_for(round));
    std::vector<PerDeviceLoader::Iterator> its;
    for (const Device d : devices()) its.push_back(parallel->per_device_loader(d).begin());
    for (int step = 0; step < round % 4; ++step) {
      for (auto& it : its) ++it;
    }
    parallel.reset();
    int closed = 0;
    for (auto& it : its) {
      try {
        ++it;
      } catch (const LoaderError&) {
        ++closed;
      }
      EXPECT_EQ(it, std::default_sentinel);
    }
    EXPECT_EQ(closed, n()) << "round " << round;
  }
}

// A replica blocked waiting for its batch when another thread destroys the loader gets an error
// instead of waiting forever.
TEST_P(ParallelLoaderStress, AReplicaWaitingWhenTheLoaderGoesAwayIsWokenWithAnError) {
  for (int round = 0; round < 10; ++round) {
    // Reads are slow enough (2 ms each) that the replicas mostly wait.
    DataLoader loader(std::make_shared<RecordingDataset>(1000, -1, 2000), {.batch_size = 1});
    auto parallel = std::make_unique<ParallelLoader>(loader, devices(), options_for(round));
    std::vector<PerDeviceLoader> per_device;
    for (const Device d : devices()) per_device.push_back(parallel->per_device_loader(d));
    std::atomic<int> started{0}, woken{0};
    std::mutex mutex;
    std::vector<std::string> errors;
    std::thread destroyer([&] {
      while (started.load() < n()) std::this_thread::yield();  // every replica is iterating
      parallel.reset();
    });
    spawn([&](int ordinal) {
      const auto record = [&](const LoaderError& e) {
        std::lock_guard lock(mutex);
        errors.push_back(e.what());
      };
      std::optional<PerDeviceLoader::Iterator> it;
      try {
        it.emplace(per_device[ordinal].begin());
      } catch (const LoaderError& e) {
        record(e);
      }
      ++started;
      try {
        while (it && *it != std::default_sentinel) ++*it;
      } catch (const LoaderError& e) {
        record(e);
      }
      ++woken;
    });
    destroyer.join();
    EXPECT_EQ(woken.load(), n());
    EXPECT_EQ(errors.size(), static_cast<std::size_t>(n())) << "round " << round;
  }
}

}  // namespace
}  // namespace axle
