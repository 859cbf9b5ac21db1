// tests/fuzz: a checkpoint step's commit file (graph/formats/step_commit.h) through
// check_step_commit, as CheckpointManager.restore checks a step before it reads any of it. The
// input is the commit file of a directory holding one file of fixed bytes. A damaged commit file
// (or one that lists files that are not there, or not as listed) must throw FileError and
// nothing else.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "axle/graph/formats/error.h"
#include "axle/graph/formats/step_commit.h"
#include "tests/fuzz/step_commit_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const fs::path root =
        fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path made = root / ("axle-fuzz-" + std::to_string(::getpid()) + "-step");
    axle::fuzz::make_step_directory(made);
    return made;
  }();
  {
    std::ofstream out(dir / axle::kStepCommitFile, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    axle::check_step_commit(dir);
  } catch (const axle::FileError&) {
  }
  return 0;
}
