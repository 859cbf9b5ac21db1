// backends/cpu: reduction kernels — sum, mean, reduce_max, reduce_min, logsumexp, argmax,
// softmax and log_softmax.
//
// The geometry of a reduction and the sum, mean, max and min reducers are in reducer.h (fused
// kernels ending in a reduction share them). Reduced dims that are not adjacent (dims {0, 2} of a
// 3-d tensor) first gather the input with the kept dims in front, except the common [reduced,
// kept, reduced] case (a bias gradient's sum over N, H and W of NCHW), which reads each output's
// runs where they lie; exp and log go through Eigen arrays.
#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/reducer.h"
#include "axle/backends/cpu/vector_math.h"

namespace axle::cpu {
namespace {

template <class T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;

// The plan of a reduction kernel's call: one input, ints = [keepdim, dims...].
ReducePlan plan_call(const KernelArgs& args, std::span<const int64_t> dims, bool keepdim) {
  const std::string_view name = kernel_name(args.call.kernel);
  if (args.inputs.size() != 1) throw std::invalid_argument(fmt::format("{} takes 1 input", name));
  return plan_reduction(name, args.inputs[0].desc->shape, dims, keepdim, args.output.desc->shape);
}

// Copies x into dst with the kept groups first and the reduced groups last (each in its own
// order), turning the reduction into [outer, n, 1].
template <class T>
void gather_reduced_last(const T* x, const std::vector<Group>& groups, T* dst) {
  const int rank = static_cast<int>(groups.size());
  std::array<int64_t, Shape::kMaxRank> stride{}, dims{}, order_stride{};
  int64_t total = 1;
  for (int i = rank - 1; i >= 0; --i) {
    stride[i] = total;
    total *= groups[i].size;
  }
  if (total == 0) return;
  int m = 0;
  for (bool reduced : {false, true}) {
    for (int i = 0; i < rank; ++i) {
      if (groups[i].reduced != reduced) continue;
      dims[m] = groups[i].size;
      order_stride[m++] = stride[i];
    }
  }
  const int64_t row = dims[rank - 1], step = order_stride[rank - 1];
  std::array<int64_t, Shape::kMaxRank> index{};
  int64_t offset = 0;
  for (int64_t done = 0; done < total; done += row, dst += row) {
    if (step == 1) {
      std::copy_n(x + offset, row, dst);
    } else {
      for (int64_t i = 0; i < row; ++i) dst[i] = x[offset + i * step];
    }
    for (int d = rank - 2; d >= 0; --d) {
      offset += order_stride[d];
      if (++index[d] < dims[d]) break;
      index[d] = 0;
      offset -= order_stride[d] * dims[d];
    }
  }
}

// The input laid out as plan.geometry says, gathered when needed into the calling thread's
// scratch of the pool (kept between calls: a fresh buffer of megabytes costs a page fault per
// 4 KiB).
template <class T>
const T* arranged_input(const KernelArgs& args, const ReducePlan& plan) {
  const T* x = args.inputs[0].as<T>();
  if (!plan.gather) return x;
  T* gathered = static_cast<T*>(args.pool.scratch(
      0, sizeof(T) * static_cast<std::size_t>(args.inputs[0].desc->shape.numel())));
  gather_reduced_last(x, plan.groups, gathered);
  return gathered;
}

// ---- Column passes ---------------------------------------------------------------------------

// Columns per pass when inner > 1. Wide enough that each pass reads long contiguous runs of a
// row (512 columns ran 2-4x slower down a 4096-wide matrix); the accumulators (32 KB of double)
// stay in L2.
constexpr int64_t kColumns = 4096;
constexpr int64_t kRowBlock = 1024;  // elements exp() stages at a time along a row
// Column reductions of at least this many terms split their columns over the pool's threads
// when each thread's share of a row is at least kParallelRowBytes long: narrower shares of the
// rows of an input read from memory made the split slower than one thread (a GPT's bias
// gradients over rows of 512 bytes: 0.09 ms on one thread, 0.24 ms on two).
constexpr int64_t kParallelColumnTerms = int64_t{1} << 16;
constexpr int64_t kParallelRowBytes = 4096;

// Scratch arrays for column passes, allocated once per kernel call. Not std::vector: the
// accumulator may be bool.
template <class T>
ScratchArray<T> column_scratch(const Geometry& g) {
  return scratch_array<T>(static_cast<std::size_t>(std::min(g.inner, kColumns)));
}

// Calls pass(input offset, output offset, w) for every run of w <= kColumns columns.
template <class Pass>
void for_each_column_run(const Geometry& g, Pass&& pass) {
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t c = 0; c < g.inner; c += kColumns) {
      pass(o * g.n * g.inner + c, o * g.inner + c, std::min(kColumns, g.inner - c));
    }
  }
}

