// samples: the character-level corpus train_gpt learns from — Debian's fortunes as bytes (vocab
// 256) — and the rule that cuts it into batches, kept apart from the trainer so tests can check it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace axle::samples {

/// Where Debian's `fortunes` package puts its files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/// A corpus of bytes and how many files it was read from.
struct CharCorpus {
  std::vector<uint8_t> bytes;
  std::size_t files = 0;
};

/// Every regular file (not a symlink) directly in `dir` whose name has no '.', sorted by name,
/// concatenated. Throws naming `dir` when it is missing or holds no such file.
inline CharCorpus read_char_corpus(const std::filesystem::path& dir = kFortunesDir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) {
    throw std::runtime_error("no corpus: " + dir.string() +
                             " is missing (install Debian's fortunes: ./axle.sh deps)");
  }
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_symlink() && entry.is_regular_file() && name.find('.') == std::string::npos) {
      paths.push_back(entry.path());
    }
  }
  if (paths.empty()) throw std::runtime_error("no corpus: " + dir.string() + " holds no files");
  std::ranges::sort(paths, [](const fs::path& a, const fs::path& b) {
    return a.filename().string() < b.filename().string();
  });
  CharCorpus corpus;
  for (const fs::path& path : paths) {
    std::ifstream in(path, std::ios::binary);
    corpus.bytes.insert(corpus.bytes.end(), std::istreambuf_iterator<char>(in), {});
  }
  corpus.files = paths.size();
  return corpus;
}

/// The first ⌊0.9·n⌋ bytes train, the rest validate.
struct CorpusSplits {
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
};

inline CorpusSplits split_corpus(const std::vector<uint8_t>& bytes) {
  const auto cut = static_cast<std::ptrdiff_t>(bytes.size() * 9 / 10);  // exact floor of 0.9·n
  return {{bytes.begin(), bytes.begin() + cut}, {bytes.begin() + cut, bytes.end()}};
}

/// Where row j of batch i of a split of `length` bytes starts, for rows of `block` tokens:
/// ((i·batch + j)·block) mod (length − block − 1), so inputs [s, s+block) and targets
/// [s+1, s+block+1) stay inside the split.
inline int64_t batch_row_start(int64_t i, int64_t j, int64_t batch, int64_t block, int64_t length) {
  if (length < block + 2) {
    throw std::invalid_argument("a split of " + std::to_string(length) +
                                " bytes is too short for rows of " + std::to_string(block));
  }
  return ((i * batch + j) * block) % (length - block - 1);
}

/// A shuffled run's start of row j of batch i: a hash of (seed, i, j) (splitmix64), so every
/// replica layout draws the same rows for the same batch index.
inline int64_t shuffled_row_start(uint64_t seed, int64_t i, int64_t j, int64_t batch, int64_t block,
                                  int64_t length) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(i * batch + j)));
  return static_cast<int64_t>(h % static_cast<uint64_t>(length - block - 1));
}

/// Inputs and targets of one batch, [batch, block] each, row-major, from the rows' starts.
struct TokenBatch {
  std::vector<int64_t> inputs;
  std::vector<int64_t> targets;
};

inline TokenBatch token_batch(const std::vector<uint8_t>& split, const std::vector<int64_t>& starts,
                              int64_t block) {
  TokenBatch batch;
  batch.inputs.reserve(starts.size() * block);
  batch.targets.reserve(starts.size() * block);
  for (int64_t s : starts) {
    for (int64_t t = 0; t < block; ++t) {
      batch.inputs.push_back(split[s + t]);
      batch.targets.push_back(split[s + t + 1]);
    }
  }
  return batch;
}

}  // namespace axle::samples
