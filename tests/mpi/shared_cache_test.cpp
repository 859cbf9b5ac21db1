// The processes of a job share one persistent compile cache directory (under mpirun by CTest: 4
// processes of 1 device, oversubscribed). Each process compiles for itself what it does not find
// there yet, so several write the same entries at once: afterwards the directory holds one valid
// entry per program and no temporary file, and a restarted system in every process finds every
// program there instead of compiling it, with the same results.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "axle/actors/compiler/persistent_cache.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

// Programs of several shapes, the same in every process: one compiled program each.
std::vector<float> run_programs() {
  std::vector<float> out;
  for (int64_t n : {2, 3, 5, 8, 13}) {
    std::vector<float> values(static_cast<std::size_t>(n * n));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 7) - 3.0f;
    const Tensor x = tensor(values, {n, n});
    const Tensor y = sum(relu(matmul(x, x) * 0.5 - 1.0), {1});
    mark_step();
    const std::vector<float> got = y.to_vector<float>();
    out.insert(out.end(), got.begin(), got.end());
  }
  return out;
}

TEST(SharedPersistentCache, ProcessesWritingAtOnceLeaveValidEntriesThatAllThenHit) {
  ASSERT_GT(process_count(), 1) << "run this test under mpirun";
  const std::string dir = mesh_reduce(
      "directory",
      (fs::temp_directory_path() / fmt::format("axle_mpi_cache_{}", ::getpid())).string(),
      [](const std::vector<std::string>& all) { return all.front(); });
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{dir}});
  (void)rendezvous("start together");
  const std::vector<float> first = run_programs();
  // Each program compiled here, or found already written by another process.
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0) +
                counter_value("PersistentCacheHit").value_or(0),
            5);
  // A new system: the last one's stores into the directory are done.
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{dir}});
  (void)rendezvous("all written");

  std::size_t entries = 0;
  auto cache = PersistentCache::open(dir, /*readonly=*/true);
  for (const auto& entry : fs::directory_iterator(dir)) {
    ASSERT_EQ(entry.path().extension(), PersistentCache::kExtension)
        << "a temporary file was left behind: " << entry.path();
    const uint64_t hash = std::stoull(entry.path().stem().string(), nullptr, 16);
    EXPECT_TRUE(cache->load(hash)) << entry.path();
    ++entries;
  }
  EXPECT_EQ(entries, 5u);

  // The new system finds the programs in the directory.
  clear_all();
  EXPECT_EQ(run_programs(), first);
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0), 0);
  EXPECT_EQ(counter_value("PersistentCacheHit").value_or(0), 5);
  (void)rendezvous("all read");
  if (process_index() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace axle