// acc[0..w) = R over the n rows (`stride` apart) starting at x.
template <class R, class T>
void reduce_columns(const T* x, int64_t n, int64_t stride, int64_t w, typename R::Acc* acc) {
  std::fill_n(acc, w, R::identity());
  for (int64_t r = 0; r < n; ++r) accumulate_row<R>(acc, x + r * stride, w);
}

// Reduces x ([outer, n, inner]) with R; calls emit(output index, acc) once per output element.
template <class R, class T, class Emit>
void reduce(const T* x, const Geometry& g, Emit&& emit) {
  if (g.inner == 1) {
    for (int64_t o = 0; o < g.outer; ++o) emit(o, reduce_row<R>(x + o * g.n, g.n));
    return;
  }
  const auto acc = column_scratch<typename R::Acc>(g);
  for_each_column_run(g, [&](int64_t at, int64_t out, int64_t w) {
    reduce_columns<R>(x + at, g.n, g.inner, w, acc.get());
    for (int64_t i = 0; i < w; ++i) emit(out + i, acc[i]);
  });
}

template <class V>
void store_all(const std::vector<V>& values, const View& out) {
  visit_dtype(out.desc->dtype, [&](auto tag) {
    using O = typename decltype(tag)::type;
    O* o = out.as<O>();
    for (std::size_t i = 0; i < values.size(); ++i) o[i] = store<O>(values[i]);
  });
}

template <class R, class T>
void reduce_to_output(const T* x, const Geometry& g, const View& out, ComputePool& pool) {
  using Result = decltype(R::finish(R::identity(), 0));
  std::vector<Result> results(static_cast<std::size_t>(g.outer * g.inner));
  if (g.inner == 1 && g.outer > 1 && g.outer * g.n >= (int64_t{1} << 16)) {
    // Whole rows per thread: each output is summed as on one thread.
    parallel_for(pool, g.outer, 1, [&](int64_t first, int64_t last, int) {
      for (int64_t o = first; o < last; ++o) {
        results[o] = R::finish(reduce_row<R>(x + o * g.n, g.n), g.n);
      }
    });
  } else if (const RowParts parts = row_parts(g); parts.count > 1) {
    // Each part's column sums apart (any thread), then merged in part order.
    using Acc = typename R::Acc;
    const auto partial = scratch_array<Acc>(static_cast<std::size_t>(parts.count * g.inner));
    pool.run(parts.count, [&](int64_t p, int) {
      const int64_t first = parts.begin(p, g.n);
      reduce_columns<R>(x + first * g.inner, parts.end(p, g.n) - first, g.inner, g.inner,
                        partial.get() + p * g.inner);
    });
    for (int64_t i = 0; i < g.inner; ++i) {
      Acc acc = partial[i];
      for (int64_t p = 1; p < parts.count; ++p) acc = R::merge(acc, partial[p * g.inner + i]);
      results[i] = R::finish(acc, g.n);
    }
  } else if (pool.threads() > 1 && g.outer * g.n * g.inner >= kParallelColumnTerms &&
             g.inner * static_cast<int64_t>(sizeof(T)) >= kParallelRowBytes * pool.threads()) {
    // Runs of whole columns per thread: a column's terms are added in the same order whichever
    // thread takes it, so the bits are one thread's.
    // Each run in passes of at most kColumns columns, as reduce() takes them.
    for_column_runs(pool, g, [&](int64_t o, int64_t c0, int64_t w) {
      const auto acc = column_scratch<typename R::Acc>(Geometry{1, g.n, w});
      for (int64_t c = c0; c < c0 + w; c += kColumns) {
        const int64_t pass = std::min(kColumns, c0 + w - c);
        reduce_columns<R>(x + o * g.n * g.inner + c, g.n, g.inner, pass, acc.get());
        for (int64_t i = 0; i < pass; ++i) results[o * g.inner + c + i] = R::finish(acc[i], g.n);
      }
    });
  } else {
    reduce<R>(x, g, [&](int64_t i, typename R::Acc acc) { results[i] = R::finish(acc, g.n); });
  }
  store_all(results, out);
}

