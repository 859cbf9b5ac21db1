// The persistent compile cache (actors/compiler/persistent_cache.h, initialize_cache): entries
// round-trip, a second process compiles nothing, damaged entries are reported once and rewritten,
// readonly caches never write, and concurrent writers leave one whole file.
#include "axle/actors/compiler/persistent_cache.h"
#include "axle/actors/host/lazy_system.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "axle/actors/compiler/lowering.h"
#include "axle/axle.h"
#include "axle/engine/log.h"
#include "axle/graph/step_graph.h"
#include "persistent_cache_program.h"

namespace axle {
namespace {

namespace fs = std::filesystem;

int64_t count(const char* name) { return counter_value(name).value_or(0); }

// A directory of this test's own under the system's temporary directory, removed afterwards.
class TempDir {
 public:
  explicit TempDir(std::string_view role) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = fmt::format("axle-persistent-cache-{}-{}-{}-{}", ::getpid(),
                                   test->test_suite_name(), test->name(), role);
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& file, std::string_view bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Every file of `dir` by name, with its contents.
std::map<std::string, std::string> listing(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] =
        entry.is_regular_file() ? read_bytes(entry.path()) : "(not a file)";
  }
  return files;
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == PersistentCache::kExtension) found.push_back(entry.path());
  }
  return found;
}

uint64_t hash_of(const fs::path& entry) { return std::stoull(entry.stem().string(), nullptr, 16); }

// Collects warnings and errors for the life of the object.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel level, std::string_view line) {
      if (level < LogLevel::kWarning) return;
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  [[nodiscard]] std::vector<std::string> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// A program that sets every field: slots of each dtype, 0-d and size-0 shapes among them, and
// calls with inputs, ints and reals (including values a text format would mangle).
IntrusivePtr<Executable> every_field_program() {
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2, 3}},
                    {DType::kInt64, Shape{}},
                    {DType::kBFloat16, Shape{0, 4}},
                    {DType::kBool, Shape{2, 3}},
                    {DType::kFloat64, Shape{1, 1, 1, 1, 1, 1, 1, 7}},
                    {DType::kInt32, Shape{3}},
                    {DType::kFloat32, Shape{2, 3}}};
  program->input_slots = {0, 1, 2};
  program->calls = {
      {Kernel::kGt, {0, 0}, 3, {}, {}},
      {Kernel::kIota, {}, 5, {}, {0.5, -2.25}},
      {Kernel::kWhere,
       {3, 0, 0},
       6,
       {7, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()},
       {1e300, -0.0, std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::denorm_min()}},
      {Kernel::kFill, {}, 4, {}, {3.5}},
  };
  program->output_slots = {6, 5, 3, 6};
  program->plan.release_begin = {0, 0, 0, 0, 1};
  program->plan.release_slots = {4};  // the fill's result, which nothing reads
  program->plan.in_place = {-1, -1, -1, -1};
  program->plan.peak_bytes = 123456789012ULL;
  program->donated_inputs = {0, 1, 0};
  program->graph_hash = 0xfedcba9876543210ULL;
  return program;
}

void expect_same_program(const Executable& a, const Executable& b) {
  EXPECT_EQ(a.slots, b.slots);
  EXPECT_EQ(a.plan.release_begin, b.plan.release_begin);
  EXPECT_EQ(a.plan.release_slots, b.plan.release_slots);
  EXPECT_EQ(a.plan.in_place, b.plan.in_place);
  EXPECT_EQ(a.plan.peak_bytes, b.plan.peak_bytes);
  EXPECT_EQ(a.input_slots, b.input_slots);
  EXPECT_EQ(a.output_slots, b.output_slots);
  EXPECT_EQ(a.donated_inputs, b.donated_inputs);
  EXPECT_EQ(a.graph_hash, b.graph_hash);
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].kernel, b.calls[i].kernel) << "call " << i;
    EXPECT_EQ(a.calls[i].inputs, b.calls[i].inputs) << "call " << i;
    EXPECT_EQ(a.calls[i].output, b.calls[i].output) << "call " << i;
    EXPECT_EQ(a.calls[i].ints, b.calls[i].ints) << "call " << i;
    ASSERT_EQ(a.calls[i].reals.size(), b.calls[i].reals.size()) << "call " << i;
    for (std::size_t j = 0; j < a.calls[i].reals.size(); ++j) {  // bit for bit: NaN, -0.0
      EXPECT_EQ(std::bit_cast<uint64_t>(a.calls[i].reals[j]),
                std::bit_cast<uint64_t>(b.calls[i].reals[j]))
          << "call " << i << " real " << j;
    }
  }
}

