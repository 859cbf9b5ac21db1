// graph/formats: a step directory's commit file, as JSON: {"step", "replicas", "files": {name:
// {"bytes", "crc32"}}}. The CRC-32 is zlib's, read in blocks of 1 MiB.
#include "axle/graph/formats/step_commit.h"

#include <fmt/format.h>
#include <zlib.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "axle/graph/formats/atomic_file.h"
#include "axle/graph/formats/error.h"

namespace axle {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using FileSummary = StepFileSummary;

FileSummary summarise(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FileError(file, "cannot be read");
  FileSummary summary;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<char> block(1 << 20);
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    const auto got = static_cast<uInt>(in.gcount());
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(block.data()), got);
    summary.bytes += got;
  }
  if (in.bad()) throw FileError(file, "read failed");
  summary.crc32 = static_cast<uint32_t>(crc);
  return summary;
}

}  // namespace

void write_step_commit(const fs::path& dir, int64_t step, int replicas,
                       const std::map<std::string, StepFileSummary>& known) {
  json files = json::object();
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.starts_with(".") || name == kStepCommitFile) continue;
    const auto given = known.find(name);
    const FileSummary summary = given != known.end() ? given->second : summarise(entry.path());
    files[name] = {{"bytes", summary.bytes}, {"crc32", summary.crc32}};
  }
  if (error) throw FileError(dir, fmt::format("cannot list the step's files: {}", error.message()));
  AtomicFileWriter out(dir / kStepCommitFile);
  out.write(json{{"step", step}, {"replicas", replicas}, {"files", std::move(files)}}.dump(1));
  out.commit();
}

// entry[key] as an integer in [0, max]. A number out of range (JSON reads 1e24 as a double) or
// of another kind is refused: converting it would be undefined.
uint64_t count_field(const json& entry, const char* key, uint64_t max, const fs::path& commit_file,
                     const std::string& name) {
  const json& value = entry.at(key);
  if (!value.is_number_unsigned() || value.get<uint64_t>() > max) {
    throw FileError(commit_file, fmt::format("lists \"{}\" with {} {}, not an integer from 0 to {}",
                                             name, key, value.dump(), max));
  }
  return value.get<uint64_t>();
}

void check_step_commit(const fs::path& dir) {
  const fs::path commit_file = dir / kStepCommitFile;
  std::ifstream in(commit_file, std::ios::binary);
  if (!in) throw FileError(commit_file, "missing: the step was not committed (a save cut short?)");
  json commit;
  try {
    commit = json::parse(in);
  } catch (const json::exception& e) {
    throw FileError(commit_file, fmt::format("not valid JSON: {}", e.what()));
  }
  try {
    for (const auto& [name, want] : commit.at("files").items()) {
      // A name is a file of the directory, never a path out of it.
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw FileError(commit_file, fmt::format("lists \"{}\", which is not a file name", name));
      }
      const fs::path file = dir / name;
      if (!fs::is_regular_file(file))
        throw FileError(file, "missing, though the commit file lists it");
      const FileSummary got = summarise(file);
      const uint64_t bytes =
          count_field(want, "bytes", std::numeric_limits<uint64_t>::max(), commit_file, name);
      const uint64_t crc32 =
          count_field(want, "crc32", std::numeric_limits<uint32_t>::max(), commit_file, name);
      if (got.bytes != bytes) {
        throw FileError(
            file, fmt::format("holds {} bytes where the commit file says {}", got.bytes, bytes));
      }
      if (got.crc32 != crc32) {
        throw FileError(file, "damaged: its CRC-32 differs from the commit file's");
      }
    }
  } catch (const json::exception& e) {
    throw FileError(commit_file, fmt::format("not a commit file: {}", e.what()));
  }
}

}  // namespace axle
