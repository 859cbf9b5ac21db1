// io: CheckpointManager's writer (io/checkpoint_writer.h).
#include "axle/io/checkpoint_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>

#include "axle/graph/formats/checkpoint_codec.h"
#include "axle/graph/formats/error.h"
#include "axle/io/checkpoint_step.h"

namespace axle::checkpoint_step {
namespace {

namespace fs = std::filesystem;

// A step's directory name is its number and nothing else.
std::optional<int64_t> step_of(const std::string& name) {
  int64_t step = 0;
  const char* end = name.data() + name.size();
  const auto [at, error] = std::from_chars(name.data(), end, step);
  if (name.empty() || error != std::errc() || at != end || step < 0) return std::nullopt;
  return step;
}

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort, as the atomic file writer's
  ::fsync(fd);
  ::close(fd);
}

// The note a process leaves in a step's partial directory once its part is written (hidden, so
// that the commit file does not list it).
std::string part_note(int process) { return fmt::format(".part.{}.json", process); }

// Under SPMD, this process's part of `saved` written and finished (finish_part). The first
// process cleared the partial directory before the processes met to save, so none is cleared
// here. On failure, with other processes' parts beside it, the directory is left as it is: it is
// hidden, never a step, and cleared when that step is saved again.
void write_part(const StepDirectory& where, HostStep& saved) {
  const fs::path& partial = saved.partial;
  try {
    on_disk(partial, "create", [&](std::error_code& e) { fs::create_directories(partial, e); });
    std::map<std::string, StepFileSummary> written = write_tiles(partial, saved.tiles);
    if (saved.process == 0) {
      write_text(partial / kStateFile, saved.host_state);
      for (std::size_t ordinal = 0; ordinal < saved.streams.size(); ++ordinal) {
        write_text(partial / streams_file(static_cast<int>(ordinal)), saved.streams[ordinal]);
      }
    }
    finish_part(where, saved.step, partial, saved.process, saved.processes, written);
  } catch (...) {
    std::error_code ignored;
    if (saved.processes == 1) fs::remove_all(partial, ignored);
    throw;
  }
}

// Writes `saved` into its partial directory and commits it; on failure the partial directory is
// removed and the failure thrown.
void write_and_commit(const StepDirectory& where, HostStep& saved) {
  if (saved.as_tiles) {
    write_part(where, saved);
    return;
  }
  const fs::path& partial = saved.partial;
  try {
    on_disk(partial, "clear", [&](std::error_code& e) { fs::remove_all(partial, e); });
    on_disk(partial, "create", [&](std::error_code& e) { fs::create_directories(partial, e); });
    std::map<std::string, StepFileSummary> known;
    known[kTensorsFile] = write_host_tensors(partial / kTensorsFile, saved.values);
    write_text(partial / kStateFile, saved.host_state);
    for (std::size_t ordinal = 0; ordinal < saved.streams.size(); ++ordinal) {
      write_text(partial / streams_file(static_cast<int>(ordinal)), saved.streams[ordinal]);
    }
    for (std::size_t ordinal = 0; ordinal < saved.per_replica.size(); ++ordinal) {
      const std::string file = per_replica_file(static_cast<int>(ordinal));
      known[file] = write_host_tensors(partial / file, saved.per_replica[ordinal]);
    }
    commit_step(where, saved.step, partial, static_cast<int>(saved.streams.size()), known);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    throw;
  }
}

}  // namespace

void on_disk(const fs::path& path, std::string_view what,
             const std::function<void(std::error_code&)>& action) {
  std::error_code error;
  action(error);
  if (error) throw FileError(path, fmt::format("cannot {}: {}", what, error.message()));
}

StepFileSummary write_host_tensors(const fs::path& file, HostValues& values) {
  CheckpointWriter out(file, values.size());
  for (auto& [name, value] : values) {
    out.add(name, value);
    value = {};
  }
  out.commit();
  return {.bytes = out.bytes_written(), .crc32 = out.file_crc32()};
}

std::map<std::string, StepFileSummary> write_tiles(const fs::path& partial,
                                                   std::vector<DeviceTiles>& tiles) {
  std::map<std::string, StepFileSummary> written;
  for (DeviceTiles& device : tiles) {
    const std::string file = tiles_file(device.device);
    written[file] = write_host_tensors(partial / file, device.values);
  }
  return written;
}

