// A job of several processes, run under mpirun by CTest (tests/mpi/CMakeLists.txt: 2 processes of
// 2 devices each, oversubscribed; the same on two hosts made of network namespaces; and 3
// processes of 1 device): the runtime queries place every replica; rendezvous and
// mesh_reduce gather every replica's value in global ordinal order; every in-graph collective,
// with groups inside one process and across processes, gives each replica exactly what a plain
// fold over every replica's input in global ordinal order gives (the bits of replicas that are
// threads of one process); replicas whose graphs differ, a replica that fails and a replica that
// never comes end in errors naming the replica, in every process, never in a hang.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/io/checkpoint.h"
#include "axle/io/data_loader.h"
#include "axle/io/sampler.h"
#include "tests/actors/collective_fold.h"

namespace axle {
namespace {

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

class ScaleOut : public ::testing::Test {
 protected:
  void SetUp() override {
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
    local_ = LazySystem::get().device_count();
    world_ = local_ * process_count();
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }

  // Runs fn(ordinal) on this process's replicas; what each returned, by local ordinal.
  template <class T, class F>
  std::vector<T> on_replicas(F fn) {
    std::vector<T> results(static_cast<std::size_t>(local_));
    spawn([&](int ordinal) {
      results[static_cast<std::size_t>(xla_device().ordinal)] = fn(ordinal);
    });
    return results;
  }
  [[nodiscard]] int first_local() const { return process_index() * local_; }

