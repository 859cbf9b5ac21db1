// Tests backends/cpu/compute_pool.h: every part runs once, on the pool's threads, errors come
// back to the caller, ranges split deterministically, and the thread count is the one asked for
// or the machine's cores shared among the devices.
#include "axle/backends/cpu/compute_pool.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "axle/engine/cores.h"

namespace axle::cpu {
namespace {

TEST(ComputePool, RunsEveryPartExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ComputePool pool(threads);
    for (int64_t parts : {1, 2, 3, 7, 64, 1000}) {
      for (int round = 0; round < 20; ++round) {
        std::vector<std::atomic<int>> runs(static_cast<std::size_t>(parts));
        pool.run(parts, [&](int64_t i, int thread) {
          EXPECT_GE(thread, 0);
          EXPECT_LT(thread, threads);
          runs[static_cast<std::size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < parts; ++i) {
          ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1)
              << "part " << i << " of " << parts << " on " << threads << " threads";
        }
      }
    }
  }
}

TEST(ComputePool, SpreadsPartsOverItsThreads) {
  ComputePool pool(2);
  std::set<int> seen;
  for (int round = 0; round < 50 && seen.size() < 2; ++round) {
    std::vector<int> ran_on(4);
    // Parts long enough that the caller cannot finish them all before the worker wakes.
    pool.run(4, [&](int64_t i, int thread) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ran_on[static_cast<std::size_t>(i)] = thread;
    });
    seen.insert(ran_on.begin(), ran_on.end());
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1}));
}

// Each thread takes the parts of its own contiguous share in order before any other's, so
// consecutive kernels split alike find their data on the core that wrote it: in the order a
// thread ran its parts, no part of its own share comes after another share's.
TEST(ComputePool, EachThreadTakesItsOwnSharesPartsFirst) {
  for (int threads : {2, 3}) {
    ComputePool pool(threads);
    for (int64_t parts : {2, 3, 8, 13, 64}) {
      for (int round = 0; round < 20; ++round) {
        std::vector<std::vector<int64_t>> ran(static_cast<std::size_t>(threads));
        pool.run(parts, [&](int64_t i, int thread) {
          // Slow parts in some rounds, so every thread is running and shares are taken over.
          if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
          ran[static_cast<std::size_t>(thread)].push_back(i);
        });
        for (int t = 0; t < threads; ++t) {
          const int64_t begin = parts * t / threads, end = parts * (t + 1) / threads;
          const std::vector<int64_t>& order = ran[static_cast<std::size_t>(t)];
          const auto own = [&](int64_t i) { return i >= begin && i < end; };
          const auto first_other = std::ranges::find_if_not(order, own);
          EXPECT_TRUE(std::is_sorted(order.begin(), first_other));
          EXPECT_TRUE(std::none_of(first_other, order.end(), own))
              << "thread " << t << " of " << threads << ", " << parts << " parts, ran "
              << ::testing::PrintToString(order);
        }
      }
    }
  }
}

TEST(ComputePool, RethrowsAPartsExceptionAfterEveryPartHasRun) {
  ComputePool pool(3);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.run(16,
                        [&](int64_t i, int) {
                          if (i == 5) throw std::domain_error("part 5");
                          finished.fetch_add(1);
                        }),
               std::domain_error);
  EXPECT_EQ(finished.load(), 15);
  // The pool still works afterwards.
  std::atomic<int> after{0};
  pool.run(8, [&](int64_t, int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 8);
}