class PersistentCompileCache : public ::testing::Test {
 protected:
  void SetUp() override { clear_all(); }
  void TearDown() override {
    set_log_sink(nullptr);
    LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{}});
  }
  // A fresh system on `dir`, counters zeroed: the in-memory cache is empty, as in a new process.
  static void start(const fs::path& dir, bool readonly = false) {
    LazySystem::restart(
        LazySystemOptions{.persistent_cache = PersistentCacheSettings{dir.string(), readonly}});
    clear_all();
  }
  // The compiler writes after replying; a restart joins it, so its files are complete.
  static void finish() { LazySystem::restart(); }

  TempDir dir_{"cache"};
};

TEST_F(PersistentCompileCache, StoredProgramLoadsEqual) {
  auto cache = PersistentCache::open(dir_.path(), false);
  const IntrusivePtr<Executable> program = every_field_program();
  ASSERT_EQ(program_error(*program), "");
  cache->store(program->graph_hash, *program);
  IntrusivePtr<Executable> loaded = cache->load(program->graph_hash);
  ASSERT_TRUE(loaded);
  expect_same_program(*loaded, *program);
  EXPECT_EQ(cache->entry_path(program->graph_hash).filename(), "fedcba9876543210.axleprog");
  EXPECT_EQ(listing(dir_.path()).size(), 1u);
  EXPECT_FALSE(cache->load(1234));
}

TEST_F(PersistentCompileCache, FusedReductionRoundTripsAndPassesTheSafetyCheck) {
  // A chain ending in a sum over the last dim: one kFused call with a reduction.
  const Tensor x(make_intrusive<TensorImpl>(
      DType::kFloat32, make_intrusive<DeviceData>(Device{}, DType::kFloat32, Shape{8, 300})));
  const NodePtr root = sum(exp(x * 0.5) + 1.0, {1}).impl()->ir();
  const IntrusivePtr<Executable> program =
      compile_graph(build_step_graph(std::span<const NodePtr>(&root, 1)), PassSet());
  ASSERT_EQ(std::ranges::count_if(program->calls,
                                  [](const KernelCall& c) { return c.kernel == Kernel::kFused; }),
            1);
  auto cache = PersistentCache::open(dir_.path(), false);
  cache->store(program->graph_hash, *program);
  IntrusivePtr<Executable> loaded = cache->load(program->graph_hash);
  ASSERT_TRUE(loaded);
  expect_same_program(*loaded, *program);
  EXPECT_EQ(program_error(*loaded), "");
}

TEST_F(PersistentCompileCache, ProgramWithNothingInItRoundTrips) {
  auto cache = PersistentCache::open(dir_.path(), false);
  auto empty = make_intrusive<Executable>();
  cache->store(0, *empty);
  IntrusivePtr<Executable> loaded = cache->load(0);
  ASSERT_TRUE(loaded);
  expect_same_program(*loaded, *empty);
  EXPECT_EQ(cache->entry_path(0).filename(), "0000000000000000.axleprog");
}

