// Replication (actors/host/replicas.h): spawn runs one replica per device, each on its own thread,
// device and trace context; the runtime queries describe the caller; rendezvous and mesh_reduce
// meet through the RendezvousActor, and fail — never hang — on a failed replica, mismatched
// tags, a missing replica or a timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/trace_context.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

std::string text_of(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// What a replica throws from a collective, as text ("" when nothing).
template <class Error, class F>
std::string error_from(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class Replicas : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
  [[nodiscard]] int n() const { return GetParam(); }
};

// Tests that need other replicas to meet, run with that many devices or more.
class MultiReplicas : public Replicas {};
class ThreeOrMoreReplicas : public Replicas {};

auto device_count_name = [](const auto& info) { return std::to_string(info.param) + "devices"; };
INSTANTIATE_TEST_SUITE_P(Devices, Replicas, ::testing::Values(1, 2, 3, 4, 8), device_count_name);
INSTANTIATE_TEST_SUITE_P(Devices, MultiReplicas, ::testing::Values(2, 3, 4, 8), device_count_name);
INSTANTIATE_TEST_SUITE_P(Devices, ThreeOrMoreReplicas, ::testing::Values(3, 4, 8),
                         device_count_name);

TEST_P(Replicas, SpawnRunsTheFunctionOncePerOrdinalOnItsOwnThreadAndDevice) {
  struct Seen {
    std::thread::id thread;
    int device, default_device, api_device, world, global, local;
    bool master;
  };
  std::mutex mutex;
  std::map<int, Seen> seen;
  spawn([&](int i) {
    Seen s{std::this_thread::get_id(),
           xla_device().ordinal,
           Device{}.ordinal,
           device().ordinal,
           world_size(),
           global_ordinal(),
           local_ordinal(),
           is_master_ordinal()};
    std::lock_guard lock(mutex);
    EXPECT_TRUE(seen.emplace(i, s).second) << "ordinal " << i << " ran twice";
  });
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(n()));
  std::set<std::thread::id> threads;
  for (const auto& [i, s] : seen) {
    threads.insert(s.thread);
    EXPECT_EQ(s.device, i);
    EXPECT_EQ(s.default_device, i);
    EXPECT_EQ(s.api_device, i);
    EXPECT_EQ(s.world, n());
    EXPECT_EQ(s.global, i);
    EXPECT_EQ(s.local, i);
    EXPECT_EQ(s.master, i == 0);
  }
  EXPECT_EQ(threads.size(), static_cast<std::size_t>(n()));
  if (n() == 1) {
    EXPECT_EQ(seen[0].thread, std::this_thread::get_id());
  } else {
    EXPECT_FALSE(threads.contains(std::this_thread::get_id()));
  }
}

TEST_P(Replicas, RuntimeQueriesOutsideSpawnDescribeOneReplicaOnDeviceZero) {
  EXPECT_EQ(world_size(), 1);
  EXPECT_EQ(global_ordinal(), 0);
  EXPECT_EQ(local_ordinal(), 0);
  EXPECT_EQ(local_process_count(), 1);
  EXPECT_EQ(local_device_count(), n());
  EXPECT_EQ(addressable_device_count(), n());
  EXPECT_EQ(global_device_count(), n());
  EXPECT_TRUE(is_master_ordinal());
  EXPECT_TRUE(is_master_ordinal(false));
  EXPECT_EQ(xla_device(), Device{0});
  EXPECT_EQ(device(), Device{0});
  EXPECT_EQ(zeros({2}).device(), Device{0});
}

