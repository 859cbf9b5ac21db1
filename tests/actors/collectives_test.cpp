// In-graph collectives (graph/collectives.h) among spawn's replicas, each checked against a
// reference computed on the host from every replica's input, for 1, 2, 3, 4 and 8 devices and
// for groups; bad groups fail as they are traced; replicas whose graphs differ, a replica that
// fails and one that never comes all end in errors, never in a hang; optimizer_step and
// broadcast_master_param leave every replica with the same parameters.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <limits>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "tests/actors/collective_fold.h"
#include "tests/error_text.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

class Collectives : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = GetParam()});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
  [[nodiscard]] int n() const { return GetParam(); }

  // Runs fn(replica) on every replica and returns what each returned, by ordinal.
  template <class T>
  std::vector<T> on_replicas(const std::function<T(int)>& fn) {
    std::vector<T> results(static_cast<std::size_t>(n()));
    spawn([&](int r) { results[static_cast<std::size_t>(r)] = fn(r); });
    return results;
  }
};

class MultiDevice : public Collectives {};
class EvenDevices : public Collectives {};

auto device_count_name = [](const auto& info) { return std::to_string(info.param) + "devices"; };
INSTANTIATE_TEST_SUITE_P(Devices, Collectives, ::testing::Values(1, 2, 3, 4, 8), device_count_name);
INSTANTIATE_TEST_SUITE_P(Devices, MultiDevice, ::testing::Values(2, 3, 4, 8), device_count_name);
INSTANTIATE_TEST_SUITE_P(Devices, EvenDevices, ::testing::Values(2, 4, 8), device_count_name);