// decode_entry is load() on bytes in memory: what store() writes decodes to the same program.
TEST(PersistentCacheEntry, EncodedBytesDecodeToTheSameProgram) {
  auto program = make_intrusive<Executable>();
  program->slots = {
      {DType::kFloat32, Shape{2}}, {DType::kFloat32, Shape{2}}, {DType::kFloat32, Shape{2}}};
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kAdd, {0, 1}, 2, {}, {}}};
  program->output_slots = {2};
  program->graph_hash = 42;
  std::string why = "stale";
  IntrusivePtr<Executable> loaded =
      PersistentCache::decode_entry(PersistentCache::encode_entry(42, *program), 42, nullptr, why);
  ASSERT_TRUE(loaded) << why;
  EXPECT_EQ(why, "");
  expect_same_program(*loaded, *program);
  EXPECT_FALSE(
      PersistentCache::decode_entry(PersistentCache::encode_entry(42, *program), 43, nullptr, why));
  EXPECT_NE(why.find("not 000000000000002b"), std::string::npos) << why;
}

// Found by fuzzing: a memory plan whose release list of one call ends past the list of slots
// (the list's last bound still matching it) was read out of bounds by the program check.
TEST(PersistentCacheEntry, APlanReleasingPastItsListIsRefused) {
  auto program = make_intrusive<Executable>();
  program->slots = {{DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}},
                    {DType::kFloat32, Shape{2}}};
  program->input_slots = {0, 1};
  program->calls = {{Kernel::kAdd, {0, 1}, 2, {}, {}}, {Kernel::kMul, {2, 2}, 3, {}, {}}};
  program->output_slots = {3};
  program->plan.release_begin = {0, 8, 0};
  program->plan.in_place = {-1, 2};
  program->graph_hash = 7;
  std::string why;
  EXPECT_FALSE(
      PersistentCache::decode_entry(PersistentCache::encode_entry(7, *program), 7, nullptr, why));
  EXPECT_NE(why.find("release lists do not cover its slots"), std::string::npos) << why;
}

// Runs the second process with `args`; returns its "name value..." lines.
std::map<std::string, std::vector<double>> run_worker(const std::string& command_prefix,
                                                      const std::string& args,
                                                      const fs::path& output) {
  const std::string command = fmt::format("{} '{}' {} > '{}'", command_prefix,
                                          AXLE_PERSISTENT_CACHE_WORKER, args, output.string());
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::map<std::string, std::vector<double>> lines;
  std::istringstream in(read_bytes(output));
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    for (double v; fields >> v;) lines[name].push_back(v);
  }
  return lines;
}

