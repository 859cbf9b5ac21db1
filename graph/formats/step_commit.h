// graph/formats: the commit file of a checkpoint step's directory (io/checkpoint_manager.h). A
// step is written in a directory of its own; its commit file, written last, lists every other
// file with its size and CRC-32, so a reader can tell a whole step from a torn or damaged one
// before it reads any of it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace axle {

/// The commit file's name in a step's directory.
inline constexpr const char* kStepCommitFile = "commit.json";

/// A file's size and CRC-32 (zlib's), as the commit file lists it.
struct StepFileSummary {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// Writes the commit file of the step directory `dir` (atomically): step `step`, the number of
/// `replicas` that wrote it, and every regular file in `dir` but hidden ones, by name, with its
/// size and CRC-32. A file named in `known` (whose writer summed it as it wrote it, e.g.
/// CheckpointWriter::summary) is taken as given, not read back. Throws FileError naming a file
/// it cannot read or write.
void write_step_commit(const std::filesystem::path& dir, int64_t step, int replicas,
                       const std::map<std::string, StepFileSummary>& known = {});

/// Checks the step directory `dir` against its commit file: every file it lists is there, of
/// its size and CRC-32. Throws FileError naming what is at fault: the commit file when it is
/// missing (a step never committed) or not a commit file, else the first file that differs.
void check_step_commit(const std::filesystem::path& dir);

}  // namespace axle