template <class R, class T>
void reduce_strided_rows(const T* x, const StridedRows& s, const View& out, ComputePool& pool) {
  using Result = decltype(R::finish(R::identity(), 0));
  const int64_t n = s.runs * s.run;
  std::vector<Result> results(static_cast<std::size_t>(s.rows));
  auto rows = [&](int64_t first, int64_t last, int) {
    RowReducer<R, T> reducer(n);
    for (int64_t j = first; j < last; ++j) {
      for (int64_t i = 0; i < s.runs; ++i) reducer.feed(x + (i * s.rows + j) * s.run, s.run);
      results[j] = R::finish(reducer.finish_row(), n);
    }
  };
  // As reduce_to_output splits rows: each output is reduced the same way on any thread.
  if (s.rows > 1 && s.rows * n >= kParallelStridedTerms) {
    parallel_for(pool, s.rows, 1, rows);
  } else {
    rows(0, s.rows, 0);
  }
  store_all(results, out);
}

// ---- Exponential family ----------------------------------------------------------------------

// Shifting by an infinite max would give inf - inf = NaN, so logsumexp shifts by 0 instead: exp
// then yields the right inf (a +inf element) or 0 (all -inf, result -inf).
template <class C>
C finite_shift(C max) noexcept {
  return std::isinf(max) ? C(0) : max;
}

// buffer = exp(x - shift) for w elements; shift is a scalar or an array of w. exp in f32 is
// vector_math's, as the exp kernel's.
template <class T, class Shift>
void exp_shifted(const T* x, compute_t<T>* buffer, int64_t w, const Shift& shift) {
  widen_block(x, buffer, w);
  Eigen::Map<Array<compute_t<T>>> b(buffer, w);
  if constexpr (std::is_same_v<compute_t<T>, float>) {
    b = b - shift;
    map_f32(VectorFunction::kExp, buffer, buffer, w);
  } else {
    b = (b - shift).exp();
  }
}

template <class T>
using Total = Sum<compute_t<T>>;  // sums of exp: in double for f32 and f64, f32 for bf16

template <class T>
compute_t<T> row_logsumexp(const T* x, int64_t n) {
  using C = compute_t<T>;
  const C shift = finite_shift(reduce_row<Extreme<T, true>>(x, n));
  alignas(kScratchAlign) std::array<C, kRowBlock> buffer;  // see kScratchAlign
  typename Total<T>::Acc total = 0;
  for (int64_t r = 0; r < n; r += kRowBlock) {
    const int64_t m = std::min(kRowBlock, n - r);
    exp_shifted(x + r, buffer.data(), m, shift);
    total += reduce_row<Total<T>>(buffer.data(), m);
  }
  return static_cast<C>(std::log(total)) + shift;
}

template <class T>
void column_logsumexp(const T* x, const Geometry& g, compute_t<T>* out) {
  using C = compute_t<T>;
  const auto shift = column_scratch<C>(g), buffer = column_scratch<C>(g);
  const auto total = column_scratch<typename Total<T>::Acc>(g);
  for_each_column_run(g, [&](int64_t at, int64_t out_at, int64_t w) {
    reduce_columns<Extreme<T, true>>(x + at, g.n, g.inner, w, shift.get());
    for (int64_t i = 0; i < w; ++i) shift[i] = finite_shift(shift[i]);
    const Eigen::Map<const Array<C>> shifts(shift.get(), w);
    std::fill_n(total.get(), w, 0);
    for (int64_t r = 0; r < g.n; ++r) {
      exp_shifted(x + at + r * g.inner, buffer.get(), w, shifts);
      accumulate_row<Total<T>>(total.get(), buffer.get(), w);
    }
    for (int64_t i = 0; i < w; ++i) out[out_at + i] = static_cast<C>(std::log(total[i])) + shift[i];
  });
}

