// actors/parallel: what FullyShardedDataParallel's files (fully_sharded_data_parallel.cpp,
// fsdp_checkpoint.cpp) share — how a flat parameter holds the module's parameters, and how their
// names are spelled inside the wrapper.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "axle/graph/nn/module.h"
#include "axle/graph/tensor.h"

namespace axle {

namespace fsdp {

/// A module's parameter slot (tied parameters: one slot, several homes) and where its value sits
/// in a flat parameter.
struct Slot {
  std::vector<std::pair<nn::Module*, std::string>> homes;  // (module, own name); tied: several
  std::vector<std::string> names;                          // dotted, inside the wrapped module
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
};

/// One flat parameter of a unit: its slots, and its padded length (a multiple of the world size).
struct Flat {
  DType dtype = DType::kFloat32;
  int64_t padded_numel = 0;
  bool dim_0 = false;
  std::vector<Slot> slots;
};

/// The name the wrapped module is registered under, as torch_xla's FSDP names it.
inline constexpr std::string_view kWrapped = "_fsdp_wrapped_module";

/// The prefix of child `name`'s parameters under `prefix` ("" names the module itself).
inline std::string child_prefix(const std::string& prefix, const std::string& name) {
  return name.empty() ? prefix : prefix + name + ".";
}

/// `t`'s dims as a vector.
inline std::vector<int64_t> dims_of(const Tensor& t) {
  const auto d = t.shape().dims();
  return {d.begin(), d.end()};
}

}  // namespace fsdp
}  // namespace axle
