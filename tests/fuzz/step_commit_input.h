// tests/fuzz: the step directory the step_commit target checks each input against as its commit
// file, shared with the seeds' writer and their test: one file, tensors.ckpt, of fixed bytes.
#pragma once

#include <filesystem>
#include <fstream>
#include <string_view>

namespace axle::fuzz {

inline constexpr std::string_view kStepFile = "tensors.ckpt";
inline constexpr std::string_view kStepFileBytes = "axle step file";

/// Makes `dir` a step directory holding kStepFile (and nothing else but what the caller adds).
inline void make_step_directory(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / kStepFile, std::ios::binary | std::ios::trunc);
  out.write(kStepFileBytes.data(), static_cast<std::streamsize>(kStepFileBytes.size()));
}

}  // namespace axle::fuzz