std::vector<double> as_doubles(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

TEST_F(PersistentCompileCache, SecondProcessCompilesNothing) {
  TempDir scratch("out");
  fs::create_directories(scratch.path());
  const std::string dir = fmt::format("'{}'", dir_.path().string());
  auto first = run_worker("", dir, scratch.path() / "first");
  EXPECT_EQ(first["activations"], as_doubles(small_program::kExpected.activations));
  EXPECT_EQ(first["row_sums"], as_doubles(small_program::kExpected.row_sums));
  EXPECT_EQ(first["UncachedCompile"], std::vector<double>{1});
  EXPECT_EQ(first["PersistentCacheMiss"], std::vector<double>{1});
  EXPECT_EQ(first["PersistentCacheHit"], std::vector<double>{0});
  ASSERT_EQ(entries(dir_.path()).size(), 1u);

  auto second = run_worker("", dir, scratch.path() / "second");
  EXPECT_EQ(second["activations"], as_doubles(small_program::kExpected.activations));
  EXPECT_EQ(second["row_sums"], as_doubles(small_program::kExpected.row_sums));
  EXPECT_EQ(second["UncachedCompile"], std::vector<double>{0});
  EXPECT_EQ(second["PersistentCacheHit"], std::vector<double>{1});
  EXPECT_EQ(second["PersistentCacheMiss"], std::vector<double>{0});
}

TEST_F(PersistentCompileCache, EnvironmentVariableOpensTheCache) {
  TempDir scratch("out");
  fs::create_directories(scratch.path());
  const std::string env = fmt::format("XLA_PERSISTENT_CACHE_PATH='{}'", dir_.path().string());
  auto first = run_worker(env, "", scratch.path() / "first");
  EXPECT_EQ(first["UncachedCompile"], std::vector<double>{1});
  ASSERT_TRUE(fs::is_directory(dir_.path()));
  EXPECT_EQ(entries(dir_.path()).size(), 1u);
  auto second = run_worker(env, "", scratch.path() / "second");
  EXPECT_EQ(second["UncachedCompile"], std::vector<double>{0});
  EXPECT_EQ(second["PersistentCacheHit"], std::vector<double>{1});
}

TEST_F(PersistentCompileCache, TwoProcessesWritingAtOnceLeaveOneValidFile) {
  TempDir scratch("out");
  fs::create_directories(scratch.path());
  const std::string worker = AXLE_PERSISTENT_CACHE_WORKER;
  const std::string command = fmt::format("'{0}' '{1}' > '{2}/a' & '{0}' '{1}' > '{2}/b' & wait",
                                          worker, dir_.path().string(), scratch.path().string());
  ASSERT_EQ(std::system(command.c_str()), 0);
  const auto files = listing(dir_.path());
  ASSERT_EQ(files.size(), 1u) << "temporary files left behind";
  auto cache = PersistentCache::open(dir_.path(), true);
  EXPECT_TRUE(cache->load(hash_of(dir_.path() / files.begin()->first)));
}

TEST_F(PersistentCompileCache, WarmCacheHitsWithoutCompilingAndRecordsLoadTime) {
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  EXPECT_EQ(count("UncachedCompile"), 1);
  finish();
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  EXPECT_EQ(count("UncachedCompile"), 0);
  EXPECT_EQ(count("PersistentCacheHit"), 1);
  EXPECT_FALSE(metric_data("CompileTime").has_value());
  ASSERT_TRUE(metric_data("PersistentCacheLoadTime").has_value());
  EXPECT_EQ(metric_data("PersistentCacheLoadTime")->total_samples, 1);
  // Found in memory from now on.
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  EXPECT_EQ(count("PersistentCacheHit"), 1);
}

// How one test damages a valid entry, and what the warning must say.
struct Damage {
  const char* name;
  void (*apply)(const fs::path& file, const PersistentCache& cache, uint64_t hash);
  const char* reason;  // empty: any reason
};

void PrintTo(const Damage& damage, std::ostream* out) { *out << damage.name; }

void flip_last_byte(const fs::path& file, const PersistentCache&, uint64_t) {
  std::string bytes = read_bytes(file);
  bytes.back() ^= 0x5a;  // the program bytes come last
  write_bytes(file, bytes);
}

// Rewrites the program (with a valid checksum) after `edit`.
template <class Edit>
void store_edited(const PersistentCache& cache, uint64_t hash, Edit edit) {
  IntrusivePtr<Executable> program = cache.load(hash);
  ASSERT_TRUE(program);
  edit(*program);
  cache.store(hash, *program);
}

// Offset of the 8 checksum bytes: after magic, version and hash, which come first.
std::size_t checksum_offset(const std::string& bytes) {
  const std::string& number = PersistentCache::format_version();
  const std::string version = std::string("\x12") + static_cast<char>(number.size()) +
                              std::string(number);  // field 2, length-delimited
  const std::size_t at = bytes.find(version);
  EXPECT_NE(at, std::string::npos);
  const std::size_t hash_tag = at + version.size();
  EXPECT_EQ(bytes[hash_tag], '\x19');      // field 3, fixed64
  EXPECT_EQ(bytes[hash_tag + 9], '\x21');  // field 4, fixed64
  return hash_tag + 10;
}

const Damage kDamages[] = {
    {"FlippedProgramByte", flip_last_byte, "checksum"},
    {"Truncated",
     [](const fs::path& file, const PersistentCache&, uint64_t) {
       std::string bytes = read_bytes(file);
       write_bytes(file, bytes.substr(0, bytes.size() / 2));
     },
     "does not parse"},
    {"Empty", [](const fs::path& file, const PersistentCache&, uint64_t) { write_bytes(file, ""); },
     "wrong magic"},
    {"Garbage",
     [](const fs::path& file, const PersistentCache&, uint64_t) {
       std::mt19937_64 random(42);
       std::string bytes(4096, '\0');
       for (char& c : bytes) c = static_cast<char>(random());
       write_bytes(file, bytes);
     },
     ""},
    {"ChecksumMismatch",
     [](const fs::path& file, const PersistentCache&, uint64_t) {
       std::string bytes = read_bytes(file);
       bytes[checksum_offset(bytes)] ^= 1;
       write_bytes(file, bytes);
     },
     "checksum"},
    {"OtherVersion",
     [](const fs::path& file, const PersistentCache&, uint64_t) {
       std::string bytes = read_bytes(file);
       const std::size_t at = bytes.find(AXLE_VERSION_STRING);
       ASSERT_NE(at, std::string::npos);
       bytes[at] = bytes[at] == '9' ? '8' : '9';  // same length: the entry still parses
       write_bytes(file, bytes);
     },
     "written by axle version"},
    {"WrongMagic",
     [](const fs::path& file, const PersistentCache&, uint64_t) {
       std::string bytes = read_bytes(file);
       const std::size_t at = bytes.find("axle compiled program");
       ASSERT_NE(at, std::string::npos);
       bytes[at] = 'A';
       write_bytes(file, bytes);
     },
     "wrong magic"},
    {"OtherGraphsEntry",
     [](const fs::path& file, const PersistentCache& cache, uint64_t hash) {
       IntrusivePtr<Executable> program = cache.load(hash);
       ASSERT_TRUE(program);
       cache.store(hash ^ 1, *program);
       fs::rename(cache.entry_path(hash ^ 1), file);
     },
     "holds graph"},
    {"OutputSlotOutOfRange",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) { p.output_slots[0] = 9999; });
     },
     "output slot 9999 is out of range"},
    {"UnknownKernel",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) { p.calls.back().kernel = Kernel::kCount; });
     },
     "unknown kernel"},
    {"UnknownDtype",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) { p.slots[0].dtype = static_cast<DType>(17); });
     },
     "unknown dtype"},
    {"NegativeDim",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) { p.slots[0].shape = Shape{2, -3}; });
     },
     "negative dim"},
    {"HugeShape",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) {
         p.slots[0].shape = Shape{1LL << 40, 1LL << 40};
       });
     },
     "too large"},
    {"ReadsASlotBeforeItIsWritten",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash,
                    [](Executable& p) { std::reverse(p.calls.begin(), p.calls.end()); });
     },
     "before anything writes it"},
    {"WritesItsOwnInput",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) {
         KernelCall& call = p.calls.back();
         ASSERT_FALSE(call.inputs.empty());
         call.output = call.inputs[0];
       });
     },
     "writes its own input"},
    {"OutputMissing",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) { p.output_slots.pop_back(); });
     },
     "output count is 1 where the graph's is 2"},
    {"OutputsSwapped",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash,
                    [](Executable& p) { std::swap(p.output_slots[0], p.output_slots[1]); });
     },
     "where the graph's is"},
    {"DonatesAnInputTheGraphKeeps",
     [](const fs::path&, const PersistentCache& cache, uint64_t hash) {
       store_edited(cache, hash, [](Executable& p) {
         ASSERT_FALSE(p.donated_inputs.empty());  // the graph donates x
         p.donated_inputs.assign(p.input_slots.size(), 1);
       });
     },
     "which the graph does not donate"},
};