  int local_ = 0;
  int world_ = 0;
};

// Replica r's input: values of many magnitudes, so that a sum's bits depend on its order.
std::vector<float> input_of(int replica, int64_t size) {
  std::vector<float> v(static_cast<std::size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const auto h = static_cast<uint32_t>((replica + 1) * 2654435761u + i * 40503u);
    v[static_cast<std::size_t>(i)] =
        std::ldexp(static_cast<float>(h % 1000) / 7.0f - 60.0f, static_cast<int>(h % 13) - 6);
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

TEST_F(ScaleOut, RuntimeQueriesPlaceEveryReplicaOfTheJob) {
  ASSERT_GT(env_int("OMPI_COMM_WORLD_SIZE"), 1) << "run this test under mpirun";
  EXPECT_EQ(process_count(), env_int("OMPI_COMM_WORLD_SIZE"));
  EXPECT_EQ(process_index(), env_int("OMPI_COMM_WORLD_RANK"));
  EXPECT_EQ(local_process_count(), env_int("OMPI_COMM_WORLD_LOCAL_SIZE"));
  // Hosts hold consecutive processes, as many each (AXLE_TEST_HOSTS: how many hosts the job has;
  // two_hosts.sh makes two of network namespaces).
  const int hosts = std::max(1, env_int("AXLE_TEST_HOSTS"));
  const int per_host = process_count() / hosts;
  const int local_process = process_index() % per_host;
  EXPECT_EQ(local_process_count(), per_host);
  EXPECT_EQ(host_index(), process_index() / per_host);
  EXPECT_EQ(addressable_device_count(), local_);
  EXPECT_EQ(local_device_count(), local_ * local_process_count());
  EXPECT_EQ(global_device_count(), world_);
  // Outside spawn, each process is one replica.
  EXPECT_EQ(world_size(), process_count());
  EXPECT_EQ(global_ordinal(), process_index());
  EXPECT_EQ(local_ordinal(), local_process);
  EXPECT_EQ(is_master_ordinal(/*local=*/false), process_index() == 0);
  EXPECT_EQ(is_master_ordinal(), local_process == 0);

  struct Seen {
    int given, world, global, local;
    bool master, local_master;
    Device device;
  };
  const auto seen = on_replicas<Seen>([](int ordinal) {
    return Seen{ordinal,
                world_size(),
                global_ordinal(),
                local_ordinal(),
                is_master_ordinal(false),
                is_master_ordinal(),
                xla_device()};
  });
  for (int i = 0; i < local_; ++i) {
    const Seen& s = seen[static_cast<std::size_t>(i)];
    EXPECT_EQ(s.given, first_local() + i);
    EXPECT_EQ(s.global, first_local() + i);
    EXPECT_EQ(s.world, world_);
    EXPECT_EQ(s.local, local_process * local_ + i);
    EXPECT_EQ(s.master, s.global == 0);
    EXPECT_EQ(s.local_master, s.local == 0);
    EXPECT_EQ(s.device, Device{i});
  }
}

TEST_F(ScaleOut, RendezvousAndMeshReduceGatherEveryReplicaInGlobalOrder) {
  const auto seen = on_replicas<std::vector<std::vector<std::byte>>>([](int ordinal) {
    const std::string mine = fmt::format("replica {}", ordinal);
    return rendezvous("hello", std::as_bytes(std::span(mine)));
  });
  for (const auto& payloads : seen) {
    ASSERT_EQ(payloads.size(), static_cast<std::size_t>(world_));
    for (int r = 0; r < world_; ++r) {
      const auto& p = payloads[static_cast<std::size_t>(r)];
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(p.data()), p.size()),
                fmt::format("replica {}", r));
    }
  }
  // A subset of replicas across processes: the first and the last.
  const auto pair = on_replicas<std::size_t>([&](int ordinal) -> std::size_t {
    if (ordinal != 0 && ordinal != world_ - 1) return 0;
    const std::byte mine[] = {static_cast<std::byte>(ordinal)};
    const auto all = rendezvous("ends", mine, {0, world_ - 1});
    EXPECT_EQ(all.at(1).at(0), static_cast<std::byte>(world_ - 1));
    return all.size();
  });
  if (process_index() == 0) {
    EXPECT_EQ(pair[0], 2u);
  }

  const auto sums = on_replicas<double>([](int ordinal) {
    return mesh_reduce("sum", 0.1 * ordinal, [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s;
    });
  });
  double expected = 0;
  for (int r = 0; r < world_; ++r) expected += 0.1 * r;
  for (double s : sums) EXPECT_EQ(s, expected);
  const auto joined = on_replicas<std::string>([](int ordinal) {
    return mesh_reduce("names", std::to_string(ordinal), [](const std::vector<std::string>& v) {
      std::string all;
      for (const std::string& s : v) all += s;
      return all;
    });
  });
  std::string all;
  for (int r = 0; r < world_; ++r) all += std::to_string(r);
  for (const std::string& s : joined) EXPECT_EQ(s, all);
  const auto pairs = on_replicas<std::pair<int64_t, int64_t>>([](int ordinal) {
    return mesh_reduce("pairs", std::pair<int64_t, int64_t>(ordinal, 1),
                       [](const std::vector<std::pair<int64_t, int64_t>>& v) {
                         std::pair<int64_t, int64_t> sum{0, 0};
                         for (const auto& [a, b] : v) sum = {sum.first + a, sum.second + b};
                         return sum;
                       });
  });
  for (const auto& p : pairs)
    EXPECT_EQ(p, (std::pair<int64_t, int64_t>(world_ * (world_ - 1) / 2, world_)));
  const auto vectors = on_replicas<std::vector<float>>([](int ordinal) {
    return mesh_reduce("vectors", std::vector<float>{1.0f * ordinal, 2.0f},
                       [](const std::vector<std::vector<float>>& v) { return v.back(); });
  });
  for (const auto& v : vectors) EXPECT_EQ(v, (std::vector<float>{1.0f * (world_ - 1), 2.0f}));
  // Values past the wire's by-reference size (4 KiB) cross processes whole, each replica's own.
  const auto large = on_replicas<std::vector<std::string>>([](int ordinal) {
    return mesh_reduce("large", std::string(100000, static_cast<char>('a' + ordinal)),
                       [](const std::vector<std::string>& v) { return v; });
  });
  for (const auto& v : large) {
    ASSERT_EQ(v.size(), static_cast<std::size_t>(world_));
    for (int r = 0; r < world_; ++r)
      EXPECT_EQ(v[r], std::string(100000, static_cast<char>('a' + r))) << "replica " << r;
  }
}

TEST_F(ScaleOut, AllReduceGivesTheBitsOfAFoldInGlobalOrdinalOrder) {
  // Small; past 256 KiB (replicas of one process share a result, and three or more processes
  // go by stretches); past 8 MiB (two processes go by stretches too).
  for (int64_t size : {int64_t{37}, int64_t{100'003}, int64_t{2'100'001}}) {
    for (ReduceType type :
         {ReduceType::kSum, ReduceType::kMul, ReduceType::kMin, ReduceType::kMax}) {
      const double scale = type == ReduceType::kSum ? 0.25 : 1.0;
      const auto floats = on_replicas<std::vector<float>>([&](int r) {
        return all_reduce(type, tensor(input_of(r, size), {size}), scale).to_vector<float>();
      });
      std::vector<float> expected = input_of(0, size);
      for (int r = 1; r < world_; ++r) {
        const std::vector<float> in = input_of(r, size);
        for (int64_t i = 0; i < size; ++i) expected[i] = fold(type, expected[i], in[i]);
      }
      for (float& e : expected) e *= static_cast<float>(scale);
      if (type == ReduceType::kSum) {
        // The inputs make order matter: a fold in reverse ordinal order has other bits.
        std::vector<float> reversed = input_of(world_ - 1, size);
        for (int r = world_ - 2; r >= 0; --r) {
          const std::vector<float> in = input_of(r, size);
          for (int64_t i = 0; i < size; ++i) reversed[i] += in[i];
        }
        int differ = 0;
        for (int64_t i = 0; i < size; ++i) differ += reversed[i] * 0.25f != expected[i];
        EXPECT_GT(differ, 0) << "inputs of " << size;
      }
      for (int i = 0; i < local_; ++i) {
        const auto& got = floats[static_cast<std::size_t>(i)];
        ASSERT_EQ(got.size(), expected.size());
        for (int64_t k = 0; k < size; ++k) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(expected[k]))
              << reduce_type_name(type) << " of " << size << " on replica " << first_local() + i
              << " at " << k << ": " << got[k] << " vs " << expected[k];
        }
      }
    }
  }
  for (ReduceType type : {ReduceType::kMin, ReduceType::kSum}) {
    constexpr int64_t kSize = 29;
    const auto ints = on_replicas<std::vector<int32_t>>([&](int r) {
      return all_reduce(type, tensor(int_input_of(r, kSize), {kSize})).to_vector<int32_t>();
    });
    std::vector<int32_t> expected = int_input_of(0, kSize);
    for (int r = 1; r < world_; ++r) {
      const std::vector<int32_t> in = int_input_of(r, kSize);
      for (int64_t i = 0; i < kSize; ++i) expected[i] = fold(type, expected[i], in[i]);
    }
    for (const auto& got : ints) EXPECT_EQ(got, expected) << reduce_type_name(type);
  }
  // Predicates: replica r's element i is true unless i == r (and), or only when i == r (or).
  const int64_t size = world_ + 1;
  for (ReduceType type : {ReduceType::kAnd, ReduceType::kOr}) {
    const auto got = on_replicas<std::vector<float>>([&](int r) {
      const Tensor index = arange(0, static_cast<double>(size));
      const Tensor me = tensor(std::vector<float>{static_cast<float>(r)}, {1});
      const Tensor mine = type == ReduceType::kAnd ? ne(index, me) : eq(index, me);
      return cast(all_reduce(type, mine), DType::kFloat32).to_vector<float>();
    });
    for (const auto& values : got) {
      for (int64_t i = 0; i < size; ++i) {
        const bool replica_i_exists = i < world_;
        EXPECT_EQ(values[i], type == ReduceType::kAnd ? !replica_i_exists : replica_i_exists)
            << reduce_type_name(type) << " at " << i;
      }
    }
  }
}

// Short steps run on the replicas' own threads (AXLE_RUN_ON_HOST_BELOW_US, here a bound no step
// reaches), which meet the other processes there: every step keeps the fold's bits.
TEST_F(ScaleOut, ShortStepsRunOnTheReplicasThreadsAcrossProcesses) {
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "1000000");
  LazySystem::restart();
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  constexpr int kSteps = 20;
  constexpr int64_t kSize = 300;
  const int64_t before = counter_value("StepsRunOnHost").value_or(0);
  const auto results = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    std::vector<std::vector<float>> each;
    for (int step = 0; step < kSteps; ++step) {
      Tensor y = all_reduce(ReduceType::kSum, tensor(input_of(r + step, kSize), {kSize}));
      mark_step();
      each.push_back(y.to_vector<float>());
    }
    return each;
  });
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> expected = input_of(step, kSize);
    for (int r = 1; r < world_; ++r) {
      const std::vector<float> in = input_of(r + step, kSize);
      for (int64_t i = 0; i < kSize; ++i) expected[i] += in[i];
    }
    for (int i = 0; i < local_; ++i) {
      const std::vector<float>& got = results[static_cast<std::size_t>(i)][step];
      for (int64_t k = 0; k < kSize; ++k) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(expected[k]))
            << "step " << step << " on replica " << first_local() + i << " at " << k;
      }
    }
  }
  EXPECT_GE(counter_value("StepsRunOnHost").value_or(0) - before, local_);
}

