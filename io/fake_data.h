// io: a synthetic dataset for benchmarks and tests that need data but not real data (torchvision's
// FakeData, the --fake_data flag of PyTorch/XLA's samples).
#pragma once

#include <cstdint>

#include "axle/engine/shape.h"
#include "axle/io/dataset.h"

namespace axle {

/// What FakeData generates.
struct FakeDataOptions {
  int64_t size = 1000;               ///< number of samples
  Shape sample_shape = {1, 28, 28};  ///< shape of each sample's input (rank at most 7)
  int64_t num_classes = 10;          ///< labels are drawn from [0, num_classes)
  uint64_t seed = 0;                 ///< same seed, same samples, on every platform
};

/// A dataset of random samples: input f32 `sample_shape` uniform in [0, 1), label s64 scalar in
/// [0, num_classes). Sample i depends only on the seed and i, so any order of access and any
/// number of loader workers see the same data, and nothing is stored.
class FakeData final : public Dataset {
 public:
  /// Throws std::invalid_argument for a negative size or dimension, or fewer than one class.
  explicit FakeData(FakeDataOptions options = {});

  [[nodiscard]] int64_t size() const override { return options_.size; }
  /// {input f32 sample_shape, label s64 []}.
  [[nodiscard]] Sample get(int64_t index) const override;
  /// The options the dataset was made with.
  [[nodiscard]] const FakeDataOptions& options() const noexcept { return options_; }

 private:
  FakeDataOptions options_;
};

}  // namespace axle
