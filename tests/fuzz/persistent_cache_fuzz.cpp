// tests/fuzz: persistent compile cache entries (actors/compiler/persistent_cache.h) through
// PersistentCache::decode_entry, which load() calls on a file's bytes. A damaged entry must be
// refused with a reason, never crash or throw. The first byte of an input picks how the rest is
// used (tests/fuzz/persistent_cache_input.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "actors/compiler/persistent_cache.pb.h"
#include "axle/actors/compiler/persistent_cache.h"
#include "axle/engine/hash.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/persistent_cache_input.h"

namespace {

// The bytes of the entry file an input stands for.
std::string cache_entry_bytes(uint8_t mode, std::string_view rest) {
  if (!(mode & axle::fuzz::kWrapProgram)) return std::string(rest);
  // What PersistentCache::encode_entry writes, around these program bytes.
  axle::proto::CacheEntry entry;
  entry.set_magic("axle compiled program");
  entry.set_axle_version(axle::PersistentCache::format_version());
  entry.set_graph_hash(axle::fuzz::kSeedHash);
  entry.set_program(std::string(rest));
  entry.set_program_checksum(axle::hash_string(entry.program()));
  return entry.SerializeAsString();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string bytes = cache_entry_bytes(mode, rest);
  const axle::ProgramInterface expected = axle::fuzz::seed_interface();
  std::string why;
  const axle::IntrusivePtr<axle::Executable> program = axle::PersistentCache::decode_entry(
      bytes, axle::fuzz::kSeedHash, (mode & axle::fuzz::kWithInterface) ? &expected : nullptr, why);
  axle::fuzz::check(program ? why.empty() : !why.empty(), "a refusal says why, a success nothing");
  if (program) {
    axle::fuzz::check(axle::program_error(*program).empty(), "a loaded program is safe");
    // What a loaded program is used for: described in errors, encoded again.
    for (const axle::KernelCall& call : program->calls) (void)axle::describe_call(*program, call);
    std::string again_why;
    const axle::IntrusivePtr<axle::Executable> again = axle::PersistentCache::decode_entry(
        axle::PersistentCache::encode_entry(axle::fuzz::kSeedHash, *program), axle::fuzz::kSeedHash,
        nullptr, again_why);
    axle::fuzz::check(again != nullptr, "a loaded program stores and loads again");
  }
  return 0;
}