TEST_F(ScaleOut, GroupsInsideAndAcrossProcessesReduceAmongTheirMembers) {
  // Small, and large enough to go by stretches across processes.
  for (int64_t kSize : {int64_t{11}, int64_t{100'003}}) {
    ReplicaGroups inside;  // each process's replicas: {0,1}, {2,3} for 2 processes of 2
    ReplicaGroups across(static_cast<std::size_t>(local_));  // {0,2}, {1,3}: spanning processes
    for (int p = 0; p < process_count(); ++p) {
      inside.emplace_back();
      for (int i = 0; i < local_; ++i) inside.back().push_back(p * local_ + i);
    }
    for (int r = 0; r < world_; ++r) across[static_cast<std::size_t>(r % local_)].push_back(r);
    for (const ReplicaGroups& groups : {inside, across}) {
      const auto got = on_replicas<std::vector<float>>([&](int r) {
        return all_reduce(ReduceType::kSum, tensor(input_of(r, kSize), {kSize}), 1.0, groups)
            .to_vector<float>();
      });
      for (int i = 0; i < local_; ++i) {
        const int me = first_local() + i;
        const auto group = *std::ranges::find_if(
            groups, [&](const std::vector<int>& g) { return std::ranges::count(g, me) > 0; });
        std::vector<float> expected = input_of(group[0], kSize);
        for (std::size_t m = 1; m < group.size(); ++m) {
          const std::vector<float> in = input_of(group[m], kSize);
          for (int64_t k = 0; k < kSize; ++k) expected[k] += in[k];
        }
        EXPECT_EQ(got[static_cast<std::size_t>(i)], expected) << "replica " << me;
      }
    }
  }
}

// A step's small all_reduces of one kind are combined by the compiler into one meeting across
// the processes: each result still has the bits of its own fold in global ordinal order.
TEST_F(ScaleOut, CombinedAllReducesKeepEachResultsBitsAcrossProcesses) {
  ReplicaGroups across(static_cast<std::size_t>(local_));  // {0,2}, {1,3}: spanning processes
  for (int r = 0; r < world_; ++r) across[static_cast<std::size_t>(r % local_)].push_back(r);
  const std::vector<int64_t> sizes = {37, 1000, 5};
  const auto got = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    std::vector<Tensor> results;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const Tensor x = tensor(input_of(r + static_cast<int>(t), sizes[t]), {sizes[t]});
      results.push_back(all_reduce(ReduceType::kSum, x, 0.25));         // combined
      results.push_back(all_reduce(ReduceType::kMax, x));               // apart from the sums
      results.push_back(all_reduce(ReduceType::kSum, x, 1.0, across));  // and within groups
    }
    mark_step();  // one graph of them all
    std::vector<std::vector<float>> out;
    for (Tensor& t : results) out.push_back(t.to_vector<float>());
    return out;
  });
  for (int i = 0; i < local_; ++i) {
    const int me = first_local() + i;
    const std::vector<int>& group = across[static_cast<std::size_t>(me % local_)];
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const int64_t size = sizes[t];
      const int shift = static_cast<int>(t);
      std::vector<float> sum = input_of(shift, size);
      std::vector<float> max = sum;
      for (int r = 1; r < world_; ++r) {
        const std::vector<float> in = input_of(r + shift, size);
        for (int64_t k = 0; k < size; ++k) {
          sum[k] += in[k];
          max[k] = std::max(max[k], in[k]);
        }
      }
      for (float& v : sum) v *= 0.25f;
      std::vector<float> in_group = input_of(group[0] + shift, size);
      for (std::size_t m = 1; m < group.size(); ++m) {
        const std::vector<float> in = input_of(group[m] + shift, size);
        for (int64_t k = 0; k < size; ++k) in_group[k] += in[k];
      }
      const std::vector<float>* want[] = {&sum, &max, &in_group};
      for (std::size_t j = 0; j < 3; ++j) {
        const std::vector<float>& result = got[static_cast<std::size_t>(i)][3 * t + j];
        ASSERT_EQ(result.size(), want[j]->size());
        for (int64_t k = 0; k < size; ++k) {
          ASSERT_EQ(std::bit_cast<uint32_t>(result[k]), std::bit_cast<uint32_t>((*want[j])[k]))
              << "replica " << me << " tensor " << t << " result " << j << " at " << k;
        }
      }
    }
  }
}

