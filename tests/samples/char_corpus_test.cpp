// samples/char_corpus.h and char_dataset.h: the fortunes corpus (plain files without a dot,
// sorted by name), its 0.9 split, and the batch rule — row j of batch i starts at
// ((i·B + j)·T) mod (len − T − 1), replica r of w takes batch i·w + r.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "axle/io/data_loader.h"
#include "samples/char_corpus.h"
#include "samples/char_dataset.h"

namespace axle::samples {
namespace {

TEST(CharCorpus, SplitsTheFirstNinetyPercentForTraining) {
  const std::vector<uint8_t> bytes(1009, 7);
  const CorpusSplits splits = split_corpus(bytes);
  EXPECT_EQ(splits.train.size(), 908u);  // ⌊0.9 · 1009⌋
  EXPECT_EQ(splits.val.size(), 101u);
}

TEST(CharCorpus, RowsStartAtConsecutiveBlocksModuloTheUsableLength) {
  // length 100, block 8: starts wrap modulo 100 − 8 − 1 = 91.
  EXPECT_EQ(batch_row_start(0, 0, 4, 8, 100), 0);
  EXPECT_EQ(batch_row_start(0, 3, 4, 8, 100), 24);
  EXPECT_EQ(batch_row_start(2, 1, 4, 8, 100), (9 * 8) % 91);
  EXPECT_EQ(batch_row_start(3, 0, 4, 8, 100), (12 * 8) % 91);
  EXPECT_THROW((void)batch_row_start(0, 0, 4, 8, 9), std::invalid_argument);
}

TEST(CharCorpus, TargetsAreTheInputsShiftedByOne) {
  std::vector<uint8_t> split(50);
  for (std::size_t i = 0; i < split.size(); ++i) split[i] = static_cast<uint8_t>(i);
  const TokenBatch batch = token_batch(split, {3, 40}, 4);
  EXPECT_EQ(batch.inputs, (std::vector<int64_t>{3, 4, 5, 6, 40, 41, 42, 43}));
  EXPECT_EQ(batch.targets, (std::vector<int64_t>{4, 5, 6, 7, 41, 42, 43, 44}));
}

TEST(CharCorpus, ShuffledStartsDependOnTheSeedAndStayInRange) {
  int differ = 0;
  for (int64_t j = 0; j < 64; ++j) {
    const int64_t a = shuffled_row_start(1, 5, j, 64, 16, 1000);
    EXPECT_GE(a, 0);
    EXPECT_LT(a, 1000 - 16 - 1);
    EXPECT_EQ(a, shuffled_row_start(1, 5, j, 64, 16, 1000));
    differ += a != shuffled_row_start(2, 5, j, 64, 16, 1000);
  }
  EXPECT_GT(differ, 48);
}

TEST(CharCorpus, ReadsPlainFilesWithoutDotsSortedByName) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("axle_char_corpus_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
  };
  write("b", "BB");
  write("a", "A");
  write("a.dat", "index");
  write("c.u8", "utf8");
  fs::create_symlink(dir / "b", dir / "link");
  const CharCorpus corpus = read_char_corpus(dir);
  EXPECT_EQ(corpus.files, 2u);
  EXPECT_EQ(std::string(corpus.bytes.begin(), corpus.bytes.end()), "ABB");
  fs::remove_all(dir);
}

TEST(CharCorpus, AMissingDirectoryIsAnErrorNamingIt) {
  try {
    (void)read_char_corpus("/nonexistent/fortunes");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/fortunes"), std::string::npos) << e.what();
  }
}

TEST(CharDataset, ReplicaRTakesBatchIWorldPlusR) {
  auto split = std::make_shared<std::vector<uint8_t>>(500);
  for (std::size_t i = 0; i < split->size(); ++i) (*split)[i] = static_cast<uint8_t>(i % 251);
  const int64_t batch = 3, block = 8, steps = 4, world = 2;
  for (int rank = 0; rank < world; ++rank) {
    DataLoader loader(
        std::make_shared<CharRows>(split, block, batch, steps * world * batch),
        DataLoaderOptions{.batch_size = batch,
                          .sampler = std::make_shared<ReplicaBatches>(steps, batch, world, rank)});
    int64_t i = 0;
    for (const Batch& b : loader) {
      const std::vector<int64_t> inputs = b[0].values<int64_t>();
      const std::vector<int64_t> targets = b[1].values<int64_t>();
      ASSERT_EQ(inputs.size(), static_cast<std::size_t>(batch * block));
      for (int64_t j = 0; j < batch; ++j) {
        const int64_t s = batch_row_start(i * world + rank, j, batch, block, 500);
        EXPECT_EQ(inputs[j * block], (*split)[s]) << "step " << i << " row " << j;
        EXPECT_EQ(targets[j * block + block - 1], (*split)[s + block]) << "step " << i;
      }
      ++i;
    }
    EXPECT_EQ(i, steps);
  }
}

}  // namespace
}  // namespace axle::samples