// Replica r's input: small multiples of 0.5, different on every replica and element.
std::vector<float> input_of(int replica, int64_t size) {
  std::vector<float> v(static_cast<std::size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    v[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>((replica * 7 + i * 3) % 5 + 1);
  }
  return v;
}
std::vector<int32_t> int_input_of(int replica, int64_t size) {
  std::vector<int32_t> v(static_cast<std::size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<int32_t>((replica * 5 + i * 3) % 9 - 4);
  }
  return v;
}

using testing::fold;

// Every replica's group, given as groups or (empty) all replicas.
std::vector<int> group_of(int replica, const ReplicaGroups& groups, int world) {
  if (groups.empty()) {
    std::vector<int> all(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
    return all;
  }
  for (const auto& group : groups) {
    if (std::ranges::find(group, replica) != group.end()) return group;
  }
  return {};
}

// Groups of two neighbours ({0,1}, {2,3}, ...) and of every other replica ({0,2,..}, {1,3,..}).
ReplicaGroups pairs(int world) {
  ReplicaGroups groups;
  for (int r = 0; r < world; r += 2) groups.push_back({r, r + 1});
  return groups;
}
ReplicaGroups strided(int world) {
  ReplicaGroups groups(2);
  for (int r = 0; r < world; ++r) groups[static_cast<std::size_t>(r % 2)].push_back(r);
  return groups;
}

TEST_P(Collectives, AllReduceCombinesEveryReplicasValuesForEachReduceType) {
  constexpr int64_t kSize = 37;
  for (ReduceType type : {ReduceType::kSum, ReduceType::kMul, ReduceType::kMin, ReduceType::kMax}) {
    const double scale = type == ReduceType::kSum ? 0.25 : 1.0;
    const auto floats = on_replicas<std::vector<float>>([&](int r) {
      return all_reduce(type, tensor(input_of(r, kSize), {kSize}), scale).to_vector<float>();
    });
    const auto ints = on_replicas<std::vector<int32_t>>([&](int r) {
      return all_reduce(type, tensor(int_input_of(r, kSize), {kSize})).to_vector<int32_t>();
    });
    for (int64_t i = 0; i < kSize; ++i) {
      float f = input_of(0, kSize)[i];
      int32_t k = int_input_of(0, kSize)[i];
      for (int r = 1; r < n(); ++r) {
        f = fold(type, f, input_of(r, kSize)[i]);
        k = fold(type, k, int_input_of(r, kSize)[i]);
      }
      f *= static_cast<float>(scale);
      for (int r = 0; r < n(); ++r) {
        ASSERT_EQ(floats[r][i], f) << reduce_type_name(type) << " replica " << r << " at " << i;
        ASSERT_EQ(ints[r][i], k) << reduce_type_name(type) << " replica " << r << " at " << i;
      }
    }
  }
}

// Large all-reduces take other paths: from 256 KiB the members share one result and each folds
// a stretch of it, from 8 MiB the result is stored past the caches. Odd sizes leave the
// stretches unaligned.
TEST_P(Collectives, LargeAllReducesMatchTheReferenceInEveryElement) {
  for (const int64_t size : {int64_t{100'003}, int64_t{2'500'001}}) {
    for (ReduceType type : {ReduceType::kSum, ReduceType::kMax}) {
      const double scale = type == ReduceType::kSum ? 0.25 : 1.0;
      const auto floats = on_replicas<std::vector<float>>([&](int r) {
        return all_reduce(type, tensor(input_of(r, size), {size}), scale).to_vector<float>();
      });
      const auto ints = on_replicas<std::vector<int32_t>>([&](int r) {
        return all_reduce(type, tensor(int_input_of(r, size), {size})).to_vector<int32_t>();
      });
      std::vector<std::vector<float>> f_in;
      std::vector<std::vector<int32_t>> i_in;
      for (int r = 0; r < n(); ++r) {
        f_in.push_back(input_of(r, size));
        i_in.push_back(int_input_of(r, size));
      }
      for (int64_t i = 0; i < size; ++i) {
        float f = f_in[0][i];
        int32_t k = i_in[0][i];
        for (int r = 1; r < n(); ++r) {
          f = fold(type, f, f_in[r][i]);
          k = fold(type, k, i_in[r][i]);
        }
        f *= static_cast<float>(scale);
        for (int r = 0; r < n(); ++r) {
          ASSERT_EQ(floats[r][i], f) << reduce_type_name(type) << " of " << size
                                     << " elements, replica " << r << " at " << i;
          ASSERT_EQ(ints[r][i], k) << reduce_type_name(type) << " of " << size
                                   << " elements, replica " << r << " at " << i;
        }
      }
    }
  }
}

// A shared all-reduce result counts on every member's device, as a buffer of its own would on
// devices that share nothing (not on the first member's alone, for as long as any member holds
// it), and goes from a member's count when that member lets go of it.
TEST_P(Collectives, ASharedAllReduceResultCountsOnEveryMembersDevice) {
  constexpr int64_t kSize = int64_t{1} << 18;  // 1 MiB of floats: the members share the result
  constexpr auto kBytes = static_cast<int64_t>(kSize * sizeof(float));
  struct Counts {
    int64_t before = 0, reduced = 0, released = 0;
    float first = 0;
  };
  const auto counts = on_replicas<Counts>([&](int r) {
    Counts c;
    const Tensor x = tensor(input_of(r, kSize), {kSize});
    mark_step();
    wait_device_ops();
    c.before = static_cast<int64_t>(get_memory_info().bytes_in_use);
    Tensor reduced = all_reduce(ReduceType::kSum, x);
    Tensor doubled = reduced * 2.0;
    // The step's smallest result, which a host keeps to tell when the step is done.
    const Tensor done = sum(x);
    mark_step();
    wait_device_ops();
    c.reduced = static_cast<int64_t>(get_memory_info().bytes_in_use) - 4;  // done
    reduced = Tensor();
    c.released = static_cast<int64_t>(get_memory_info().bytes_in_use) - 4;
    c.first = doubled.to_vector<float>()[0];
    (void)rendezvous("counted");  // every member counted while the others still held theirs
    return c;
  });
  float sum = 0;
  for (int r = 0; r < n(); ++r) sum += input_of(r, 1)[0];
  for (int r = 0; r < n(); ++r) {
    const Counts& c = counts[static_cast<std::size_t>(r)];
    EXPECT_EQ(c.reduced - c.before, 2 * kBytes) << "replica " << r;
    EXPECT_EQ(c.released - c.before, kBytes) << "replica " << r;
    EXPECT_EQ(c.first, 2 * sum) << "replica " << r;
  }
}

// Short steps with a collective run on the replicas' own threads (AXLE_RUN_ON_HOST_BELOW_US),
// which meet there as their devices would, step after step.
TEST_P(Collectives, ShortCollectiveStepsRunOnTheReplicasThreads) {
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "1000000");
  LazySystem::restart(LazySystemOptions{.cpu_devices = n()});
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  constexpr int kSteps = 12;
  constexpr int64_t kSize = 5;
  const int64_t before = counter_value("StepsRunOnHost").value_or(0);
  const auto sums = on_replicas<std::vector<float>>([&](int r) {
    Tensor x = tensor(input_of(r, kSize), {kSize});
    for (int step = 0; step < kSteps; ++step) {
      x = all_reduce(ReduceType::kSum, x, 1.0 / n()) + 1.0;
      mark_step();
    }
    return x.to_vector<float>();
  });
  // Each step averages the replicas' values and adds one.
  std::vector<double> expected(kSize, 0);
  for (int r = 0; r < n(); ++r) {
    for (int64_t i = 0; i < kSize; ++i) expected[i] += input_of(r, kSize)[i] / n();
  }
  for (int r = 0; r < n(); ++r) {
    for (int64_t i = 0; i < kSize; ++i) {
      EXPECT_NEAR(sums[r][i], expected[i] + kSteps, 1e-4) << "replica " << r << " element " << i;
    }
  }
  EXPECT_GE(counter_value("StepsRunOnHost").value_or(0) - before, n());
}

TEST_P(Collectives, AllReduceOfPredicatesAndsAndOrs) {
  // Replica r's element i is true unless i == r (and), or only when i == r (or).
  const int64_t size = n() + 1;
  for (ReduceType type : {ReduceType::kAnd, ReduceType::kOr}) {
    const auto results = on_replicas<std::vector<float>>([&](int r) {
      // The replica's ordinal as data: as a scalar, 0 and 1 would be constants of the graph and
      // make replica 0's and 1's graphs differ.
      Tensor index = arange(0, static_cast<double>(size));
      Tensor me = tensor(std::vector<float>{static_cast<float>(r)}, {1});
      Tensor mine = type == ReduceType::kAnd ? ne(index, me) : eq(index, me);
      return cast(all_reduce(type, mine), DType::kFloat32).to_vector<float>();
    });
    for (int r = 0; r < n(); ++r) {
      for (int64_t i = 0; i < size; ++i) {
        const bool replica_i_exists = i < n();
        const float want = type == ReduceType::kAnd ? !replica_i_exists : replica_i_exists;
        EXPECT_EQ(results[r][i], want) << reduce_type_name(type) << " replica " << r << " at " << i;
      }
    }
  }
}

TEST_P(EvenDevices, AllReduceWithinGroupsCombinesOnlyTheGroupsValues) {
  constexpr int64_t kSize = 9;
  for (const ReplicaGroups& groups : {pairs(n()), strided(n())}) {
    const auto results = on_replicas<std::vector<float>>([&](int r) {
      return all_reduce(ReduceType::kSum, tensor(input_of(r, kSize), {kSize}), 1.0, groups)
          .to_vector<float>();
    });
    for (int r = 0; r < n(); ++r) {
      const std::vector<int> group = group_of(r, groups, n());
      for (int64_t i = 0; i < kSize; ++i) {
        float want = input_of(group[0], kSize)[i];
        for (std::size_t m = 1; m < group.size(); ++m) want += input_of(group[m], kSize)[i];
        ASSERT_EQ(results[r][i], want) << "replica " << r << " at " << i;
      }
    }
  }
}

// The compiler combines a step's independent small all_reduces of one kind (graph/passes): each
// result matches the reference, and its bits are those of the all_reduces left apart.
TEST_P(EvenDevices, CombinedAllReducesGiveEachResultItsOwnBits) {
  auto run = [&] {
    return on_replicas<std::vector<std::vector<float>>>([&](int r) {
      const Tensor a = tensor(input_of(r, 6), {2, 3});
      const Tensor b = tensor(input_of(r + 1, 5), {5});
      const Tensor c = tensor(input_of(r + 2, 1), {});
      std::vector<Tensor> results = {
          all_reduce(ReduceType::kSum, a, 0.25),
          all_reduce(ReduceType::kSum, b, 0.25),
          all_reduce(ReduceType::kSum, c, 0.25),  // these three combine
          all_reduce(ReduceType::kMax, a),
          all_reduce(ReduceType::kMax, b),  // these two
          all_reduce(ReduceType::kSum, a, 1.0, pairs(n())),
          all_reduce(ReduceType::kSum, b, 1.0, pairs(n())),                      // and these two
          all_reduce(ReduceType::kSum, all_reduce(ReduceType::kSum, b) * 0.5)};  // a chain
      mark_step();  // one graph of them all
      std::vector<std::vector<float>> out;
      for (Tensor& t : results) out.push_back(t.to_vector<float>());
      return out;
    });
  };
  const auto combined = run();
  config::set("AXLE_DISABLE_PASSES", "all_reduce_combiner");
  LazySystem::restart(LazySystemOptions{.cpu_devices = n()});
  const auto apart = run();
  config::unset("AXLE_DISABLE_PASSES");
  auto reference = [&](int offset, int64_t size, ReduceType type, double scale,
                       const std::vector<int>& group) {
    std::vector<float> want = input_of(group[0] + offset, size);
    for (std::size_t m = 1; m < group.size(); ++m) {
      const std::vector<float> more = input_of(group[m] + offset, size);
      for (int64_t i = 0; i < size; ++i) want[i] = fold(type, want[i], more[i]);
    }
    for (float& v : want) v *= static_cast<float>(scale);
    return want;
  };
  for (int r = 0; r < n(); ++r) {
    const std::vector<int> all = group_of(r, {}, n());
    const std::vector<int> pair = group_of(r, pairs(n()), n());
    std::vector<float> chain = reference(1, 5, ReduceType::kSum, 0.5, all);
    for (float& v : chain) v *= static_cast<float>(n());  // every replica brings the same values
    const std::vector<std::vector<float>> want = {
        reference(0, 6, ReduceType::kSum, 0.25, all), reference(1, 5, ReduceType::kSum, 0.25, all),
        reference(2, 1, ReduceType::kSum, 0.25, all), reference(0, 6, ReduceType::kMax, 1.0, all),
        reference(1, 5, ReduceType::kMax, 1.0, all),  reference(0, 6, ReduceType::kSum, 1.0, pair),
        reference(1, 5, ReduceType::kSum, 1.0, pair), chain};
    for (std::size_t t = 0; t < want.size(); ++t) {
      EXPECT_EQ(combined[r][t], want[t]) << "replica " << r << " result " << t;
      EXPECT_EQ(std::memcmp(combined[r][t].data(), apart[r][t].data(), 4 * want[t].size()), 0)
          << "replica " << r << " result " << t;
    }
  }
}

TEST_P(Collectives, AllReduceOfManyTensorsReducesEachDtypeAsOneBuffer) {
  const auto before = counter_value("xla::all_reduce").value_or(0);
  const auto results = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    std::vector<Tensor> inputs = {tensor(input_of(r, 6), {2, 3}), tensor(input_of(r + 1, 4), {4}),
                                  cast(tensor(int_input_of(r, 5), {5}), DType::kInt32),
                                  tensor(input_of(r + 2, 1), {})};
    std::vector<Tensor> reduced = all_reduce(ReduceType::kSum, inputs, 0.5);
    EXPECT_EQ(reduced[0].shape(), (Shape{2, 3}));
    EXPECT_EQ(reduced[3].shape(), Shape{});
    EXPECT_EQ(reduced[2].dtype(), DType::kInt32);
    std::vector<std::vector<float>> out;
    for (const Tensor& t : reduced) out.push_back(cast(t, DType::kFloat32).to_vector<float>());
    return out;
  });
  // One collective for the f32 tensors and one for the s32 tensor, on every replica.
  EXPECT_EQ(counter_value("xla::all_reduce").value_or(0) - before, 2 * n());
  const std::vector<std::pair<int, int64_t>> f32_inputs = {{0, 6}, {1, 4}, {2, 1}};
  for (int r = 0; r < n(); ++r) {
    for (std::size_t t : {0u, 1u, 3u}) {
      const auto [offset, size] = f32_inputs[t == 3 ? 2 : t];
      for (int64_t i = 0; i < size; ++i) {
        float want = input_of(offset, size)[i];
        for (int m = 1; m < n(); ++m) want += input_of(m + offset, size)[i];
        ASSERT_EQ(results[r][t][i], want * 0.5f) << "replica " << r << " tensor " << t;
      }
    }
    for (int64_t i = 0; i < 5; ++i) {
      int32_t want = 0;
      for (int m = 0; m < n(); ++m) want += int_input_of(m, 5)[i];
      ASSERT_EQ(results[r][2][i], static_cast<float>(static_cast<int32_t>(want * 0.5)))
          << "replica " << r;
    }
  }
}

TEST_P(Collectives, AllReduceOfManyTensorsReducesEachLargeOneOnItsOwn) {
  constexpr int64_t kLarge = 65536;  // 256 KiB of f32: reduced on its own
  const auto before = counter_value("xla::all_reduce").value_or(0);
  const auto results = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    std::vector<Tensor> inputs = {tensor(input_of(r, 6), {2, 3}),
                                  tensor(input_of(r + 1, kLarge), {256, 256}),
                                  tensor(input_of(r + 2, 4), {4})};
    std::vector<Tensor> reduced = all_reduce(ReduceType::kSum, inputs, 0.5);
    EXPECT_EQ(reduced[1].shape(), (Shape{256, 256}));
    std::vector<std::vector<float>> out;
    for (const Tensor& t : reduced) out.push_back(t.to_vector<float>());
    return out;
  });
  // The large tensor alone, the two small ones in one buffer: two collectives per replica.
  EXPECT_EQ(counter_value("xla::all_reduce").value_or(0) - before, 2 * n());
  const std::vector<std::pair<int, int64_t>> inputs = {{0, 6}, {1, kLarge}, {2, 4}};
  for (int r = 0; r < n(); ++r) {
    for (std::size_t t = 0; t < inputs.size(); ++t) {
      const auto [offset, size] = inputs[t];
      std::vector<float> want = input_of(offset, size);
      for (int m = 1; m < n(); ++m) {
        const std::vector<float> more = input_of(m + offset, size);
        for (int64_t i = 0; i < size; ++i) want[i] += more[i];
      }
      for (int64_t i = 0; i < size; ++i) {
        ASSERT_EQ(results[r][t][i], want[i] * 0.5f)
            << "replica " << r << " tensor " << t << " [" << i << "]";
      }
    }
  }
}