TEST_F(ScaleOut, GatherScatterAllToAllAndPermuteMoveEveryReplicasBlocks) {
  const int64_t rows = world_;
  const auto results = on_replicas<std::vector<std::vector<float>>>([&](int r) {
    const Tensor mine = tensor(input_of(r, rows * 3), {rows, 3});
    std::vector<std::pair<int, int>> ring;
    for (int s = 0; s < world_; ++s) ring.emplace_back(s, (s + 1) % world_);
    return std::vector<std::vector<float>>{
        all_gather(mine, 0).to_vector<float>(),
        reduce_scatter(ReduceType::kSum, mine, 1.0, 0, world_).to_vector<float>(),
        all_to_all(mine, 0, 0, world_).to_vector<float>(),
        collective_permute(mine, ring).to_vector<float>()};
  });
  for (int i = 0; i < local_; ++i) {
    const int me = first_local() + i;
    const auto& got = results[static_cast<std::size_t>(i)];
    std::vector<float> gathered, scattered(3, 0.0f), exchanged;
    for (int r = 0; r < world_; ++r) {
      const std::vector<float> in = input_of(r, rows * 3);
      gathered.insert(gathered.end(), in.begin(), in.end());
      for (int c = 0; c < 3; ++c) {
        scattered[c] = r == 0 ? in[me * 3 + c] : scattered[c] + in[me * 3 + c];
      }
      exchanged.insert(exchanged.end(), in.begin() + me * 3, in.begin() + me * 3 + 3);
    }
    EXPECT_EQ(got[0], gathered) << "all_gather on replica " << me;
    EXPECT_EQ(got[1], scattered) << "reduce_scatter on replica " << me;
    EXPECT_EQ(got[2], exchanged) << "all_to_all on replica " << me;
    EXPECT_EQ(got[3], input_of((me + world_ - 1) % world_, rows * 3))
        << "collective_permute on replica " << me;
  }
}