void finish_part(const StepDirectory& where, int64_t step, const fs::path& partial, int process,
                 int processes, const std::map<std::string, StepFileSummary>& written) {
  nlohmann::json note = nlohmann::json::object();
  for (const auto& [file, summary] : written) {
    note[file] = {{"bytes", summary.bytes}, {"crc32", summary.crc32}};
  }
  write_text(partial / part_note(process), note.dump());
  // The note is written before the others are looked for, so the process whose note is the last
  // sees every one; two that finish together may both see them, and the claim picks one.
  for (int p = 0; p < processes; ++p) {
    if (!fs::exists(partial / part_note(p))) return;  // the one still writing commits
  }
  const fs::path claim = partial / ".commit.claim";
  const int fd = ::open(claim.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    // Claimed by another process, or already committed by it (the directory renamed away).
    if (errno == EEXIST || errno == ENOENT) return;
    throw FileError(claim, fmt::format("cannot create: {}", std::strerror(errno)));
  }
  ::close(fd);
  std::map<std::string, StepFileSummary> known;
  for (int p = 0; p < processes; ++p) {
    const fs::path file = partial / part_note(p);
    const nlohmann::json other = read_json(file);
    try {
      for (const auto& [name, summary] : other.items()) {
        known[name] = {.bytes = summary.at("bytes").get<uint64_t>(),
                       .crc32 = summary.at("crc32").get<uint32_t>()};
      }
    } catch (const nlohmann::json::exception& e) {
      throw FileError(file, fmt::format("not a part's note: {}", e.what()));
    }
  }
  commit_step(where, step, partial, processes, known);
}

std::vector<int64_t> committed_steps(const fs::path& path) {
  std::vector<int64_t> steps;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
    const std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory() && fs::exists(entry.path() / kStepCommitFile)) {
      steps.push_back(*step);
    }
  }
  if (error) throw FileError(path, fmt::format("cannot list the steps: {}", error.message()));
  std::ranges::sort(steps);
  return steps;
}

void commit_step(const StepDirectory& where, int64_t step, const fs::path& partial, int replicas,
                 const std::map<std::string, StepFileSummary>& known) {
  write_step_commit(partial, step, replicas, known);
  sync_directory(partial);

  const fs::path target = where.path / std::to_string(step);
  const fs::path replaced = where.path / fmt::format(".{}.replaced", step);
  const bool exists = fs::exists(target);
  if (exists) {
    on_disk(replaced, "clear", [&](std::error_code& e) { fs::remove_all(replaced, e); });
    on_disk(target, "move aside", [&](std::error_code& e) { fs::rename(target, replaced, e); });
  }
  on_disk(target, "commit", [&](std::error_code& e) { fs::rename(partial, target, e); });
  sync_directory(where.path);
  if (exists) fs::remove_all(replaced);

  if (where.max_to_keep <= 0) return;
  const std::vector<int64_t> steps = committed_steps(where.path);
  for (std::size_t i = 0; i + static_cast<std::size_t>(where.max_to_keep) < steps.size(); ++i) {
    const fs::path old = where.path / std::to_string(steps[i]);
    on_disk(old, "remove", [&](std::error_code& e) { fs::remove_all(old, e); });
  }
}

void CheckpointWriterActor::on_start() {
  // Below the steps' threads: the checksums and copies into the page cache run when a core has
  // nothing else to do (SCHED_IDLE), so that the step after a save is not slowed by them; a save
  // still waiting when the next one comes is then waited for, and runs while the loop waits. Where
  // the policy is refused, nice 10 (a tenth of a core under contention rather than half).
  const sched_param none{};
  if (::sched_setscheduler(0, SCHED_IDLE, &none) != 0) {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  }
}

std::optional<WriteFailure> CheckpointWriterActor::handle(WriteStep& message) {
  try {
    write_and_commit(where_, message.step);
  } catch (const FileError& e) {
    return WriteFailure{e.path(), e.reason()};
  } catch (const std::exception& e) {
    return WriteFailure{{}, e.what()};
  }
  return std::nullopt;
}

}  // namespace axle::checkpoint_step
