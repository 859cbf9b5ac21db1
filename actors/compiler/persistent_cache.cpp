// actors: the persistent compile cache. The only file that sees the protobuf messages
// (actors/compiler/persistent_cache.proto): encode() and decode() below are the one place an
// Executable becomes bytes and back.
#include "axle/actors/compiler/persistent_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "actors/compiler/persistent_cache.pb.h"
#include "axle/engine/hash.h"
#include "axle/engine/log.h"
#include "axle/graph/formats/atomic_file.h"
#include "axle/graph/formats/error.h"

#ifndef AXLE_VERSION_STRING
#error "AXLE_VERSION_STRING (the project version) is defined by actors/CMakeLists.txt"
#endif

namespace axle {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "axle compiled program";

// What encode() and decode() store, member for member. A member added to the real structs and
// not here changes their size and stops the build: store it, then add it here.
struct StoredBufferDesc {
  DType dtype;
  Shape shape;
};
struct StoredKernelCall {
  Kernel kernel;
  std::vector<int32_t> inputs;
  int32_t output;
  std::vector<int64_t> ints;
  std::vector<double> reals;
};
struct StoredMemoryPlan {
  std::vector<uint32_t> release_begin;
  std::vector<int32_t> release_slots;
  std::vector<int32_t> in_place;
  uint64_t peak_bytes;
};
struct StoredExecutable : RefCounted {
  std::vector<BufferDesc> slots;
  std::vector<int32_t> input_slots;
  std::vector<int32_t> output_slots;
  std::vector<KernelCall> calls;
  MemoryPlan plan;
  std::vector<uint8_t> donated_inputs;
  uint64_t graph_hash;
  Executable::Spmd spmd;  // never stored: SPMD programs stay in memory (compiler_actor.cpp)
};
static_assert(sizeof(BufferDesc) == sizeof(StoredBufferDesc), "store the new BufferDesc member");
static_assert(sizeof(KernelCall) == sizeof(StoredKernelCall), "store the new KernelCall member");
static_assert(sizeof(MemoryPlan) == sizeof(StoredMemoryPlan), "store the new MemoryPlan member");
static_assert(sizeof(Executable) == sizeof(StoredExecutable), "store the new Executable member");

std::optional<DType> dtype_named(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<Kernel> kernel_named(std::string_view name) {
  static const std::unordered_map<std::string_view, Kernel> kKernels = [] {
    std::unordered_map<std::string_view, Kernel> kernels;
    for (std::size_t i = 0; i < static_cast<std::size_t>(Kernel::kCount); ++i) {
      kernels.emplace(kernel_name(static_cast<Kernel>(i)), static_cast<Kernel>(i));
    }
    return kernels;
  }();
  auto it = kKernels.find(name);
  return it == kKernels.end() ? std::nullopt : std::optional<Kernel>(it->second);
}

// A name read from a file, fit for a log line whatever bytes it holds.
std::string printable(std::string_view name) { return fmt::format("{:?}", name.substr(0, 40)); }

void encode(const Executable& program, proto::Program& out) {
  for (const BufferDesc& slot : program.slots) {
    proto::BufferDesc& desc = *out.add_slots();
    desc.set_dtype(std::string(dtype_name(slot.dtype)));
    for (int64_t dim : slot.shape.dims()) desc.add_dims(dim);
  }
  out.mutable_input_slots()->Add(program.input_slots.begin(), program.input_slots.end());
  out.mutable_output_slots()->Add(program.output_slots.begin(), program.output_slots.end());
  for (const KernelCall& call : program.calls) {
    proto::KernelCall& encoded = *out.add_calls();
    encoded.set_kernel(std::string(kernel_name(call.kernel)));
    encoded.mutable_inputs()->Add(call.inputs.begin(), call.inputs.end());
    encoded.set_output(call.output);
    encoded.mutable_ints()->Add(call.ints.begin(), call.ints.end());
    encoded.mutable_reals()->Add(call.reals.begin(), call.reals.end());
  }
  out.set_graph_hash(program.graph_hash);
  proto::MemoryPlan& plan = *out.mutable_plan();
  plan.mutable_release_begin()->Add(program.plan.release_begin.begin(),
                                    program.plan.release_begin.end());
  plan.mutable_release_slots()->Add(program.plan.release_slots.begin(),
                                    program.plan.release_slots.end());
  plan.mutable_in_place()->Add(program.plan.in_place.begin(), program.plan.in_place.end());
  plan.set_peak_bytes(program.plan.peak_bytes);
  out.set_donated_inputs(std::string(program.donated_inputs.begin(), program.donated_inputs.end()));
}

// Fills `out` from `in`; returns what is wrong with it, or empty.
std::string decode(const proto::Program& in, Executable& out) {
  out.slots.reserve(in.slots_size());
  for (const proto::BufferDesc& desc : in.slots()) {
    const std::size_t slot = out.slots.size();
    std::optional<DType> dtype = dtype_named(desc.dtype());
    if (!dtype) return fmt::format("slot {}: unknown dtype {}", slot, printable(desc.dtype()));
    if (desc.dims_size() > Shape::kMaxRank) {
      return fmt::format("slot {}: rank {} is above {}", slot, desc.dims_size(), Shape::kMaxRank);
    }
    const std::span<const int64_t> dims(desc.dims().data(), desc.dims_size());
    out.slots.push_back({*dtype, Shape(dims)});
  }
  out.input_slots.assign(in.input_slots().begin(), in.input_slots().end());
  out.output_slots.assign(in.output_slots().begin(), in.output_slots().end());
  out.calls.reserve(in.calls_size());
  for (const proto::KernelCall& encoded : in.calls()) {
    std::optional<Kernel> kernel = kernel_named(encoded.kernel());
    if (!kernel) {
      return fmt::format("call {}: unknown kernel {}", out.calls.size(),
                         printable(encoded.kernel()));
    }
    KernelCall& call = out.calls.emplace_back();
    call.kernel = *kernel;
    call.inputs.assign(encoded.inputs().begin(), encoded.inputs().end());
    call.output = encoded.output();
    call.ints.assign(encoded.ints().begin(), encoded.ints().end());
    call.reals.assign(encoded.reals().begin(), encoded.reals().end());
  }
  out.graph_hash = in.graph_hash();
  out.plan.release_begin.assign(in.plan().release_begin().begin(), in.plan().release_begin().end());
  out.plan.release_slots.assign(in.plan().release_slots().begin(), in.plan().release_slots().end());
  out.plan.in_place.assign(in.plan().in_place().begin(), in.plan().in_place().end());
  out.plan.peak_bytes = in.plan().peak_bytes();
  out.donated_inputs.assign(in.donated_inputs().begin(), in.donated_inputs().end());
  return program_error(out);
}

}  // namespace

const std::string& PersistentCache::format_version() {
  static const std::string kVersion =
      fmt::format("{}+kernels.{:016x}", AXLE_VERSION_STRING, kernel_table_fingerprint());
  return kVersion;
}

namespace {

std::string encode_entry_bytes(uint64_t hash, const Executable& program) {
  proto::Program encoded;
  encode(program, encoded);
  proto::CacheEntry entry;
  entry.set_magic(std::string(kMagic));
  entry.set_axle_version(PersistentCache::format_version());
  entry.set_graph_hash(hash);
  if (!encoded.SerializeToString(entry.mutable_program())) {
    throw std::length_error("the program is too large to serialize");
  }
  entry.set_program_checksum(hash_string(entry.program()));
  std::string bytes;
  if (!entry.SerializeToString(&bytes)) throw std::length_error("the entry is too large");
  return bytes;
}

// Fills `out` from a file's bytes; returns what is wrong with them, or empty.
std::string decode_entry_bytes(std::string_view bytes, uint64_t hash, Executable& out) {
  proto::CacheEntry entry;
  if (!entry.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return "it does not parse (truncated or damaged)";
  }
  if (entry.magic() != kMagic) return "it is not an axle cache entry (wrong magic)";
  if (entry.axle_version() != PersistentCache::format_version()) {
    return fmt::format("it was written by axle version {}, this is {}",
                       printable(entry.axle_version()), PersistentCache::format_version());
  }
  if (entry.graph_hash() != hash) {
    return fmt::format("it holds graph {:016x}, not {:016x}", entry.graph_hash(), hash);
  }
  if (hash_string(entry.program()) != entry.program_checksum()) {
    return "its checksum does not match its program (damaged)";
  }
  proto::Program program;
  if (!program.ParseFromString(entry.program())) return "its program does not parse";
  if (program.graph_hash() != hash) {
    return fmt::format("its program is for graph {:016x}", program.graph_hash());
  }
  if (std::string why = decode(program, out); !why.empty()) {
    return "its program is invalid: " + why;
  }
  return {};
}

std::string interface_error(const Executable& program, const ProgramInterface& expected) {
  auto compare = [&](std::string_view what, const std::vector<int32_t>& slots,
                     const std::vector<BufferDesc>& want) -> std::string {
    if (slots.size() != want.size()) {
      return fmt::format("its {} count is {} where the graph's is {}", what, slots.size(),
                         want.size());
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const BufferDesc& have = program.slots[slots[i]];
      if (have != want[i]) {
        return fmt::format("its {} {} is {}{} where the graph's is {}{}", what, i,
                           dtype_name(have.dtype), have.shape.to_string(),
                           dtype_name(want[i].dtype), want[i].shape.to_string());
      }
    }
    return {};
  };
  std::string why = compare("input", program.input_slots, expected.inputs);
  if (why.empty()) why = compare("output", program.output_slots, expected.outputs);
  if (why.empty()) {
    // A program overwriting an input the graph still needs would corrupt it.
    for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
      const bool allowed = i < expected.donated_inputs.size() && expected.donated_inputs[i] != 0;
      if (program.donated(i) != allowed) {
        return fmt::format("it {} input {}, which the graph {}",
                           program.donated(i) ? "overwrites" : "keeps", i,
                           allowed ? "donates" : "does not donate");
      }
    }
  }
  return why;
}

std::string errno_message() { return std::error_code(errno, std::generic_category()).message(); }

enum class ReadOutcome { kRead, kMissing, kFailed };

ReadOutcome read_file(const fs::path& file, std::string& bytes, std::string& why) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadOutcome::kMissing;
    why = "it cannot be opened: " + errno_message();
    return ReadOutcome::kFailed;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    why = "it is not a regular file";
    return ReadOutcome::kFailed;
  }
  if (info.st_size > INT_MAX) {  // protobuf parses at most 2 GiB
    ::close(fd);
    why = fmt::format("it is too large to be an entry ({} bytes)", info.st_size);
    return ReadOutcome::kFailed;
  }
  bytes.resize(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = "it cannot be read: " + errno_message();
      ::close(fd);
      return ReadOutcome::kFailed;
    }
    if (n == 0) break;  // shrank since fstat: what was read is checked like any other bytes
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  ::close(fd);
  return ReadOutcome::kRead;
}

