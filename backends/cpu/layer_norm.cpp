// backends/cpu: kLayerNorm and kLayerNormBackward, layer_norm's normalisation and its gradient a
// row at a time (the row's statistics stay in registers; written as reductions and elementwise
// ops they cost eight kernels and as many passes over the activation). A row's sums run in double
// on four chains of four lanes, two passes (the mean, then the centred squares), so a long row is
// summed as carefully as a short one; each row is one thread's, so every thread count gives the
// same bits. A backward call may fold the affine weight's product into its incoming gradient
// and the residual gradient's add into its result (executable.h), with the bits of those ops.
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

using Double4 = double __attribute__((vector_size(32)));
using Float4 = float __attribute__((vector_size(16)));

// Four consecutive values from p, in double.
template <class C>
Double4 load4(const C* p) {
  if constexpr (std::is_same_v<C, float>) {
#if defined(__AVX__)
    // One widening load: a Float4 converted with __builtin_convertvector took four instructions
    // (two halves widened and joined), the most of a row's passes.
    return Double4(_mm256_cvtps_pd(_mm_loadu_ps(p)));
#else
    Float4 f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, Double4);
#endif
  } else {
    Double4 d;
    std::memcpy(&d, p, sizeof d);
    return d;
  }
}

// kSums sums over i < n at once: four(i) gives elements i..i+3's terms (a Double4 per sum), one(i)
// element i's alone (the tail). Four independent chains of four lanes each, added in a fixed
// order, so the bits do not depend on the thread or the row's place.
template <int kSums, class Four, class One>
std::array<double, kSums> row_sums(int64_t n, Four&& four, One&& one) {
  std::array<Double4, kSums> chain[4] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const std::array<Double4, kSums> v = four(i + 4 * c);
#pragma GCC unroll 2
      for (int s = 0; s < kSums; ++s) chain[c][s] += v[s];
    }
  }
  std::array<double, kSums> tail{};
  for (; i < n; ++i) {
    const std::array<double, kSums> v = one(i);
    for (int s = 0; s < kSums; ++s) tail[s] += v[s];
  }
  std::array<double, kSums> sums{};
  for (int s = 0; s < kSums; ++s) {
    const Double4 v = (chain[0][s] + chain[1][s]) + (chain[2][s] + chain[3][s]);
    sums[s] = ((v[0] + v[2]) + (v[1] + v[3])) + tail[s];
  }
  return sums;
}

// out[i] = f(i) for i < n, in groups of 16 computed into a local array (the trip count known,
// and no overlap with out to rule out, so GCC vectorises them).
template <class C, class F>
void map_row(int64_t n, C* out, F&& f) {
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= n; i += kGroup) {
    C group[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) group[j] = f(i + j);
    for (int64_t j = 0; j < kGroup; ++j) out[i + j] = group[j];
  }
  for (; i < n; ++i) out[i] = f(i);
}

struct RowStats {
  double mean, rstd;
};

template <class C>
RowStats row_stats(const C* x, int64_t n, double eps) {
  const auto count = static_cast<double>(n);
  const double mean = row_sums<1>(
                          n, [&](int64_t i) { return std::array{load4(x + i)}; },
                          [&](int64_t i) { return std::array{double{x[i]}}; })[0] /
                      count;
  const double squares = row_sums<1>(
      n,
      [&](int64_t i) {
        const Double4 d = load4(x + i) - mean;
        return std::array{d * d};
      },
      [&](int64_t i) {
        const double d = double{x[i]} - mean;
        return std::array{d * d};
      })[0];
  return {mean, 1 / std::sqrt(squares / count + eps)};  // biased variance
}

// y = (x - mean) * rstd in double, rounded once: a row far from zero keeps its digits.
template <class C>
void normalize_row(const C* x, C* y, int64_t n, double eps) {
  const RowStats s = row_stats(x, n, eps);
  map_row(n, y, [&](int64_t i) { return static_cast<C>((double{x[i]} - s.mean) * s.rstd); });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), xhat = (x - mean) * rstd, in double,