// Sample i is {s64 i}; counts the reads of this process.
class CountingDataset final : public Dataset {
 public:
  explicit CountingDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    reads_.fetch_add(1);
    CpuTensor index{DType::kInt64, Shape{}, std::vector<std::byte>(8)};
    std::memcpy(index.bytes.data(), &i, 8);
    return {std::move(index)};
  }
  [[nodiscard]] int64_t reads() const { return reads_.load(); }

 private:
  int64_t n_;
  mutable std::atomic<int64_t> reads_{0};
};

TEST_F(ScaleOut, DistributedSamplersSplitTheDataByGlobalOrdinal) {
  constexpr int64_t kSamples = 101;
  auto dataset = std::make_shared<CountingDataset>(kSamples);
  const auto seen = on_replicas<std::vector<int64_t>>([&](int) {
    auto sampler =
        std::make_shared<DistributedSampler>(kSamples, DistributedSamplerOptions{.seed = 9});
    sampler->set_epoch(2);
    DataLoader loader(dataset, {.batch_size = 8, .sampler = sampler});
    std::vector<int64_t> mine;
    for (const Batch& batch : loader) {
      for (int64_t i : batch[0].values<int64_t>()) mine.push_back(i);
    }
    // Every replica of the job, in global ordinal order.
    return mesh_reduce("shares", mine, [](const std::vector<std::vector<int64_t>>& all) {
      std::vector<int64_t> joined;
      for (const auto& share : all) joined.insert(joined.end(), share.begin(), share.end());
      return joined;
    });
  });
  const int64_t per_replica = (kSamples + world_ - 1) / world_;
  // This process read its replicas' shares only.
  EXPECT_EQ(dataset->reads(), per_replica * local_);
  for (const auto& joined : seen) {
    ASSERT_EQ(static_cast<int64_t>(joined.size()), per_replica * world_);
    std::vector<int64_t> distinct = joined;
    std::ranges::sort(distinct);
    distinct.erase(std::ranges::unique(distinct).begin(), distinct.end());
    EXPECT_EQ(static_cast<int64_t>(distinct.size()), kSamples);  // the whole dataset
    EXPECT_EQ(joined, seen[0]);
    // Replica r's share is what a sampler of rank r computes anywhere.
    for (int r = 0; r < world_; ++r) {
      DistributedSampler theirs(kSamples, {.num_replicas = world_, .rank = r, .seed = 9});
      theirs.set_epoch(2);
      const std::vector<int64_t> expected = theirs.indices();
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), joined.begin() + r * per_replica))
          << "replica " << r;
    }
  }
}