// Once per file per process: a readonly cache meets the same bad file after every restart.
void report_once(const fs::path& file, std::string_view why) {
  static std::mutex mutex;
  static std::unordered_set<std::string> reported;
  {
    std::lock_guard lock(mutex);
    if (!reported.insert(file.string()).second) return;
  }
  AXLE_LOG(WARNING, "persistent compile cache: ignoring {}: {}; the graph is compiled instead",
           file.string(), why);
}

}  // namespace

std::unique_ptr<PersistentCache> PersistentCache::open(const fs::path& directory, bool readonly) {
  if (directory.empty()) throw std::runtime_error("the persistent compile cache needs a directory");
  std::error_code error;
  fs::path absolute = fs::weakly_canonical(directory, error);
  if (error) {
    throw std::runtime_error(
        fmt::format("persistent compile cache {}: {}", directory.string(), error.message()));
  }
  const fs::file_status status = fs::status(absolute, error);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) {
      throw std::runtime_error(
          fmt::format("persistent compile cache {}: not a directory", absolute.string()));
    }
  } else if (!readonly) {
    fs::create_directories(absolute, error);
    if (error) {
      throw std::runtime_error(fmt::format("persistent compile cache {}: cannot create it: {}",
                                           absolute.string(), error.message()));
    }
  }
  return std::unique_ptr<PersistentCache>(new PersistentCache(std::move(absolute), readonly));
}