// rounded to C, then added to the residual's row r (when not null) in C as a separate add would.
template <class C>
void normalize_row_backward(const C* g, const C* x, const C* r, C* dx, int64_t n, double eps) {
  const RowStats s = row_stats(x, n, eps);
  const auto count = static_cast<double>(n);
  const std::array<double, 2> sums = row_sums<2>(
      n,
      [&](int64_t i) {
        const Double4 grad = load4(g + i);
        return std::array{grad, grad * ((load4(x + i) - s.mean) * s.rstd)};
      },
      [&](int64_t i) {
        const double grad = g[i];
        return std::array{grad, grad * ((double{x[i]} - s.mean) * s.rstd)};
      });
  const double a = sums[0] / count, b = sums[1] / count;
  auto value = [&](int64_t i) {
    const double xhat = (double{x[i]} - s.mean) * s.rstd;
    return static_cast<C>(s.rstd * (double{g[i]} - a - xhat * b));
  };
  if (r) {
    map_row(n, dx, [&](int64_t i) { return C(r[i] + value(i)); });
  } else {
    map_row(n, dx, value);
  }
}

// ints = [k]: the rows are the last k dims; reals = [eps].
struct Rows {
  int64_t count, width;
  double eps;
  // Rows per part: about 16K values.
  [[nodiscard]] int64_t grain() const {
    return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, width));
  }
};

// Checks the first `same` operands (the output's shape and dtype) and the attributes; `ints` is
// how many ints the call may have.
Rows rows_of(const KernelArgs& args, std::size_t operands, std::size_t same, std::size_t ints = 1) {
  const std::string_view name = kernel_name(args.call.kernel);
  if (args.inputs.size() != operands) {
    throw std::invalid_argument(
        fmt::format("{} takes {} operands, got {}", name, operands, args.inputs.size()));
  }
  const BufferDesc& out = *args.output.desc;
  for (std::size_t i = 0; i < operands; ++i) {
    const BufferDesc& in = *args.inputs[i].desc;
    check_dtype(args, "operand", in.dtype, out.dtype);
    if (i < same && !(in.shape == out.shape)) {
      throw std::invalid_argument(fmt::format("{}: an operand is {}, the output {}", name,
                                              in.shape.to_string(), out.shape.to_string()));
    }
  }
  if (args.call.ints.empty() || args.call.ints.size() > ints || args.call.reals.size() != 1 ||
      args.call.ints[0] < 1 || args.call.ints[0] > out.shape.rank()) {
    throw std::invalid_argument(
        fmt::format("{} needs ints = [normalized dims, 1 to the rank {}] and reals = [eps]", name,
                    out.shape.rank()));
  }
  int64_t width = 1;
  for (int d = out.shape.rank() - static_cast<int>(args.call.ints[0]); d < out.shape.rank(); ++d) {
    width *= out.shape[d];
  }
  return {width == 0 ? 0 : out.shape.numel() / width, width, args.call.reals[0]};
}

// Runs row(first operand rows..., output row) over the rows on the pool; bf16 rows are widened
// into the thread's buffers and the result rounded once.
template <std::size_t kOperands, class Row>
void for_rows(const KernelArgs& args, const Rows& rows, Row&& row) {
  visit_dtype(args.output.desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsFloat<T>) {
      unsupported(args.call.kernel, args.output.desc->dtype);
    } else {
      T* out = args.output.as<T>();
      parallel_for(args.pool, rows.count, rows.grain(), [&](int64_t first, int64_t last, int) {
        for (int64_t r = first; r < last; ++r) {
          const int64_t at = r * rows.width;
          if constexpr (std::is_same_v<T, Bf16>) {
            const auto width = static_cast<std::size_t>(rows.width);
            float* operand[kOperands];
            for (std::size_t i = 0; i < kOperands; ++i) {
              operand[i] = thread_floats(static_cast<int>(i), width);
              widen_block(args.inputs[i].template as<Bf16>() + at, operand[i], rows.width);
            }
            float* result = thread_floats(static_cast<int>(kOperands), width);
            if constexpr (kOperands == 1) {
              row(operand[0], result);
            } else {
              row(operand[0], operand[1], result);
            }
            narrow_block(result, out + at, rows.width);
          } else if constexpr (kOperands == 1) {
            row(args.inputs[0].template as<T>() + at, out + at);
          } else {
            row(args.inputs[0].template as<T>() + at, args.inputs[1].template as<T>() + at,
                out + at);
          }
        }
      });
    }
  });
}

