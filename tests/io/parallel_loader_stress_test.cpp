// Stress tests of io/parallel_loader.h: replicas leaving epochs at random points, failing
// samples, slow reads, several transfer threads landing batches out of order, loaders destroyed
// mid-epoch with iterators and reads still under way, and training loops that all-reduce, log
// from step closures and wait for their devices. Run under ThreadSanitizer as well
// (build-thread/).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/loader_actor.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/splitmix.h"
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

// The loop of the samples (train_gpt, train_mnist), many times over: every step all-reduces, a
// step closure reads the step's result (run_async, as the trainers log their losses) and each
// replica waits for its own device at random steps and at its epoch's last, as they do before an
// evaluation. Every closure of a replica has run once wait_device_ops returns, with the values a
// plain double loop gives; the loop ends at the loader's end, on every replica. (A replica's wait
// used to drain every replica's closures, including another's of a later step, whose all-reduce
// needed this replica: the others then stopped for good in the loader, their next batches queued
// on their devices behind that step.) A collective that still waited for a replica would fail
// the test after AXLE_COLLECTIVE_TIMEOUT instead of hanging it.
TEST_P(ParallelLoaderStress, TrainingLoopsWithStepClosuresAndDeviceWaitsNeverHang) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "60");
  LazySystem::restart(LazySystemOptions{.cpu_devices = n()});
  constexpr int kSteps = 12;
  // Each replica's own MpDeviceLoader reads sample k at step k (as the samples' loaders, one per
  // replica); one ParallelLoader of every device hands replica r sample k * n + r.
  const auto own = std::make_shared<RecordingDataset>(kSteps);
  const auto shared = std::make_shared<RecordingDataset>(kSteps * n());
  for (int round = 0; round < 16; ++round) {
    const bool one_loader = round % 2 == 1;
    const ParallelLoaderOptions options = options_for(round);
    // The mean over replicas of the running value, in double: r = 0.5 r + mean_i(sample_i (i + 2)).
    std::vector<double> expected(kSteps);
    double running = 0;
    for (int k = 0; k < kSteps; ++k) {
      double mean = 0;
      for (int i = 0; i < n(); ++i) {
        const int64_t sample = one_loader ? int64_t{k} * n() + i : k;
        mean += static_cast<double>(sample) * (i + 2) / n();
      }
      running = 0.5 * running + mean;
      expected[static_cast<std::size_t>(k)] = running;
    }
    DataLoader parallel_source(shared, {.batch_size = 1});
    std::optional<ParallelLoader> parallel;
    if (one_loader) parallel.emplace(parallel_source, devices(), options);
    // What each replica's closures saw, in the order they ran (written on the closure runner).
    std::vector<std::vector<double>> logged(static_cast<std::size_t>(n()));
    std::vector<int> steps(static_cast<std::size_t>(n()), 0);
    spawn([&](int ordinal) {
      const auto r = static_cast<std::size_t>(ordinal);
      detail::SplitMix64 stream(7, static_cast<uint64_t>(round * 10 + ordinal));
      // The same on every replica: a closure holding the carried value would keep the step from
      // donating it, and the replicas' graphs must agree.
      const int log_every = 1 + round / 2 % 2;
      DataLoader own_source(own, {.batch_size = 1});
      Tensor value = zeros({1});
      int step = 0;
      const auto train = [&](const auto& loader) {
        for (const DeviceBatch& batch : loader) {
          const Tensor sample = cast(batch[0], DType::kFloat32);
          value = all_reduce(ReduceType::kSum, value * 0.5 + sample * (ordinal + 2), 1.0 / n());
          ++step;
          if (step % log_every == 0 || step == kSteps) {
            // As the trainers' loss: an output of the step, not the state carried to the next.
            const Tensor report = value * 3.0;
            add_step_closure([&logged, r, report] { logged[r].push_back(report.item() / 3); },
                             /*run_async=*/true);
          }
          mark_step();
          if (stream.next_below(4) == 0 || step == kSteps) {
            wait_device_ops({xla_device()});
            const std::size_t due = static_cast<std::size_t>(step / log_every) +
                                    (step == kSteps && step % log_every != 0 ? 1 : 0);
            ASSERT_EQ(logged[r].size(), due) << "round " << round << " step " << step;
          }
        }
      };
      if (one_loader) {
        train(parallel->per_device_loader(xla_device()));
      } else {
        train(MpDeviceLoader(own_source, xla_device(), options));
      }
      steps[r] = step;
      // Which steps logged, in order, and what they saw.
      std::size_t i = 0;
      for (int k = 1; k <= kSteps; ++k) {
        if (k % log_every != 0 && k != kSteps) continue;
        ASSERT_LT(i, logged[r].size());
        EXPECT_NEAR(logged[r][i], expected[static_cast<std::size_t>(k - 1)],
                    1e-5 * (1 + expected[static_cast<std::size_t>(k - 1)]))
            << "round " << round << " replica " << ordinal << " step " << k;
        ++i;
      }
    });
    EXPECT_EQ(steps, std::vector<int>(static_cast<std::size_t>(n()), kSteps)) << "round " << round;
  }
  config::unset("AXLE_COLLECTIVE_TIMEOUT");
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
