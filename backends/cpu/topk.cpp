// backends/cpu: kTopK, the positions of the k largest (or smallest) elements along one dim, best
// first. The order is total — NaN above every number, equal values by position — so a partial
// sort gives one answer whatever the thread count, the one torch's CPU kernel gives for distinct
// values.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/reducer.h"

namespace axle::cpu {
namespace {

constexpr int64_t kParallelElements = int64_t{1} << 15;

template <class V>
bool above(V a, V b) noexcept {
  return (is_nan(a) && !is_nan(b)) || a > b;
}

// Rows [first, last) of x viewed as [outer, n, inner]: row r is column r % inner of slab
// r / inner. Writes k positions per row into out ([outer, k, inner]).
template <class T>
void topk_rows(const T* x, int64_t* out, const Geometry& g, int64_t k, bool largest, int64_t first,
               int64_t last) {
  std::vector<compute_t<T>> values(static_cast<std::size_t>(g.n));
  std::vector<int64_t> order(static_cast<std::size_t>(g.n));
  for (int64_t row = first; row < last; ++row) {
    const int64_t o = row / g.inner, c = row % g.inner;
    const T* in = x + o * g.n * g.inner + c;
    for (int64_t j = 0; j < g.n; ++j) values[j] = load(in[j * g.inner]);
    std::iota(order.begin(), order.end(), int64_t{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      const auto va = values[a], vb = values[b];
      const bool a_first = largest ? above(va, vb) : above(vb, va);
      const bool b_first = largest ? above(vb, va) : above(va, vb);
      return a_first || (!b_first && a < b);
    });
    int64_t* o_row = out + o * k * g.inner + c;
    for (int64_t j = 0; j < k; ++j) o_row[j * g.inner] = order[j];
  }
}

// ints = [dim, k, largest]; output s64, the input's shape with dim of size k.
void topk_kernel(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (args.inputs.size() != 1 || ints.size() != 3) {
    throw std::invalid_argument("topk takes 1 input and ints = [dim, k, largest]");
  }
  const BufferDesc& in = *args.inputs[0].desc;
  const int64_t dim = ints[0], k = ints[1];
  check_dtype(args, "output", args.output.desc->dtype, DType::kInt64);
  Geometry g;
  for (int d = 0; d < in.shape.rank(); ++d) {
    (d < dim ? g.outer : d == dim ? g.n : g.inner) *= in.shape[d];
  }
  if (dim < 0 || dim >= std::max(in.shape.rank(), 1) || k < 0 || k > g.n ||
      args.output.desc->shape.numel() != g.outer * k * g.inner) {
    throw std::invalid_argument(fmt::format("topk: k = {} along dim {} of {} into {}", k, dim,
                                            in.shape.to_string(),
                                            args.output.desc->shape.to_string()));
  }
  if (k == 0 || g.outer * g.inner == 0) return;
  const bool largest = ints[2] != 0;
  int64_t* out = args.output.as<int64_t>();
  visit_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = args.inputs[0].as<T>();
    parallel_for(
        args.pool, g.outer * g.inner, std::max<int64_t>(1, kParallelElements / g.n),
        [&](int64_t first, int64_t last, int) { topk_rows(x, out, g, k, largest, first, last); });
  });
}

}  // namespace

void register_topk_kernels(KernelTable& table) { set_kernel(table, Kernel::kTopK, topk_kernel); }

}  // namespace axle::cpu