TEST_P(Collectives, AllGatherConcatenatesTheGroupsValuesAlongTheDim) {
  const auto results = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    Tensor x = tensor(input_of(r, 6), {2, 3});
    Tensor along0 = all_gather(x, 0);
    Tensor along1 = all_gather(x, -1);
    EXPECT_EQ(along0.shape(), (Shape{2 * n(), 3}));
    EXPECT_EQ(along1.shape(), (Shape{2, 3 * n()}));
    return std::vector<std::vector<float>>{along0.to_vector<float>(), along1.to_vector<float>()};
  });
  for (int r = 0; r < n(); ++r) {
    for (int m = 0; m < n(); ++m) {
      const std::vector<float> x = input_of(m, 6);
      for (int row = 0; row < 2; ++row) {
        for (int col = 0; col < 3; ++col) {
          const float want = x[row * 3 + col];
          ASSERT_EQ(results[r][0][(m * 2 + row) * 3 + col], want) << "dim 0, replica " << r;
          ASSERT_EQ(results[r][1][row * 3 * n() + m * 3 + col], want) << "dim 1, replica " << r;
        }
      }
    }
  }
}

TEST_P(EvenDevices, AllGatherWithinGroupsGathersTheGroupInGroupOrder) {
  const ReplicaGroups groups = strided(n());
  const auto results = on_replicas<std::vector<float>>(
      [&](int r) { return all_gather(tensor(input_of(r, 2), {2}), 0, groups).to_vector<float>(); });
  for (int r = 0; r < n(); ++r) {
    const std::vector<int> group = group_of(r, groups, n());
    ASSERT_EQ(results[r].size(), 2 * group.size());
    for (std::size_t m = 0; m < group.size(); ++m) {
      EXPECT_EQ(results[r][2 * m], input_of(group[m], 2)[0]) << "replica " << r;
      EXPECT_EQ(results[r][2 * m + 1], input_of(group[m], 2)[1]) << "replica " << r;
    }
  }
}