class DamagedEntry : public PersistentCompileCache, public ::testing::WithParamInterface<Damage> {};

TEST_P(DamagedEntry, IsReportedOnceIgnoredAndRewritten) {
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  const std::vector<fs::path> files = entries(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  const fs::path& file = files[0];
  const uint64_t hash = hash_of(file);
  auto cache = PersistentCache::open(dir_.path(), false);
  ASSERT_TRUE(cache->load(hash));
  GetParam().apply(file, *cache, hash);
  const std::string damaged = read_bytes(file);

  LogCapture log;
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("PersistentCacheMiss"), 1);
  EXPECT_EQ(count("PersistentCacheHit"), 0);
  std::vector<std::string> warnings = log.lines();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(file.string()), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(GetParam().reason), std::string::npos) << warnings[0];

  // Rewritten whole, and nothing else left in the directory.
  EXPECT_NE(read_bytes(file), damaged);
  EXPECT_TRUE(cache->load(hash));
  EXPECT_EQ(listing(dir_.path()).size(), 1u);

  // Damaged the same way again: compiled again, but already reported in this process.
  GetParam().apply(file, *cache, hash);
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(log.lines().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(PersistentCompileCache, DamagedEntry, ::testing::ValuesIn(kDamages),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(PersistentCompileCache, ReadonlyNeverWrites) {
  fs::create_directories(dir_.path());
  start(dir_.path(), true);
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_EQ(count("PersistentCacheMiss"), 1);
  EXPECT_TRUE(listing(dir_.path()).empty());
}

TEST_F(PersistentCompileCache, ReadonlyOnAMissingDirectoryIsAnEmptyCache) {
  const fs::path missing = dir_.path() / "missing";
  start(missing, true);
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 1);
  EXPECT_FALSE(fs::exists(missing));
}

TEST_F(PersistentCompileCache, ReadonlyLoadsExistingEntries) {
  start(dir_.path());
  small_program::run();
  finish();
  const auto before = listing(dir_.path());
  ASSERT_EQ(before.size(), 1u);
  start(dir_.path(), true);
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 0);
  EXPECT_EQ(count("PersistentCacheHit"), 1);
  EXPECT_EQ(listing(dir_.path()), before);
}

