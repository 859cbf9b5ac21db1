// actors: the persistent compile cache behind initialize_cache — compiled programs on disk, one
// file per graph hash, so that a new process skips compiling the graphs an earlier one compiled.
// The CompilerActor consults it after a miss in memory. Files are never trusted: each is checked
// as it loads, and a bad one is reported once, ignored, and rewritten by the next compile.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "axle/backends/executable.h"

namespace axle {

/// The buffers a program binds and hands back, in order: what the host and device rely on when
/// they run it for a graph.
struct ProgramInterface {
  std::vector<BufferDesc> inputs;
  std::vector<BufferDesc> outputs;
  std::vector<uint8_t> donated_inputs;  ///< as StepGraph::donated
};

/// A directory of compiled programs. Safe to use from several threads and processes at once.
class PersistentCache {
 public:
  /// Files of the cache are `<16 hex digits of the graph hash>.axleprog`.
  static constexpr std::string_view kExtension = ".axleprog";

  /// Opens the cache in `directory`, creating it unless `readonly` (a readonly cache on a missing
  /// directory is empty). Throws std::runtime_error when `directory` is not a directory or cannot
  /// be created.
  [[nodiscard]] static std::unique_ptr<PersistentCache> open(const std::filesystem::path& directory,
                                                             bool readonly);

  /// The program stored for `hash`, or null when there is none or it fails a check: a damaged or
  /// foreign file, another axle version's, an unsafe program, or (with `expected`) one whose
  /// inputs and outputs are not those. A failing file is reported once per process as a warning
  /// naming it and what is wrong.
  [[nodiscard]] IntrusivePtr<Executable> load(uint64_t hash,
                                              const ProgramInterface* expected = nullptr) const;

  /// Stores `program` as the entry for `hash`; does nothing when readonly. The file appears whole
  /// or not at all, so concurrent writers and readers never see half of one. A failed write is a
  /// warning, never an exception.
  void store(uint64_t hash, const Executable& program) const;

  /// The bytes of the entry for `hash` holding `program`: what store() writes to its file.
  [[nodiscard]] static std::string encode_entry(uint64_t hash, const Executable& program);
  /// Checks and decodes the bytes of an entry file for `hash`, as load() does once it has read
  /// the file: the program, or null with `why` saying what is wrong. Never throws for damaged
  /// bytes.
  /// What an entry records as the axle version that wrote it: the project version and the
  /// kernel table's fingerprint (kernel_table_fingerprint). An entry with another is not read.
  [[nodiscard]] static const std::string& format_version();

  [[nodiscard]] static IntrusivePtr<Executable> decode_entry(std::string_view bytes, uint64_t hash,
                                                             const ProgramInterface* expected,
                                                             std::string& why);

  /// The file holding the entry for `hash`.
  [[nodiscard]] std::filesystem::path entry_path(uint64_t hash) const;
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  [[nodiscard]] bool readonly() const noexcept { return readonly_; }

 private:
  PersistentCache(std::filesystem::path directory, bool readonly)
      : directory_(std::move(directory)), readonly_(readonly) {}

  std::filesystem::path directory_;
  bool readonly_;
};

}  // namespace axle