TEST_P(Collectives, ReduceScatterGivesEachReplicaItsBlockOfTheSum) {
  // [2, 3n] scattered along dim 1: replica r gets columns [3r, 3r + 3) of the scaled sum.
  const int64_t cols = 3 * n();
  const auto results = on_replicas<std::vector<float>>([&](int r) {
    Tensor out =
        reduce_scatter(ReduceType::kSum, tensor(input_of(r, 2 * cols), {2, cols}), 0.5, 1, n());
    EXPECT_EQ(out.shape(), (Shape{2, 3}));
    return out.to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) {
    for (int row = 0; row < 2; ++row) {
      for (int col = 0; col < 3; ++col) {
        const int64_t at = row * cols + 3 * r + col;
        float want = input_of(0, 2 * cols)[at];
        for (int m = 1; m < n(); ++m) want += input_of(m, 2 * cols)[at];
        ASSERT_EQ(results[r][row * 3 + col], want * 0.5f) << "replica " << r;
      }
    }
  }
}

TEST_P(EvenDevices, ReduceScatterWithinGroupsScattersOverTheGroup) {
  const ReplicaGroups groups = pairs(n());
  const auto results = on_replicas<std::vector<float>>([&](int r) {
    return reduce_scatter(ReduceType::kMax, tensor(input_of(r, 4), {4}), 1.0, 0, 2, groups)
        .to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) {
    const std::vector<int> group = group_of(r, groups, n());
    const int position = r % 2;
    for (int i = 0; i < 2; ++i) {
      const int at = position * 2 + i;
      EXPECT_EQ(results[r][i], std::max(input_of(group[0], 4)[at], input_of(group[1], 4)[at]))
          << "replica " << r;
    }
  }
}

TEST_P(Collectives, AllToAllSendsBlockIToReplicaI) {
  // x is [n, 2] on each replica, split along dim 0 and concatenated along dim 1: replica r gets
  // [1, 2n] holding row r of every replica's x, in replica order.
  const auto results = on_replicas<std::vector<float>>([&](int r) {
    Tensor out = all_to_all(tensor(input_of(r, 2 * n()), {n(), 2}), 0, 1, n());
    EXPECT_EQ(out.shape(), (Shape{1, 2 * n()}));
    return out.to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) {
    for (int m = 0; m < n(); ++m) {
      for (int c = 0; c < 2; ++c) {
        ASSERT_EQ(results[r][2 * m + c], input_of(m, 2 * n())[2 * r + c])
            << "replica " << r << " from " << m;
      }
    }
  }
}

TEST_P(Collectives, AllToAllAlongOneDimSwapsItsBlocks) {
  const auto results = on_replicas<std::vector<float>>([&](int r) {
    return all_to_all(tensor(input_of(r, 3 * n()), {3 * n()}), 0, 0, n()).to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) {
    for (int m = 0; m < n(); ++m) {
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(results[r][3 * m + i], input_of(m, 3 * n())[3 * r + i]) << "replica " << r;
      }
    }
  }
}

TEST_P(Collectives, CollectivePermuteSendsAlongEachPairAndZeroesTheRest) {
  // A ring shift, and the same shift with the last pair left out.
  for (bool whole_ring : {true, false}) {
    std::vector<std::pair<int, int>> ring;
    for (int r = 0; r < n(); ++r) ring.emplace_back(r, (r + 1) % n());
    if (!whole_ring) ring.pop_back();
    const auto results = on_replicas<std::vector<float>>([&](int r) {
      return collective_permute(tensor(input_of(r, 5), {5}), ring).to_vector<float>();
    });
    for (int r = 0; r < n(); ++r) {
      const int source = (r + n() - 1) % n();
      const bool sent = whole_ring || r != 0;
      EXPECT_EQ(results[r], sent ? input_of(source, 5) : std::vector<float>(5, 0.0f))
          << "replica " << r << (whole_ring ? " (ring)" : " (open ring)");
    }
  }
}

TEST_P(Collectives, CollectivesComputeInsideAStepWithOtherOps) {
  // The all-reduce sits between ops on each side: the device pauses at it mid-program.
  const auto results = on_replicas<std::vector<float>>([&](int r) {
    Tensor x = tensor(input_of(r, 8), {8});
    Tensor y = all_reduce(ReduceType::kSum, x * 2.0) + x;
    Tensor z = all_gather(sum(y, {0}, true), 0) * 3.0;
    mark_step();
    return z.to_vector<float>();
  });
  for (int r = 0; r < n(); ++r) {
    for (int m = 0; m < n(); ++m) {
      float y_sum = 0;
      for (int i = 0; i < 8; ++i) {
        float total = 0;
        for (int k = 0; k < n(); ++k) total += input_of(k, 8)[i] * 2.0f;
        y_sum += total + input_of(m, 8)[i];
      }
      EXPECT_FLOAT_EQ(results[r][m], y_sum * 3.0f) << "replica " << r << " entry " << m;
    }
  }
}

TEST_P(Collectives, BadGroupsFailAsTheyAreTracedNamingTheGroups) {
  const auto errors = on_replicas<std::string>([&](int) {
    Tensor x = zeros({4});
    std::string all;
    for (const ReplicaGroups& groups : {ReplicaGroups{{0, n()}}, ReplicaGroups{{0, 0}},
                                        ReplicaGroups{{}}, ReplicaGroups{{0}, {}}}) {
      all += testing::error_message<ShapeError>(
          [&] { (void)all_reduce(ReduceType::kSum, x, 1.0, groups); });
      all += "\n";
    }
    if (n() >= 3) {
      all += testing::error_message<ShapeError>([&] {
        (void)all_reduce(ReduceType::kSum, x, 1.0, ReplicaGroups{{0, 1}});
      });
    }
    if (n() > 1) {
      all += testing::error_message<ShapeError>(
          [&] { (void)reduce_scatter(ReduceType::kSum, zeros({n() + 1}), 1.0, 0, n()); });
    }
    all += testing::error_message<ShapeError>([&] { (void)all_to_all(x, 0, 0, n() + 1); });
    all += testing::error_message<ShapeError>([&] {
      (void)collective_permute(x, {{0, 0}, {0, 0}});
    });
    all += testing::error_message<ShapeError>([&] { (void)all_reduce(ReduceType::kAnd, x); });
    return all;
  });
  for (const std::string& text : errors) {
    EXPECT_NE(
        text.find(fmt::format("all_reduce: replica groups [[0, {}]] name replica {}", n(), n())),
        std::string::npos)
        << text;
    EXPECT_NE(text.find("[[0, 0]] hold replica 0 twice"), std::string::npos) << text;
    EXPECT_NE(text.find("[[]] hold an empty group"), std::string::npos) << text;
    EXPECT_NE(text.find("[[0], []] differ in size"), std::string::npos) << text;
    if (n() >= 3) {
      EXPECT_NE(text.find("[[0, 1]] leave out replica 2"), std::string::npos) << text;
    }
    if (n() > 1) {
      EXPECT_NE(text.find("does not split into"), std::string::npos) << text;
    }
    EXPECT_NE(text.find(fmt::format("split_count {} differs from the group size {}", n() + 1, n())),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("pair (0, 0) repeats its source"), std::string::npos) << text;
    EXPECT_NE(text.find("reduce type and cannot combine f32[4]"), std::string::npos) << text;
    EXPECT_NE(text.find("collectives_test.cpp"), std::string::npos) << text;
  }
}

TEST_P(MultiDevice, ReplicasWhoseGraphsDifferAllFailNamingTheReplicaAndTheOp) {
  const auto errors = on_replicas<std::string>([&](int r) {
    Tensor x = tensor(input_of(r, 4), {4});
    if (r == n() - 1) x = neg(x);  // the last replica took another branch
    Tensor y = all_reduce(ReduceType::kSum, x);
    return testing::error_message<CollectiveError>([&] { mark_step(); });
  });
  for (int r = 0; r < n(); ++r) {
    const std::string& text = errors[r];
    EXPECT_NE(text.find(fmt::format("replica {{{}}} differs from replica 0", n() - 1)),
              std::string::npos)
        << "replica " << r << ": " << text;
    EXPECT_NE(text.find("replica 0 traced all_reduce f32[4]"), std::string::npos) << text;
    EXPECT_NE(text.find(fmt::format("replica {} traced neg f32[4] (at ", n() - 1)),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("collectives_test.cpp"), std::string::npos) << text;
  }
}

TEST_P(MultiDevice, AFailedReplicaCancelsTheOthersWaitingAtACollective) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "600");  // only cancellation can end the wait in time
  std::vector<std::string> errors(static_cast<std::size_t>(n()));
  try {
    spawn([&](int r) {
      Tensor x = tensor(input_of(r, 4), {4});
      // One step together, so the graph is known to agree; in the second, replica 1 fails
      // before its collective runs and the others' devices are left waiting at theirs.
      (void)all_reduce(ReduceType::kSum, x).to_vector<float>();
      if (r == 1) throw std::runtime_error("replica 1 gives up");
      errors[r] = testing::error_message<ReplicaCancelled>(
          [&] { (void)all_reduce(ReduceType::kSum, x).to_vector<float>(); });
    });
    ADD_FAILURE() << "spawn returned normally";
  } catch (const ReplicaError& e) {
    EXPECT_EQ(e.replica(), 1);
    EXPECT_NE(std::string(e.what()).find("replica 1 gives up"), std::string::npos) << e.what();
  }
  for (int r = 0; r < n(); ++r) {
    if (r == 1) continue;
    EXPECT_NE(errors[r].find("all_reduce"), std::string::npos)
        << "replica " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("replica 1 failed: replica 1 gives up"), std::string::npos)
        << "replica " << r << ": " << errors[r];
  }
}

