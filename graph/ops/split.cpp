// graph/ops: split and chunk, as torch.split and torch.chunk — slices of one dim, each a slice
// node (whose gradient pads it back into place).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

// The dim `op` splits, after checking x has one.
int64_t split_dim(std::string_view op, const Tensor& x, int64_t dim, const Loc& where) {
  ops::require_defined(op, x, "the operand", where);
  if (x.dim() == 0) {
    ops::fail(op, fmt::format("needs a tensor of at least 1 dim, not {}", describe(x)), where);
  }
  return ops::normalize_dim(op, x, dim, x.dim(), where);
}

std::vector<Tensor> pieces(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes,
                           const Loc& where) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    out.push_back(slice(x, dim, start, start + size, 1, where));
    start += size;
  }
  return out;
}

// Pieces of `split_size` with a smaller last one; one piece when split_size >= the dim's size.
std::vector<int64_t> even_sizes(int64_t size, int64_t split_size) {
  if (split_size == 0) return {0};  // only for an empty dim (checked by the callers)
  const int64_t count = std::max<int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(static_cast<std::size_t>(count), split_size);
  sizes.back() = size - split_size * (count - 1);
  return sizes;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim, Loc where) {
  const int64_t d = split_dim("split", x, dim, where);
  const int64_t size = x.size(static_cast<int>(d));
  if (split_size < 0 || (split_size == 0 && size != 0)) {
    ops::fail("split",
              fmt::format("split_size {} must be positive (0 only for an empty dim) to split dim "
                          "{} of {}",
                          split_size, d, describe(x)),
              where);
  }
  return pieces(x, d, even_sizes(size, split_size), where);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim,
                          Loc where) {
  const int64_t d = split_dim("split", x, dim, where);
  const int64_t size = x.size(static_cast<int>(d));
  const bool negative =
      std::any_of(split_sizes.begin(), split_sizes.end(), [](int64_t s) { return s < 0; });
  if (split_sizes.empty() || negative ||
      std::accumulate(split_sizes.begin(), split_sizes.end(), int64_t{0}) != size) {
    ops::fail("split",
              fmt::format("split_sizes [{}] must be non-negative and sum to {}, the size of dim "
                          "{} of {}",
                          fmt::join(split_sizes, ","), size, d, describe(x)),
              where);
  }
  return pieces(x, d, split_sizes, where);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, Loc where) {
  const int64_t d = split_dim("chunk", x, dim, where);
  if (chunks <= 0) {
    ops::fail("chunk",
              fmt::format("chunks must be positive, not {} (chunking {})", chunks, describe(x)),
              where);
  }
  const int64_t size = x.size(static_cast<int>(d));
  // An empty dim gives `chunks` empty pieces, as torch (split would give one).
  if (size == 0)
    return pieces(x, d, std::vector<int64_t>(static_cast<std::size_t>(chunks), 0), where);
  return pieces(x, d, even_sizes(size, (size + chunks - 1) / chunks), where);
}

}  // namespace axle