TEST_F(PersistentCompileCache, ReadonlyReportsADamagedEntryOncePerProcess) {
  start(dir_.path());
  small_program::run();
  finish();
  const std::vector<fs::path> files = entries(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  flip_last_byte(files[0], *PersistentCache::open(dir_.path(), true), hash_of(files[0]));
  const auto before = listing(dir_.path());
  LogCapture log;
  for (int run = 0; run < 2; ++run) {
    start(dir_.path(), true);
    EXPECT_EQ(small_program::run(), small_program::kExpected);
    finish();
    EXPECT_EQ(count("UncachedCompile"), 1) << "run " << run;
    EXPECT_EQ(count("PersistentCacheMiss"), 1) << "run " << run;
  }
  EXPECT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(listing(dir_.path()), before);  // still damaged: readonly never rewrites
}

TEST_F(PersistentCompileCache, FailedStoreIsAWarning) {
  start(dir_.path());
  small_program::run();
  finish();
  const std::vector<fs::path> files = entries(dir_.path());
  ASSERT_EQ(files.size(), 1u);
  // A directory where the entry belongs: it cannot be read, and renaming over it fails.
  fs::remove(files[0]);
  fs::create_directory(files[0]);
  LogCapture log;
  start(dir_.path());
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(count("UncachedCompile"), 1);
  const std::vector<std::string> warnings = log.lines();
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("not a regular file"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("cannot store"), std::string::npos) << warnings[1];
  EXPECT_EQ(listing(dir_.path()).size(), 1u) << "temporary file left behind";
}

TEST_F(PersistentCompileCache, StoreIntoADirectoryThatCannotBeWrittenIsAWarning) {
  auto cache = PersistentCache::open(dir_.path(), false);
  fs::remove_all(dir_.path());  // gone after open: no temporary file can be created in it
  const IntrusivePtr<Executable> program = every_field_program();
  LogCapture log;
  EXPECT_NO_THROW(cache->store(program->graph_hash, *program));
  const std::vector<std::string> warnings = log.lines();
  ASSERT_EQ(warnings.size(), 1u);
  const std::string file = cache->entry_path(program->graph_hash).string();
  EXPECT_NE(warnings[0].find("cannot store " + file + ": cannot create the temporary file"),
            std::string::npos)
      << warnings[0];
  EXPECT_FALSE(fs::exists(dir_.path()));
}

TEST_F(PersistentCompileCache, ConcurrentWritersLeaveOneValidFile) {
  const IntrusivePtr<Executable> program = every_field_program();
  const uint64_t hash = program->graph_hash;
  LogCapture log;
  std::atomic<bool> stored{false};
  std::atomic<bool> writers_done{false};
  std::atomic<int> failed_loads{0};
  std::atomic<int> loads{0};
  // Each writer has a cache of its own, as separate processes would.
  auto write = [&] {
    auto cache = PersistentCache::open(dir_.path(), false);
    for (int i = 0; i < 200; ++i) {
      cache->store(hash, *program);
      stored = true;
    }
  };
  std::thread reader([&] {
    auto cache = PersistentCache::open(dir_.path(), true);
    while (!writers_done) {
      if (!stored) continue;
      ++loads;
      if (!cache->load(hash)) ++failed_loads;
    }
  });
  std::thread first(write);
  std::thread second(write);
  first.join();
  second.join();
  writers_done = true;
  reader.join();

  EXPECT_EQ(failed_loads, 0) << "of " << loads << " loads";
  const auto files = listing(dir_.path());
  ASSERT_EQ(files.size(), 1u) << "temporary files left behind";
  EXPECT_EQ(files.begin()->first, "fedcba9876543210.axleprog");
  IntrusivePtr<Executable> loaded = PersistentCache::open(dir_.path(), true)->load(hash);
  ASSERT_TRUE(loaded);
  expect_same_program(*loaded, *program);
  EXPECT_TRUE(log.lines().empty());
}

TEST_F(PersistentCompileCache, InitializeCacheTwiceWithAnotherPathThrows) {
  TempDir other("other");
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{}});
  initialize_cache(dir_.path().string());
  EXPECT_NO_THROW(initialize_cache(dir_.path().string()));
  EXPECT_NO_THROW(initialize_cache(dir_.path().string() + "/"));
  try {
    initialize_cache(other.path().string());
    ADD_FAILURE() << "a second directory was accepted";
  } catch (const std::logic_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fs::weakly_canonical(dir_.path()).string()), std::string::npos)
        << message;
    EXPECT_NE(message.find(other.path().string()), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(other.path()));
  EXPECT_THROW(initialize_cache(dir_.path().string(), true), std::logic_error);
  ASSERT_TRUE(LazySystem::persistent_cache());
  EXPECT_EQ(LazySystem::persistent_cache()->directory(), fs::weakly_canonical(dir_.path()));
}