TEST_F(ScaleOut, CheckpointsAreWrittenOnceOrPerGlobalOrdinalAndLoadAnywhere) {
  // One directory for the job, named by process 0.
  const std::string dir = mesh_reduce(
      "directory",
      (std::filesystem::temp_directory_path() / fmt::format("axle_mpi_ckpt_{}", ::getpid()))
          .string(),
      [](const std::vector<std::string>& all) { return all.front(); });
  if (process_index() == 0) std::filesystem::create_directories(dir);
  (void)rendezvous("directory made");
  const std::string shared = dir + "/model.ckpt";
  const auto loaded = on_replicas<std::vector<float>>([&](int ordinal) {
    const nn::StateDict mine = {{"w", tensor(input_of(ordinal, 6), {2, 3})}};
    // The global master writes (master_only alone: the master of each host, as torch_xla's);
    // every replica returns once the file is there.
    save(mine, shared, /*master_only=*/true, /*global_master=*/true);
    save(mine, fmt::format("{}/replica_{}.ckpt", dir, ordinal), /*master_only=*/false);
    (void)rendezvous("saved");
    // Every replica reads the master's checkpoint, and its neighbour's by global ordinal.
    std::vector<float> values = load(shared).at(0).second.to_vector<float>();
    const int neighbour = (ordinal + 1) % world_size();
    const std::vector<float> theirs =
        load(fmt::format("{}/replica_{}.ckpt", dir, neighbour)).at(0).second.to_vector<float>();
    values.insert(values.end(), theirs.begin(), theirs.end());
    return values;
  });
  for (int i = 0; i < local_; ++i) {
    const int me = first_local() + i;
    std::vector<float> expected = input_of(0, 6);
    const std::vector<float> neighbour = input_of((me + 1) % world_, 6);
    expected.insert(expected.end(), neighbour.begin(), neighbour.end());
    EXPECT_EQ(loaded[static_cast<std::size_t>(i)], expected) << "replica " << me;
  }
  // Outside spawn the job has another shape (one replica per process): the checkpoint loads the
  // same.
  EXPECT_EQ(load(shared).at(0).second.to_vector<float>(), input_of(0, 6));
  (void)rendezvous("read");
  if (process_index() == 0) std::filesystem::remove_all(dir);
}