TEST_P(MultiDevice, ACollectiveAReplicaNeverReachesTimesOutNamingIt) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "0.5");
  std::vector<std::string> errors(static_cast<std::size_t>(n()));
  EXPECT_THROW(spawn([&](int r) {
                 Tensor x = tensor(input_of(r, 4), {4});
                 (void)all_reduce(ReduceType::kSum, x).to_vector<float>();
                 // The last replica comes to the second all-reduce only after the others gave up.
                 if (r == n() - 1) std::this_thread::sleep_for(2s);
                 errors[r] = testing::error_message<CollectiveTimeout>(
                     [&] { (void)all_reduce(ReduceType::kSum, x).to_vector<float>(); });
                 if (!errors[r].empty()) throw CollectiveTimeout(errors[r]);
               }),
               ReplicaError);
  EXPECT_NE(errors[0].find("all_reduce 'f32[4] -> f32[4]' among replicas"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find(fmt::format("replica {{{}}} never arrived", n() - 1)), std::string::npos)
      << errors[0];
}

TEST_P(Collectives, OptimizerStepAveragesTheGradientsSoEveryReplicaStepsAlike) {
  constexpr double kLr = 0.25;
  const auto params = on_replicas<std::vector<float>>([&](int r) {
    Tensor w = tensor(std::vector<float>{1, 2, 3}, {3});
    w.requires_grad_();
    optim::SGD sgd({w}, {.lr = kLr});
    // d(sum(w * x_r)) / dw = x_r: each replica its own gradient.
    sum(w * tensor(input_of(r, 3), {3})).backward();
    optimizer_step(sgd, /*barrier=*/true);
    return w.to_vector<float>();
  });
  for (int i = 0; i < 3; ++i) {
    float sum = 0;
    for (int m = 0; m < n(); ++m) sum += input_of(m, 3)[i];
    const float average = n() == 1 ? sum : sum * static_cast<float>(1.0 / n());
    const float want = static_cast<float>(i + 1) - static_cast<float>(kLr) * average;
    for (int r = 0; r < n(); ++r) {
      EXPECT_FLOAT_EQ(params[r][i], want) << "replica " << r << " at " << i;
      EXPECT_EQ(params[r][i], params[0][i]) << "replica " << r << " differs from replica 0";
    }
  }
}