TEST_P(Replicas, EachReplicaComputesOnItsOwnDeviceAndMarksItsOwnStep) {
  std::vector<std::vector<float>> results(n());
  spawn([&](int i) {
    Tensor x = tensor(std::vector<float>{1, 2, 3}, {3});  // on the replica's default device
    EXPECT_EQ(x.device(), Device{i});
    EXPECT_EQ(zeros({2}).device(), Device{i});
    Tensor y = x * static_cast<double>(i + 1) + ones({3});
    rendezvous("traced");
    if (i == 0) mark_step();  // cuts replica 0's trace only
    rendezvous("stepped");
    EXPECT_EQ(y.impl()->pending_ir(), i != 0) << "replica " << i;
    mark_step();
    EXPECT_FALSE(y.impl()->pending_ir());
    EXPECT_EQ(y.impl()->data()->device(), Device{i});
    EXPECT_EQ(TraceContext::current().pending_count(), 0u);
    results[i] = y.to_vector<float>();
  });
  for (int i = 0; i < n(); ++i) {
    const float k = static_cast<float>(i + 1);
    EXPECT_EQ(results[i], (std::vector<float>{k + 1, 2 * k + 1, 3 * k + 1})) << "replica " << i;
  }
}

TEST_P(Replicas, RendezvousReturnsEveryReplicasPayloadByOrdinal) {
  std::vector<std::vector<std::string>> got(n());
  spawn([&](int i) {
    const std::string mine = "payload of " + std::to_string(i);
    for (const auto& bytes : rendezvous("exchange", bytes_of(mine)))
      got[i].push_back(text_of(bytes));
  });
  std::vector<std::string> expected;
  for (int j = 0; j < n(); ++j) expected.push_back("payload of " + std::to_string(j));
  for (int i = 0; i < n(); ++i) EXPECT_EQ(got[i], expected) << "replica " << i;
}

TEST_P(ThreeOrMoreReplicas, RendezvousOverSomeReplicasMeetsThoseOnly) {
  std::vector<std::vector<std::string>> got(n());
  spawn([&](int i) {
    std::vector<int> same_parity;
    for (int j = i % 2; j < n(); j += 2) same_parity.push_back(j);
    const std::string mine = std::to_string(i);
    for (const auto& b : rendezvous("parity", bytes_of(mine), same_parity)) {
      got[i].push_back(text_of(b));
    }
  });
  for (int i = 0; i < n(); ++i) {
    std::vector<std::string> expected;
    for (int j = i % 2; j < n(); j += 2) expected.push_back(std::to_string(j));
    EXPECT_EQ(got[i], expected) << "replica " << i;
  }
}

TEST_P(Replicas, MeshReduceGivesEveryReplicaTheSameReduction) {
  std::vector<double> sums(n());
  std::vector<std::vector<int>> concatenated(n());
  spawn([&](int i) {
    sums[i] = mesh_reduce("loss", 0.5 * (i + 1), [](const std::vector<double>& losses) {
      return std::accumulate(losses.begin(), losses.end(), 0.0);
    });
    concatenated[i] = mesh_reduce("ids", std::vector<int>{i, -i}, [](const auto& all) {
      std::vector<int> flat;
      for (const std::vector<int>& part : all) flat.insert(flat.end(), part.begin(), part.end());
      return flat;
    });
  });
  std::vector<int> expected;
  for (int j = 0; j < n(); ++j) expected.insert(expected.end(), {j, -j});
  for (int i = 0; i < n(); ++i) {
    EXPECT_DOUBLE_EQ(sums[i], 0.25 * n() * (n() + 1));
    EXPECT_EQ(concatenated[i], expected);
  }
}