TEST_F(ScaleOut, BroadcastMasterParamGivesEveryProcessTheMastersParameters) {
  const auto params = on_replicas<std::vector<float>>([](int ordinal) {
    set_rng_state(100 + static_cast<uint64_t>(ordinal));  // every replica initialises apart
    nn::Linear layer(3, 2);
    broadcast_master_param(layer);
    mark_step();
    std::vector<float> all;
    for (const auto& [name, t] : layer.state_dict()) {
      const std::vector<float> values = t.to_vector<float>();
      all.insert(all.end(), values.begin(), values.end());
    }
    return all;
  });
  // The master's parameters, as process 0's first replica holds them.
  const std::vector<float> master =
      mesh_reduce("master", process_index() == 0 ? params[0] : std::vector<float>{},
                  [](const std::vector<std::vector<float>>& all) { return all.front(); });
  ASSERT_FALSE(master.empty());
  for (const auto& p : params) EXPECT_EQ(p, master);
}

TEST_F(ScaleOut, OutsideSpawnEachProcessIsOneReplica) {
  const std::vector<float> got =
      all_reduce(ReduceType::kSum, tensor(input_of(process_index(), 5), {5})).to_vector<float>();
  std::vector<float> expected = input_of(0, 5);
  for (int p = 1; p < process_count(); ++p) {
    const std::vector<float> in = input_of(p, 5);
    for (int k = 0; k < 5; ++k) expected[k] += in[k];
  }
  EXPECT_EQ(got, expected);
  const double sum = mesh_reduce(
      "processes", 1.0, [](const std::vector<double>& v) { return static_cast<double>(v.size()); });
  EXPECT_EQ(sum, process_count());
}

TEST_F(ScaleOut, ReplicasThatTraceDifferentGraphsFailInEveryProcess) {
  const int odd_one = world_ - 1;
  try {
    spawn([&](int ordinal) {
      Tensor x = tensor(input_of(ordinal, 4), {4});
      if (ordinal == odd_one) x = x * 2.0;
      (void)all_reduce(ReduceType::kSum, x).to_vector<float>();
    });
    FAIL() << "spawn returned";
  } catch (const ReplicaError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("replica{} {{{}}} differ", "", odd_one)),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ScaleOut, AFailingReplicaCancelsTheOthersInEveryProcess) {
  const int failing = world_ - 1;
  try {
    spawn([&](int ordinal) {
      if (ordinal == failing) throw std::runtime_error("replica gave up");
      (void)rendezvous("never complete");
    });
    FAIL() << "spawn returned";
  } catch (const ReplicaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("replica gave up"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("replica {}", failing)), std::string::npos) << what;
  }
}

TEST_F(ScaleOut, AReplicaThatNeverComesIsNamedInEveryProcess) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "3");
  const int absent = world_ - 2;  // a replica of the last process, or of the one before
  // Only a process whose every replica is the absent one has nobody waiting.
  const bool alone = local_ == 1 && process_index() == absent;
  try {
    spawn([&](int ordinal) {
      if (ordinal == absent) return;
      (void)rendezvous("incomplete");
    });
    EXPECT_TRUE(alone) << "spawn returned";
  } catch (const ReplicaError& e) {
    const std::string what = e.what();
    EXPECT_FALSE(alone) << what;
    const bool named = what.find(fmt::format("replica {} ", absent)) != std::string::npos ||
                       what.find(fmt::format("replica {{{}}}", absent)) != std::string::npos ||
                       what.find(fmt::format("replicas {{{},", absent)) != std::string::npos;
    EXPECT_TRUE(named) << what;
  }
  config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // the others take 3 s to give up
  (void)rendezvous("every process past it");
}

}  // namespace
}  // namespace axle