void layer_norm_kernel(const KernelArgs& args) {
  const Rows rows = rows_of(args, 1, 1);
  for_rows<1>(args, rows,
              [&](const auto* x, auto* y) { normalize_row(x, y, rows.width, rows.eps); });
}

void layer_norm_backward_kernel(const KernelArgs& args) {
  const int64_t folded = args.call.ints.size() == 2 ? args.call.ints[1] : 0;
  if (folded < 0 || folded > (kLayerNormFoldedWeight | kLayerNormFoldedResidual)) {
    throw std::invalid_argument(
        fmt::format("layer_norm_backward: ints[1] = {} is not a set of folded operands (1: a "
                    "weight, 2: a residual)",
                    folded));
  }
  const bool weighted = (folded & kLayerNormFoldedWeight) != 0,
             residual = (folded & kLayerNormFoldedResidual) != 0;
  const std::size_t operands = 2 + (weighted ? 1 : 0) + (residual ? 1 : 0);
  // grad, x and the residual have the output's shape; the weight one value per row element.
  const Rows rows = rows_of(args, operands, weighted ? 2 : operands, 2);
  if (weighted && residual) {
    const BufferDesc& r = *args.inputs[3].desc;
    if (!(r.shape == args.output.desc->shape)) {
      throw std::invalid_argument(
          fmt::format("layer_norm_backward: the residual is {}, the output {}", r.shape.to_string(),
                      args.output.desc->shape.to_string()));
    }
  }
  if (weighted && args.inputs[2].desc->shape.numel() != rows.width) {
    throw std::invalid_argument(
        fmt::format("layer_norm_backward: the weight is {}, not one value per element of a row "
                    "of {}",
                    args.inputs[2].desc->shape.to_string(), rows.width));
  }
  if (folded == 0) {
    return for_rows<2>(args, rows, [&](const auto* g, const auto* x, auto* dx) {
      using C = std::remove_cvref_t<decltype(*x)>;
      normalize_row_backward(g, x, static_cast<const C*>(nullptr), dx, rows.width, rows.eps);
    });
  }
  visit_dtype(args.output.desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // In f32 the product and the sum each round to float between double-precision steps, so no
    // contraction into an fma can change their bits (in f64 one could).
    if constexpr (!std::is_same_v<T, float>) {
      throw std::invalid_argument(
          fmt::format("layer_norm_backward: folded operands are f32, not {}",
                      dtype_name(args.output.desc->dtype)));
    } else {
      const T* g = args.inputs[0].as<T>();
      const T* x = args.inputs[1].as<T>();
      const T* w = weighted ? args.inputs[2].as<T>() : nullptr;
      const T* r = residual ? args.inputs[operands - 1].as<T>() : nullptr;
      T* out = args.output.as<T>();
      parallel_for(args.pool, rows.count, rows.grain(), [&](int64_t first, int64_t last, int) {
        // The weighted gradient a row at a time, as the mul's own kernel rounds it.
        float* weighted_row = w ? thread_floats(0, static_cast<std::size_t>(rows.width)) : nullptr;
        for (int64_t row = first; row < last; ++row) {
          const int64_t at = row * rows.width;
          const T* grad = g + at;
          if (w) {
            map_row(rows.width, weighted_row, [&](int64_t i) { return grad[i] * w[i]; });
            grad = weighted_row;
          }
          normalize_row_backward(grad, x + at, r ? r + at : nullptr, out + at, rows.width,
                                 rows.eps);
        }
      });
    }
  });
}

}  // namespace

void register_layer_norm_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kLayerNorm, &layer_norm_kernel);
  set_kernel(table, Kernel::kLayerNormBackward, &layer_norm_backward_kernel);
}

}  // namespace axle::cpu