TEST_P(Collectives, BroadcastMasterParamGivesEveryReplicaTheMastersWeights) {
  const auto weights = on_replicas<std::vector<float>>([&](int r) {
    set_rng_state(static_cast<uint64_t>(100 + r));  // every replica initialises its own way
    nn::Linear layer(3, 2);
    broadcast_master_param(layer);
    mark_step();
    std::vector<float> all = layer.named_parameters()[0].second.to_vector<float>();
    for (float b : layer.named_parameters()[1].second.to_vector<float>()) all.push_back(b);
    return all;
  });
  set_rng_state(100);
  nn::Linear master(3, 2);
  std::vector<float> want = master.named_parameters()[0].second.to_vector<float>();
  for (float b : master.named_parameters()[1].second.to_vector<float>()) want.push_back(b);
  for (int r = 0; r < n(); ++r) EXPECT_EQ(weights[r], want) << "replica " << r;
}

// Bit for bit: the master's -0.0, NaN and infinities arrive as they are, and another replica's
// NaN reaches no one. Integer and bool tensors come too; with groups, each group's first member
// is its master.
// f16 and the small integers reduce in f32 and s32 and round or wrap once at the end; gathers
// move their bytes.
TEST_P(Collectives, StorageOnlyDtypesReduceInTheirWideDtypeAndGatherAsBytes) {
  constexpr int64_t kSize = 11;
  struct Seen {
    std::vector<Half> halves;
    std::vector<uint8_t> bytes;
    std::vector<int8_t> gathered;
  };
  const auto seen = on_replicas<Seen>([&](int r) {
    const Tensor h = tensor(input_of(r, kSize), {kSize}).to(kHalf);
    const Tensor u = (tensor(int_input_of(r, kSize), {kSize}) + 100).to(kUInt8);
    // Each replica's own values, as data (a scalar 0 would be a graph constant on one replica).
    const auto mine = static_cast<int8_t>(r - 2);
    const Tensor s = tensor(std::vector<int8_t>{mine, mine}, {2});
    const Tensor hs = all_reduce(ReduceType::kSum, h, 0.5);
    const Tensor us = all_reduce(ReduceType::kSum, u);
    const Tensor sg = all_gather(s, 0);
    EXPECT_EQ(hs.dtype(), kHalf);
    EXPECT_EQ(us.dtype(), kUInt8);
    EXPECT_EQ(sg.dtype(), kInt8);
    return Seen{hs.cpu().values<Half>(), us.cpu().values<uint8_t>(), sg.cpu().values<int8_t>()};
  });
  for (int64_t i = 0; i < kSize; ++i) {
    float f = 0;
    int32_t k = 0;
    for (int r = 0; r < n(); ++r) {
      f += input_of(r, kSize)[i];  // multiples of 0.5, exact in f16 and f32
      k += int_input_of(r, kSize)[i] + 100;
    }
    for (int r = 0; r < n(); ++r) {
      ASSERT_EQ(static_cast<float>(seen[r].halves[i]), static_cast<float>(Half(f * 0.5f)))
          << "replica " << r << " at " << i;
      ASSERT_EQ(seen[r].bytes[i], static_cast<uint8_t>(k)) << "replica " << r << " at " << i;
    }
  }
  for (int r = 0; r < n(); ++r) {
    for (int m = 0; m < n(); ++m) {
      EXPECT_EQ(seen[r].gathered[2 * m], m - 2);
      EXPECT_EQ(seen[r].gathered[2 * m + 1], m - 2);
    }
  }
}

