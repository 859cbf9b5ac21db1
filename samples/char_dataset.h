// samples: the fortunes corpus as a DataLoader reads it — each sample one row of a batch by the
// rule of char_corpus.h — and the sampler that gives each data-parallel replica its own rows.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "axle/io/dataset.h"
#include "axle/io/sampler.h"
#include "samples/char_corpus.h"

namespace axle::samples {

/// Rows of `block` tokens from one split: sample k is row k mod batch of batch k / batch,
/// {inputs s64[block], targets s64[block]}, starting by the unshuffled rule or, with a seed, drawn
/// from it.
class CharRows : public Dataset {
 public:
  CharRows(std::shared_ptr<const std::vector<uint8_t>> split, int64_t block, int64_t batch,
           int64_t rows, std::optional<uint64_t> shuffle_seed = std::nullopt)
      : split_(std::move(split)), block_(block), batch_(batch), rows_(rows), seed_(shuffle_seed) {}

  [[nodiscard]] int64_t size() const override { return rows_; }

  [[nodiscard]] Sample get(int64_t index) const override {
    if (index < 0 || index >= rows_)
      throw std::out_of_range("CharRows: no row " + std::to_string(index));
    const int64_t i = index / batch_, j = index % batch_;
    const auto length = static_cast<int64_t>(split_->size());
    const int64_t start = seed_ ? shuffled_row_start(*seed_, i, j, batch_, block_, length)
                                : batch_row_start(i, j, batch_, block_, length);
    const TokenBatch row = token_batch(*split_, {start}, block_);
    return {host(row.inputs), host(row.targets)};
  }

 private:
  [[nodiscard]] CpuTensor host(const std::vector<int64_t>& values) const {
    CpuTensor t{DType::kInt64, Shape{block_},
                std::vector<std::byte>(values.size() * sizeof(int64_t))};
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
  }

  std::shared_ptr<const std::vector<uint8_t>> split_;
  int64_t block_, batch_, rows_;
  std::optional<uint64_t> seed_;
};

/// Replica r of `world` takes batches r, world + r, 2·world + r, ... (batch i·world + r at its
/// step i), each of `batch` consecutive samples of CharRows. A run resumed at a step goes on from
/// that step's batch through the DataLoader's position (DataLoader::load_state_dict).
class ReplicaBatches : public Sampler {
 public:
  ReplicaBatches(int64_t steps, int64_t batch, int world, int rank)
      : steps_(steps), batch_(batch), world_(world), rank_(rank) {}

  [[nodiscard]] std::vector<int64_t> indices() const override {
    std::vector<int64_t> all;
    all.reserve(static_cast<std::size_t>(size()));
    for (int64_t i = 0; i < steps_; ++i) {
      for (int64_t j = 0; j < batch_; ++j) all.push_back((i * world_ + rank_) * batch_ + j);
    }
    return all;
  }
  [[nodiscard]] int64_t size() const override { return steps_ * batch_; }

 private:
  int64_t steps_, batch_;
  int world_, rank_;
};

}  // namespace axle::samples