// Softmax and log-softmax keep torch's NaN behaviour: a row that is all -inf (or holds +inf or
// NaN) comes out NaN, since the shift is the plain max.
template <class T, bool kLog>
void row_softmax(const T* x, T* out, int64_t n, compute_t<T>* shifted, compute_t<T>* exps) {
  using C = compute_t<T>;
  widen_block(x, shifted, n);
  Eigen::Map<Array<C>> s(shifted, n), e(exps, n);
  s -= reduce_row<Extreme<C, true>>(shifted, n);
  if constexpr (std::is_same_v<C, float>) {
    map_f32(VectorFunction::kExp, shifted, exps, n);
  } else {
    e = s.exp();
  }
  const auto total = reduce_row<Total<T>>(exps, n);
  if constexpr (kLog) {
    s -= static_cast<C>(std::log(total));
  } else {
    s = e / static_cast<C>(total);
  }
  narrow_block(shifted, out, n);
}

template <class T, bool kLog>
void column_softmax(const T* x, T* out, const Geometry& g) {
  using C = compute_t<T>;
  const auto max = column_scratch<C>(g), norm = column_scratch<C>(g);
  const auto buffer = column_scratch<C>(g);
  const auto total = column_scratch<typename Total<T>::Acc>(g);
  for_each_column_run(g, [&](int64_t at, int64_t, int64_t w) {
    reduce_columns<Extreme<T, true>>(x + at, g.n, g.inner, w, max.get());
    const Eigen::Map<const Array<C>> maxes(max.get(), w), norms(norm.get(), w);
    std::fill_n(total.get(), w, 0);
    for (int64_t r = 0; r < g.n; ++r) {
      exp_shifted(x + at + r * g.inner, buffer.get(), w, maxes);
      accumulate_row<Total<T>>(total.get(), buffer.get(), w);
    }
    for (int64_t i = 0; i < w; ++i) norm[i] = static_cast<C>(kLog ? std::log(total[i]) : total[i]);
    Eigen::Map<Array<C>> b(buffer.get(), w);
    for (int64_t r = 0; r < g.n; ++r) {  // exp again rather than hold an [n, w] block
      const int64_t row = at + r * g.inner;
      widen_block(x + row, buffer.get(), w);
      if constexpr (kLog) {
        b = b - maxes - norms;
      } else if constexpr (std::is_same_v<C, float>) {
        b = b - maxes;
        map_f32(VectorFunction::kExp, buffer.get(), buffer.get(), w);
        b = b / norms;
      } else {
        b = (b - maxes).exp() / norms;
      }
      narrow_block(buffer.get(), out + row, w);
    }
  });
}

// ---- argmax ----------------------------------------------------------------------------------

// The first index of the maximum; a NaN counts as the maximum (torch.argmax), so the first NaN
// wins.
template <class T>
int64_t row_argmax(const T* x, int64_t n) {
  auto best = load(x[0]);
  int64_t at = 0;
  for (int64_t r = 1; r < n && !is_nan(best); ++r) {
    const auto v = load(x[r]);
    if (v > best || is_nan(v)) {
      best = v;
      at = r;
    }
  }
  return at;
}

template <class T>
void column_argmax(const T* x, const Geometry& g, int64_t* out) {
  const auto best = column_scratch<compute_t<T>>(g);
  for_each_column_run(g, [&](int64_t at, int64_t out_at, int64_t w) {
    widen_block(x + at, best.get(), w);
    std::fill_n(out + out_at, w, 0);
    for (int64_t r = 1; r < g.n; ++r) {
      const T* row = x + at + r * g.inner;
      for (int64_t i = 0; i < w; ++i) {
        const auto v = load(row[i]);
        const bool take = !is_nan(best[i]) && (v > best[i] || is_nan(v));
        best[i] = take ? v : best[i];
        out[out_at + i] = take ? r : out[out_at + i];
      }
    }
  });
}

// ---- Kernels ---------------------------------------------------------------------------------