TEST_F(PersistentCompileCache, InitializeCacheCreatesTheDirectory) {
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{}});
  const fs::path nested = dir_.path() / "a" / "b";
  initialize_cache(nested.string());
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_EQ(small_program::run(), small_program::kExpected);
  finish();
  EXPECT_EQ(entries(nested).size(), 1u);
}

TEST_F(PersistentCompileCache, InitializeCacheOnAFileThrows) {
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{}});
  fs::create_directories(dir_.path());
  write_bytes(dir_.path() / "file", "not a directory");
  EXPECT_THROW(initialize_cache((dir_.path() / "file").string()), std::runtime_error);
  EXPECT_FALSE(LazySystem::persistent_cache());
}

TEST_F(PersistentCompileCache, RestartKeepsTheCache) {
  LazySystem::restart(LazySystemOptions{.persistent_cache = PersistentCacheSettings{}});
  initialize_cache(dir_.path().string());
  LazySystem::restart();
  ASSERT_TRUE(LazySystem::persistent_cache());
  EXPECT_EQ(LazySystem::persistent_cache()->directory(), fs::weakly_canonical(dir_.path()));
  small_program::run();
  finish();
  EXPECT_EQ(entries(dir_.path()).size(), 1u);
}

}  // namespace
}  // namespace axle