fs::path PersistentCache::entry_path(uint64_t hash) const {
  return directory_ / fmt::format("{:016x}{}", hash, kExtension);
}

IntrusivePtr<Executable> PersistentCache::load(uint64_t hash,
                                               const ProgramInterface* expected) const {
  const fs::path file = entry_path(hash);
  std::string bytes;
  std::string why;
  switch (read_file(file, bytes, why)) {
    case ReadOutcome::kMissing:
      return {};
    case ReadOutcome::kFailed:
      report_once(file, why);
      return {};
    case ReadOutcome::kRead:
      break;
  }
  IntrusivePtr<Executable> program = decode_entry(bytes, hash, expected, why);
  if (!program) report_once(file, why);
  return program;
}

std::string PersistentCache::encode_entry(uint64_t hash, const Executable& program) {
  return encode_entry_bytes(hash, program);
}

IntrusivePtr<Executable> PersistentCache::decode_entry(std::string_view bytes, uint64_t hash,
                                                       const ProgramInterface* expected,
                                                       std::string& why) {
  auto program = make_intrusive<Executable>();
  why.clear();
  try {
    why = decode_entry_bytes(bytes, hash, *program);
    if (why.empty() && expected) why = interface_error(*program, *expected);
  } catch (const std::exception& e) {  // e.g. out of memory for a program that claims huge sizes
    why = e.what();
  }
  if (!why.empty()) return {};
  return program;
}

void PersistentCache::store(uint64_t hash, const Executable& program) const {
  if (readonly_) return;
  const fs::path file = entry_path(hash);
  // Through the writer every file of axle goes through: readers and concurrent writers see one
  // whole entry or the previous state, and a stored entry survives a crash.
  std::string why;
  try {
    AtomicFileWriter out(file);
    out.write(encode_entry_bytes(hash, program));
    out.commit();
  } catch (const FileError& e) {
    why = e.reason();
  } catch (const std::exception& e) {  // e.g. a program too large to serialize
    why = e.what();
  }
  if (!why.empty()) {
    AXLE_LOG(WARNING, "persistent compile cache: cannot store {}: {}", file.string(), why);
  }
}

}  // namespace axle