// kSum kMean kReduceMax kReduceMin kLogSumExp; ints = [keepdim, dims...].
template <Kernel K>
void reduce_kernel(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.empty()) {
    throw std::invalid_argument(fmt::format("{}: ints must be [keepdim, dims...]", kernel_name(K)));
  }
  const ReducePlan plan = plan_call(args, std::span(ints).subspan(1), ints[0] != 0);
  const Geometry& g = plan.geometry;
  const DType dtype = args.inputs[0].desc->dtype;
  // sum may widen (torch sums bool and s32 into s64); the others keep the input's dtype.
  if (K != Kernel::kSum) check_dtype(args, "output", args.output.desc->dtype, dtype);
  if ((K == Kernel::kReduceMax || K == Kernel::kReduceMin) && g.n == 0) {
    throw std::invalid_argument(
        fmt::format("{}: cannot reduce {} over a dim of size 0 (max and min have no identity)",
                    kernel_name(K), args.inputs[0].desc->shape.to_string()));
  }
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr ((K == Kernel::kMean || K == Kernel::kLogSumExp) && !kIsFloat<T>) {
      unsupported(K, dtype);
    } else {
      ComputePool& pool = args.pool;
      if constexpr (K != Kernel::kLogSumExp) {
        if (const std::optional<StridedRows> strided = strided_rows(plan)) {
          const T* in = args.inputs[0].as<T>();
          if constexpr (K == Kernel::kSum)
            reduce_strided_rows<Sum<T>>(in, *strided, args.output, pool);
          if constexpr (K == Kernel::kMean) {
            reduce_strided_rows<Mean<T>>(in, *strided, args.output, pool);
          }
          if constexpr (K == Kernel::kReduceMax) {
            reduce_strided_rows<Extreme<T, true>>(in, *strided, args.output, pool);
          }
          if constexpr (K == Kernel::kReduceMin) {
            reduce_strided_rows<Extreme<T, false>>(in, *strided, args.output, pool);
          }
          return;
        }
      }
      const T* x = arranged_input<T>(args, plan);
      if constexpr (K == Kernel::kSum) reduce_to_output<Sum<T>>(x, g, args.output, pool);
      if constexpr (K == Kernel::kMean) reduce_to_output<Mean<T>>(x, g, args.output, pool);
      if constexpr (K == Kernel::kReduceMax) {
        reduce_to_output<Extreme<T, true>>(x, g, args.output, pool);
      }
      if constexpr (K == Kernel::kReduceMin) {
        reduce_to_output<Extreme<T, false>>(x, g, args.output, pool);
      }
      if constexpr (K == Kernel::kLogSumExp) {
        std::vector<compute_t<T>> results(static_cast<std::size_t>(g.outer * g.inner));
        if (g.inner == 1) {
          for (int64_t o = 0; o < g.outer; ++o) results[o] = row_logsumexp(x + o * g.n, g.n);
        } else {
          column_logsumexp(x, g, results.data());
        }
        store_all(results, args.output);
      }
    }
  });
}

// ints = [keepdim, dim]; output s64.
void argmax_kernel(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() != 2) throw std::invalid_argument("argmax: ints must be [keepdim, dim]");
  const ReducePlan plan = plan_call(args, std::span(ints).subspan(1), ints[0] != 0);
  const Geometry& g = plan.geometry;
  check_dtype(args, "output", args.output.desc->dtype, DType::kInt64);
  if (g.n == 0) {
    throw std::invalid_argument(fmt::format("argmax: dim {} of {} has size 0", ints[1],
                                            args.inputs[0].desc->shape.to_string()));
  }
  int64_t* out = args.output.as<int64_t>();
  visit_dtype(args.inputs[0].desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = args.inputs[0].as<T>();
    if (g.inner == 1) {
      for (int64_t o = 0; o < g.outer; ++o) out[o] = row_argmax(x + o * g.n, g.n);
    } else {
      column_argmax(x, g, out);
    }
  });
}