TEST_P(Replicas, OutsideSpawnCollectivesMeetTheCallerAlone) {
  const auto got = rendezvous("alone", bytes_of("me"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(text_of(got[0]), "me");
  EXPECT_EQ(mesh_reduce("alone", 3, [](const std::vector<int>& v) { return v.size() * v[0]; }), 3u);
  EXPECT_THROW(rendezvous("alone", {}, {1}), std::invalid_argument);
}

// wait_device_ops() inside spawn waits for the calling replica's own device. The others' devices
// already hold their next step, waiting at an all-reduce for this replica's: a wait for those
// would wait for a step this replica issues only after it (until the collective timed out).
TEST_P(MultiReplicas, WaitDeviceOpsWaitsForItsOwnDeviceNotForAnotherReplicasNextCollective) {
  std::atomic<int> ahead{0};  // replicas whose third step is on their device
  std::vector<double> values(static_cast<std::size_t>(n()));
  spawn([&](int replica) {
    Tensor x = tensor(std::vector<float>{static_cast<float>(replica + 1)}, {1});
    for (int step = 0; step < 4; ++step) {
      x = all_reduce(ReduceType::kSum, x * 0.5 + 3.0);
      mark_step();
      // Steps 0 and 1 compiled (the replicas compared their graphs then); 2 and 3 run cached, so
      // nothing but their devices' all-reduces holds the others back.
      if (step == 1) (void)rendezvous("step 1");
      if (step == 2 && replica != 0) ++ahead;
      if (step == 1 && replica == 0) {
        const auto give_up = std::chrono::steady_clock::now() + 30s;
        while (ahead.load() < n() - 1 && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::yield();
        }
        wait_device_ops();
        EXPECT_EQ(ahead.load(), n() - 1);
      }
    }
    values[static_cast<std::size_t>(replica)] = x.item();
  });
  // The same on every replica: x = n (x / 2 + 3) from each replica's ordinal + 1.
  double x = 0;
  for (int r = 0; r < n(); ++r) x += 0.5 * (r + 1) + 3.0;
  for (int step = 1; step < 4; ++step) x = n() * (0.5 * x + 3.0);
  EXPECT_EQ(values, std::vector<double>(static_cast<std::size_t>(n()), x));
}

TEST_P(MultiReplicas, AFailingReplicaCancelsTheOthersWaitingInARendezvous) {
  const int failing = n() - 1;
  std::vector<std::string> cancelled(n());
  std::vector<int> named(n(), -1);
  const auto start = std::chrono::steady_clock::now();
  try {
    spawn([&](int i) {
      if (i == failing) {
        std::this_thread::sleep_for(50ms);  // let the others block first
        throw std::runtime_error("loss is NaN");
      }
      try {
        rendezvous("epoch end");
      } catch (const ReplicaCancelled& e) {
        cancelled[i] = e.what();
        named[i] = e.failed_replica();
        throw;
      }
    });
    FAIL() << "spawn did not throw";
  } catch (const ReplicaError& e) {
    EXPECT_EQ(e.replica(), failing);
    EXPECT_NE(std::string(e.what()).find("replica " + std::to_string(failing)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("loss is NaN"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  for (int i = 0; i < failing; ++i) {
    EXPECT_EQ(named[i], failing);
    EXPECT_NE(cancelled[i].find("replica " + std::to_string(failing) + " failed: loss is NaN"),
              std::string::npos)
        << cancelled[i];
    EXPECT_NE(cancelled[i].find("'epoch end'"), std::string::npos) << cancelled[i];
  }
}

TEST_P(MultiReplicas, AfterAFailureLaterCollectivesFailAtOnce) {
  std::atomic<int> cancelled{0};
  EXPECT_THROW(spawn([&](int i) {
                 if (i == 0) throw std::logic_error("bad config");
                 std::this_thread::sleep_for(30ms);
                 for (int k = 0; k < 3; ++k) {
                   try {
                     (void)mesh_reduce("count", 1,
                                       [](const std::vector<int>& v) { return v.size(); });
                   } catch (const ReplicaCancelled& e) {
                     if (e.failed_replica() == 0) ++cancelled;
                   }
                 }
               }),
               ReplicaError);
  EXPECT_EQ(cancelled.load(), 3 * (n() - 1));
}

TEST_P(MultiReplicas, ReplicaErrorKeepsTheOriginalException) {
  try {
    spawn([](int i) {
      if (i == 1) throw std::out_of_range("index 7 of 3");
    });
    FAIL() << "spawn did not throw";
  } catch (const ReplicaError& e) {
    EXPECT_EQ(e.replica(), 1);
    EXPECT_THROW(std::rethrow_exception(e.original()), std::out_of_range);
  }
}

TEST_P(MultiReplicas, MismatchedTagsAreAnErrorNamingBoth) {
  std::vector<std::string> errors(n());
  spawn([&](int i) {
    errors[i] =
        error_from<CollectiveError>([&] { rendezvous(i == 0 ? "save checkpoint" : "next epoch"); });
  });
  for (int i = 0; i < n(); ++i) {
    EXPECT_NE(errors[i].find("'save checkpoint'"), std::string::npos) << errors[i];
    EXPECT_NE(errors[i].find("'next epoch'"), std::string::npos) << errors[i];
  }
}

TEST_P(MultiReplicas, MeshReduceOfDifferentTypesIsAnErrorNamingThem) {
  std::string error;
  spawn([&](int i) {
    const std::string e = error_from<CollectiveError>([&] {
      if (i == 0)
        (void)mesh_reduce("x", 1, [](const auto& v) { return v.size(); });
      else
        (void)mesh_reduce("x", 1.0, [](const auto& v) { return v.size(); });
    });
    if (i == 0) error = e;
  });
  EXPECT_NE(error.find("int"), std::string::npos) << error;
  EXPECT_NE(error.find("double"), std::string::npos) << error;
}

TEST_P(MultiReplicas, ATimeoutNamesTheTagAndTheReplicasThatNeverArrived) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "0.2");
  std::string error;
  std::atomic<bool> timed_out{false};
  spawn([&](int i) {
    if (i == 0) {
      error = error_from<CollectiveTimeout>([] { rendezvous("weights ready"); });
      timed_out = true;
      return;
    }
    // The others are busy elsewhere until replica 0 has given up.
    while (!timed_out) std::this_thread::sleep_for(1ms);
  });
  std::string missing;
  for (int j = 1; j < n(); ++j) missing += (j > 1 ? ", " : "") + std::to_string(j);
  EXPECT_NE(error.find("'weights ready'"), std::string::npos) << error;
  EXPECT_NE(error.find("{" + missing + "} never arrived"), std::string::npos) << error;
}

TEST_P(MultiReplicas, AReplicaThatReturnsWithoutArrivingFailsTheRendezvous) {
  std::string error;
  spawn([&](int i) {
    if (i != 0) return;
    error = error_from<CollectiveError>([] { rendezvous("barrier"); });
  });
  EXPECT_NE(error.find("returned from its function without reaching it"), std::string::npos)
      << error;
}

TEST_P(Replicas, NprocsMustBeOneOrEveryDevice) {
  int calls = 0;
  spawn(
      [&](int i) {
        ++calls;
        EXPECT_EQ(i, 0);
        EXPECT_EQ(world_size(), 1);
      },
      1);
  EXPECT_EQ(calls, 1);
  for (int wrong : {0, -1, n() + 1}) {
    try {
      spawn([](int) {}, wrong);
      FAIL() << "nprocs=" << wrong << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("nprocs=" + std::to_string(wrong)), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("has " + std::to_string(n()) + " CPU device"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_P(MultiReplicas, AReplicaCannotSpawnReplicas) {
  std::atomic<int> refused{0};
  spawn([&](int) {
    try {
      spawn([](int) {});
    } catch (const std::invalid_argument&) {
      ++refused;
    }
  });
  EXPECT_EQ(refused.load(), n());
}

TEST_P(MultiReplicas, ReplicasMustIncludeTheCaller) {
  std::atomic<int> refused{0};
  spawn([&](int i) {
    try {
      rendezvous("other", {}, {(i + 1) % n()});
    } catch (const std::invalid_argument&) {
      ++refused;
    }
  });
  EXPECT_EQ(refused.load(), n());
}

}  // namespace
}  // namespace axle
