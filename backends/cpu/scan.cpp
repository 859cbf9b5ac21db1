// backends/cpu: kCumsum, running sums along one dim. Floating sums accumulate in double and round
// only where each element is stored, so a long f32 row does not drift; integers add in wrapping
// 64 bits. Each column of a [outer, n, inner] view is summed on its own, in a fixed order, so
// the bits do not depend on how the columns are split over threads.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/reducer.h"

namespace axle::cpu {
namespace {

// Columns summed side by side: contiguous runs of the inner dims, with the running sums on the
// stack (no allocation per call).
constexpr int64_t kColumns = 256;
constexpr int64_t kParallelElements = int64_t{1} << 15;

template <class T>
using Accumulator = std::conditional_t<kIsFloat<T>, double, int64_t>;

// Columns [column, column + w) of slab `x` ([n, inner]) into `out`.
template <class T>
void cumsum_columns(const T* x, T* out, const Geometry& g, int64_t column, int64_t w,
                    bool reverse) {
  std::array<Accumulator<T>, kColumns> sums{};
  for (int64_t r = 0; r < g.n; ++r) {
    const int64_t row = reverse ? g.n - 1 - r : r;
    const T* in = x + row * g.inner + column;
    T* o = out + row * g.inner + column;
    for (int64_t i = 0; i < w; ++i) {
      if constexpr (kIsFloat<T>) {
        sums[i] += static_cast<double>(load(in[i]));
      } else {  // wraps, as the other integer kernels do
        sums[i] = static_cast<int64_t>(static_cast<uint64_t>(sums[i]) +
                                       static_cast<uint64_t>(static_cast<int64_t>(in[i])));
      }
      o[i] = store<T>(sums[i]);
    }
  }
}

// ints = [dim, reverse]; the output has the input's shape and dtype.
void cumsum_kernel(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (args.inputs.size() != 1 || ints.size() != 2) {
    throw std::invalid_argument("cumsum takes 1 input and ints = [dim, reverse]");
  }
  const BufferDesc& in = *args.inputs[0].desc;
  const int64_t dim = ints[0];
  check_dtype(args, "output", args.output.desc->dtype, in.dtype);
  if (!(args.output.desc->shape == in.shape) || dim < 0 || dim >= std::max(in.shape.rank(), 1)) {
    throw std::invalid_argument(fmt::format("cumsum: dim {} of {} into {}", dim,
                                            in.shape.to_string(),
                                            args.output.desc->shape.to_string()));
  }
  Geometry g;
  for (int d = 0; d < in.shape.rank(); ++d) {
    (d < dim ? g.outer : d == dim ? g.n : g.inner) *= in.shape[d];
  }
  if (in.shape.numel() == 0) return;
  const bool reverse = ints[1] != 0;
  const int64_t runs_per_slab = (g.inner + kColumns - 1) / kColumns;
  const int64_t run_elements = g.n * std::min(g.inner, kColumns);
  visit_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      unsupported(Kernel::kCumsum, in.dtype);
    } else {
      const T* x = args.inputs[0].as<T>();
      T* out = args.output.as<T>();
      parallel_for(args.pool, g.outer * runs_per_slab,
                   std::max<int64_t>(1, kParallelElements / run_elements),
                   [&](int64_t first, int64_t last, int) {
                     for (int64_t run = first; run < last; ++run) {
                       const int64_t o = run / runs_per_slab;
                       const int64_t column = run % runs_per_slab * kColumns;
                       const int64_t slab = o * g.n * g.inner;
                       cumsum_columns(x + slab, out + slab, g, column,
                                      std::min(kColumns, g.inner - column), reverse);
                     }
                   });
    }
  });
}

}  // namespace

void register_scan_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kCumsum, cumsum_kernel);
}

}  // namespace axle::cpu