// ints = [dim]; output has the input's shape and dtype.
template <bool kLog>
void softmax_kernel(const KernelArgs& args) {
  const Kernel kernel = args.call.kernel;
  if (args.inputs.size() != 1 || args.call.ints.size() != 1) {
    throw std::invalid_argument(
        fmt::format("{} takes 1 input and ints = [dim]", kernel_name(kernel)));
  }
  const BufferDesc& in = *args.inputs[0].desc;
  const int64_t dim = args.call.ints[0];
  check_dtype(args, "output", args.output.desc->dtype, in.dtype);
  if (!(args.output.desc->shape == in.shape) || dim < 0 || dim >= std::max(in.shape.rank(), 1)) {
    throw std::invalid_argument(fmt::format("{}: dim {} of {} into {}", kernel_name(kernel), dim,
                                            in.shape.to_string(),
                                            args.output.desc->shape.to_string()));
  }
  Geometry g;
  for (int d = 0; d < in.shape.rank(); ++d) {
    (d < dim ? g.outer : d == dim ? g.n : g.inner) *= in.shape[d];
  }
  if (g.n == 0) return;  // no elements
  visit_dtype(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsFloat<T>) {
      unsupported(kernel, in.dtype);
    } else {
      const T* x = args.inputs[0].as<T>();
      T* out = args.output.as<T>();
      if (g.inner > 1) {
        column_softmax<T, kLog>(x, out, g);
        return;
      }
      // Rows spread over the device's threads, each row computed by one thread alike.
      using C = compute_t<T>;
      const auto n = static_cast<std::size_t>(g.n);
      const int64_t rows_per_part = std::max<int64_t>(1, (int64_t{1} << 14) / g.n);
      parallel_for(args.pool, g.outer, rows_per_part, [&](int64_t o0, int64_t o1, int thread) {
        const std::size_t row = (n + 15) / 16 * 16;  // whole cache lines: exps stays aligned
        C* shifted = static_cast<C*>(args.pool.scratch(thread, 2 * row * sizeof(C)));
        C* exps = shifted + row;
        for (int64_t o = o0; o < o1; ++o) {
          row_softmax<T, kLog>(x + o * g.n, out + o * g.n, g.n, shifted, exps);
        }
      });
    }
  });
}

}  // namespace

ReducePlan plan_reduction(std::string_view name, const Shape& in, std::span<const int64_t> dims,
                          bool keepdim, const Shape& out) {
  std::array<bool, Shape::kMaxRank> reduced{};
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 || dims[i] >= in.rank() || (i > 0 && dims[i] <= dims[i - 1])) {
      throw std::invalid_argument(
          fmt::format("{}: dims must be sorted, unique and in [0, {}); dim {} is {}", name,
                      in.rank(), i, dims[i]));
    }
    reduced[dims[i]] = true;
  }
  Shape expected;
  for (int d = 0; d < in.rank(); ++d) {
    if (!reduced[d] || keepdim) expected.push_back(reduced[d] ? 1 : in[d]);
  }
  if (!(expected == out)) {
    throw std::invalid_argument(fmt::format("{}: reducing {} gives {}, but the output is {}", name,
                                            in.to_string(), expected.to_string(), out.to_string()));
  }
  ReducePlan plan;
  int reduced_groups = 0;
  for (int d = 0; d < in.rank(); ++d) {
    if (in[d] == 1) continue;
    if (!plan.groups.empty() && plan.groups.back().reduced == reduced[d]) {
      plan.groups.back().size *= in[d];
    } else {
      plan.groups.push_back({in[d], reduced[d]});
      reduced_groups += reduced[d];
    }
  }
  Geometry& g = plan.geometry;
  plan.gather = reduced_groups > 1;
  bool seen_reduced = false;
  for (const Group& group : plan.groups) {
    if (group.reduced) {
      g.n *= group.size;
      seen_reduced = true;
    } else {
      (seen_reduced && !plan.gather ? g.inner : g.outer) *= group.size;
    }
  }
  return plan;
}

void register_reduce_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kSum, &reduce_kernel<Kernel::kSum>);
  set_kernel(table, Kernel::kMean, &reduce_kernel<Kernel::kMean>);
  set_kernel(table, Kernel::kReduceMax, &reduce_kernel<Kernel::kReduceMax>);
  set_kernel(table, Kernel::kReduceMin, &reduce_kernel<Kernel::kReduceMin>);
  set_kernel(table, Kernel::kLogSumExp, &reduce_kernel<Kernel::kLogSumExp>);
  set_kernel(table, Kernel::kArgMax, &argmax_kernel);
  set_kernel(table, Kernel::kSoftmax, &softmax_kernel<false>);
  set_kernel(table, Kernel::kLogSoftmax, &softmax_kernel<true>);
}

}  // namespace axle::cpu