TEST(ComputePool, ScratchIsAlignedAndKeptBetweenCalls) {
  ComputePool pool(2);
  void* first = pool.scratch(1, 1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  EXPECT_EQ(pool.scratch(1, 500), first);
  EXPECT_NE(pool.scratch(0, 100), first);
}

TEST(SplitRange, CoversTheRangeInAlignedPiecesOfAtLeastTheGrain) {
  for (int64_t n : {0, 1, 5, 100, 1000, 1023, 4096}) {
    for (int64_t parts : {1, 2, 3, 8}) {
      for (int64_t grain : {1, 16, 300}) {
        for (int64_t align : {1, 8, 24}) {
          const Ranges r = split_range(n, parts, grain, align);
          ASSERT_LE(r.count, std::max<int64_t>(parts, 1));
          int64_t next = 0;
          for (int64_t i = 0; i < r.count; ++i) {
            ASSERT_EQ(r.begin(i), next);
            ASSERT_LT(r.begin(i), r.end(i));
            if (r.count > 1) {
              ASSERT_EQ(r.begin(i) % align, 0);
              if (r.end(i) < n) {
                ASSERT_GE(r.end(i) - r.begin(i), grain);
              }
            }
            next = r.end(i);
          }
          ASSERT_EQ(next, n) << "n " << n << ", parts " << parts << ", grain " << grain;
        }
      }
    }
  }
}

// A thread's share of consecutive parts is about as large as another's: the ranges' sizes differ
// by less than two alignments (a range of whole units more, the last clipped to n). Equal sizes
// rounded up would leave the last ranges short (784 columns in fours of 32: 224, 224, 224, 112).
TEST(SplitRange, AlignedRangesAreAsEvenAsTheAlignmentLetsThem) {
  for (int64_t n : {100, 512, 784, 1000, 4096, 4099}) {
    for (int64_t parts : {2, 3, 4, 8}) {
      for (int64_t align : {1, 14, 32}) {
        const Ranges r = split_range(n, parts, 1, align);
        int64_t smallest = n, largest = 0;
        for (int64_t i = 0; i < r.count; ++i) {
          smallest = std::min(smallest, r.end(i) - r.begin(i));
          largest = std::max(largest, r.end(i) - r.begin(i));
        }
        EXPECT_LT(largest - smallest, 2 * align)
            << "n " << n << ", parts " << parts << ", align " << align;
        EXPECT_LE(largest, r.size) << "n " << n << ", parts " << parts << ", align " << align;
      }
    }
  }
}

// The CPUs the calling thread may run on, counted without axle.
int affinity_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

TEST(IntraOpThreads, SharesTheUsableCoresAmongDevicesByDefault) {
  const int cores = affinity_count();
  EXPECT_EQ(usable_cores(), cores);
  EXPECT_EQ(intra_op_threads(1, 0), cores);
  EXPECT_EQ(intra_op_threads(cores * 2, 0), 1);
  // Pinned to one CPU (as `taskset -c 0` or a one-CPU cpuset would), a device gets one thread
  // however many CPUs the machine has.
  cpu_set_t all, first;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&first);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &first);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof first, &first), 0);
  EXPECT_EQ(usable_cores(), 1);
  EXPECT_EQ(intra_op_threads(1, 0), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
}

TEST(IntraOpThreads, ProcessesOfAJobOnOneHostShareTheCoresTheyAllSee) {
  const int cores = affinity_count();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores == online) {
    // Not bound (mpirun --bind-to none): every process sees every core, so each takes its share.
    EXPECT_EQ(process_share_of_cores(2), std::max(1, cores / 2));
    EXPECT_EQ(intra_op_threads(1, 0, 2), std::max(1, cores / 2));
    EXPECT_EQ(intra_op_threads(1, 0, cores * 4), 1);
    EXPECT_EQ(intra_op_threads(2, 0, 2), std::max(1, cores / 4));
  }
  EXPECT_EQ(process_share_of_cores(1), cores);
  EXPECT_EQ(intra_op_threads(1, 0, 1), cores);
  EXPECT_EQ(intra_op_threads(1, 3, 2), 3);  // a request is taken as it is
  // Bound to a subset of the CPUs (as mpirun --bind-to core binds): the process keeps its cores
  // whole. Two of three or more, so that a share would differ.
  cpu_set_t all, two;
  CPU_ZERO(&all);
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  if (cores != online || cores < 3) return;
  CPU_ZERO(&two);
  for (int cpu = 0, taken = 0; cpu < CPU_SETSIZE && taken < 2; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      CPU_SET(cpu, &two);
      ++taken;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof two, &two), 0);
  EXPECT_EQ(process_share_of_cores(2), 2);
  EXPECT_EQ(intra_op_threads(1, 0, 2), 2);
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
}

TEST(IntraOpThreads, ARequestedCountOverridesTheShare) {
  EXPECT_EQ(intra_op_threads(4, 3), 3);
  EXPECT_EQ(intra_op_threads(1, 7), 7);
  EXPECT_THROW((void)intra_op_threads(1, -1), std::invalid_argument);
}

}  // namespace
}  // namespace axle::cpu
