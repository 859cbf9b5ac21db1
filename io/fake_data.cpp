// io: FakeData draws each sample from its own counter-based stream, so no state is shared
// between the loader's worker threads.
#include "axle/io/fake_data.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "axle/io/splitmix.h"

namespace axle {

FakeData::FakeData(FakeDataOptions options) : options_(options) {
  if (options_.size < 0) {
    throw std::invalid_argument(fmt::format("FakeData: size {} is negative", options_.size));
  }
  if (options_.num_classes < 1) {
    throw std::invalid_argument(
        fmt::format("FakeData: num_classes {} must be at least 1", options_.num_classes));
  }
  if (options_.sample_shape.rank() >= Shape::kMaxRank) {
    throw std::invalid_argument(fmt::format(
        "FakeData: sample_shape {} has rank {}; batching adds a dimension and axle supports at "
        "most {}",
        options_.sample_shape.to_string(), options_.sample_shape.rank(), Shape::kMaxRank));
  }
  for (int64_t d : options_.sample_shape.dims()) {
    if (d < 0) {
      throw std::invalid_argument(fmt::format("FakeData: sample_shape {} has a negative dimension",
                                              options_.sample_shape.to_string()));
    }
  }
}

Sample FakeData::get(int64_t index) const {
  if (index < 0 || index >= options_.size) {
    throw std::out_of_range(
        fmt::format("FakeData: index {} is out of range for {} samples", index, options_.size));
  }
  detail::SplitMix64 stream(options_.seed, static_cast<uint64_t>(index));
  const auto label =
      static_cast<int64_t>(stream.next_below(static_cast<uint64_t>(options_.num_classes)));

  const int64_t numel = options_.sample_shape.numel();
  CpuTensor input{DType::kFloat32, options_.sample_shape,
                  std::vector<std::byte>(static_cast<std::size_t>(numel) * sizeof(float))};
  for (int64_t i = 0; i < numel; ++i) {
    const float v = stream.next_float();
    std::memcpy(input.bytes.data() + i * sizeof(float), &v, sizeof v);
  }
  CpuTensor target{DType::kInt64, Shape{}, std::vector<std::byte>(sizeof(int64_t))};
  std::memcpy(target.bytes.data(), &label, sizeof label);
  return {std::move(input), std::move(target)};
}

}  // namespace axle