TEST_P(Collectives, BroadcastFromMasterIsExactForEveryValueAndDtype) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Seen {
    std::vector<uint32_t> bits;
    std::vector<int32_t> ints;
    std::vector<uint8_t> flags;
  };
  const auto bits_of = [](const std::vector<float>& v) {
    std::vector<uint32_t> out;
    for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
    return out;
  };
  const auto mine = [&](int r) {
    return r == 0 ? std::vector<float>{-0.0f, nan, inf, -inf, 1.5f, 0.0f}
                  : std::vector<float>{nan, 2.0f, -1.0f, nan, -0.0f, static_cast<float>(r)};
  };
  const auto seen = on_replicas<Seen>([&](int r) {
    const Tensor f = tensor(mine(r), {6});
    const Tensor i = tensor(std::vector<int32_t>{r + 1, -r, 7}, {3});
    const Tensor b =
        gt(tensor(std::vector<float>{r == 0 ? 1.0f : 0.0f, r != 0 ? 1.0f : 0.0f}, {2}), 0.5);
    broadcast_from_master({f, i, b});
    mark_step();
    std::vector<uint8_t> flags;
    for (float v : cast(b, DType::kFloat32).to_vector<float>()) flags.push_back(v != 0);
    return Seen{bits_of(f.to_vector<float>()), i.to_vector<int32_t>(), flags};
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(seen[r].bits, bits_of(mine(0))) << "replica " << r;
    EXPECT_EQ(seen[r].ints, (std::vector<int32_t>{1, 0, 7})) << "replica " << r;
    EXPECT_EQ(seen[r].flags, (std::vector<uint8_t>{1, 0})) << "replica " << r;
  }
  if (n() < 4 || n() % 2 != 0) return;
  // Two groups, {0, 2, ...} and {1, 3, ...}: replica 1 is the second group's master.
  ReplicaGroups groups(2);
  for (int r = 0; r < n(); ++r) groups[static_cast<std::size_t>(r % 2)].push_back(r);
  const auto grouped = on_replicas<std::vector<uint32_t>>([&](int r) {
    const Tensor f = tensor(mine(r), {6});
    broadcast_from_master({f}, groups);
    mark_step();
    return bits_of(f.to_vector<float>());
  });
  for (int r = 0; r < n(); ++r) {
    EXPECT_EQ(grouped[r], bits_of(mine(r % 2))) << "replica " << r;
  }
}

}  // namespace
}  // namespace axle
