// Runs a sample trainer as a process and keeps what it printed: the e2e tests of the samples
// (train_mnist_test.cpp, train_gpt_test.cpp) check its log and its closing JSON line.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace axle::testing {

struct TrainerRun {
  std::string output;
  nlohmann::json summary;  // the last line starting with '{'
  int status = -1;
};

/// Runs `command` (stderr joined to stdout) and returns its output, exit status and summary.
inline TrainerRun run_trainer(const std::string& command) {
  TrainerRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buffer{};
  std::string last;
  while (std::fgets(buffer.data(), buffer.size(), pipe)) {
    run.output += buffer.data();
    if (buffer[0] == '{') last = buffer.data();
  }
  run.status = ::pclose(pipe);
  run.summary = nlohmann::json::parse(last, nullptr, false);
  return run;
}

/// The bytes of the file at `path` (empty when it cannot be read), to compare saved weights.
inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace axle::testing
