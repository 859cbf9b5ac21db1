// io: the dataset interface the DataLoader reads from (PyTorch's map-style Dataset). Datasets
// live on the host; the loader stacks their samples into batches that the LoaderActor moves to
// devices.
#pragma once

#include <cstdint>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle {

/// One sample: host tensors in a fixed order that the dataset documents, e.g. {image, label}.
using Sample = std::vector<CpuTensor>;

/// A batch: each field of the samples stacked along a new first dimension of the batch size.
using Batch = std::vector<CpuTensor>;

/// A map-style dataset: `size()` samples, each fetched by index.
///
/// `get` is const and must be safe to call from several threads at once: the DataLoader's
/// workers call it concurrently. Every call for one index should return the same sample, so that
/// an epoch is reproducible from the loader's seed.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of samples.
  [[nodiscard]] virtual int64_t size() const = 0;

  /// Sample `index`, for 0 <= index < size(); throws std::out_of_range otherwise.
  [[nodiscard]] virtual Sample get(int64_t index) const = 0;
};

}  // namespace axle
