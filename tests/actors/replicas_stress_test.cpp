// Replication under load (actors/host/replicas.h): many rounds of rendezvous and mesh_reduce
// against a host reference, spawn after spawn, and failures at random points that must never hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

class ReplicasStress : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
  [[nodiscard]] int n() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Devices, ReplicasStress, ::testing::Values(2, 3, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "devices"; });

std::vector<std::byte> encode(int64_t value) {
  std::vector<std::byte> bytes(sizeof value);
  std::memcpy(bytes.data(), &value, sizeof value);
  return bytes;
}

int64_t decode(const std::vector<std::byte>& bytes) {
  int64_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof value);
  return value;
}

int64_t contribution(int replica, int round) { return 1000 * round + replica * replica; }

TEST_P(ReplicasStress, RendezvousAndMeshReduceMatchAHostReferenceRoundAfterRound) {
  constexpr int kRounds = 2000;
  std::atomic<int> wrong{0};
  spawn([&](int i) {
    for (int round = 0; round < kRounds; ++round) {
      const auto all = rendezvous("round " + std::to_string(round), encode(contribution(i, round)));
      bool ok = static_cast<int>(all.size()) == n();
      for (int j = 0; ok && j < n(); ++j) ok = decode(all[j]) == contribution(j, round);
      int64_t reference = 0;
      for (int j = 0; j < n(); ++j) reference += contribution(j, round);
      const int64_t sum = mesh_reduce("sum", contribution(i, round), [](const auto& values) {
        int64_t total = 0;
        for (int64_t v : values) total += v;
        return total;
      });
      if (!ok || sum != reference) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(ReplicasStress, SpawnAfterSpawnStepsAndMeetsEveryTime) {
  constexpr int kSpawns = 100;
  for (int s = 0; s < kSpawns; ++s) {
    std::vector<double> totals(n(), -1);
    spawn([&](int i) {
      Tensor x = full({4}, static_cast<double>(i + s));
      x = x * 2.0;
      mark_step();
      totals[i] = mesh_reduce("total", sum(x).item(), [](const std::vector<double>& all) {
        double t = 0;
        for (double v : all) t += v;
        return t;
      });
    });
    double reference = 0;
    for (int j = 0; j < n(); ++j) reference += 8.0 * (j + s);
    for (int i = 0; i < n(); ++i) ASSERT_DOUBLE_EQ(totals[i], reference) << "spawn " << s;
  }
}

TEST_P(ReplicasStress, AFailureAtARandomRoundNeverHangs) {
  constexpr int kTrials = 100;
  std::mt19937 random(1234 + n());
  for (int trial = 0; trial < kTrials; ++trial) {
    const int failing = static_cast<int>(random() % n());
    const int fail_round = static_cast<int>(random() % 20);
    const auto start = std::chrono::steady_clock::now();
    try {
      spawn([&](int i) {
        for (int round = 0; round < 20; ++round) {
          if (i == failing && round == fail_round) throw std::runtime_error("injected");
          (void)rendezvous("round");
        }
      });
      FAIL() << "trial " << trial << ": spawn did not throw";
    } catch (const ReplicaError& e) {
      EXPECT_EQ(e.replica(), failing) << e.what();
      EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, 30s) << "trial " << trial;
  }
}

}  // namespace
}  // namespace axle
