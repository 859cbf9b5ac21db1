// backends/cpu: how reductions accumulate — the geometry of a reduction, the reducers (sum, mean,
// max, min), their row and column loops, the row parts of long column reductions and the folds
// that take a fused chain's values a block at a time. Shared by the reduction kernels
// (reduce.cpp) and the fused kernels that end in a reduction (fused.cpp), so that both add the
// same terms in the same order and give the same bits.
//
// Every reduction sees its input as [outer, n, inner]: the n elements reduced into output (o, i)
// sit at input[(o * n + r) * inner + i]. Size-1 dims are dropped and adjacent reduced (or kept)
// dims merge, so any dim set whose reduced dims end up adjacent needs no copy; other sets (dims
// {0, 2} of a 3-d tensor) are gathered first. inner == 1 reduces contiguous rows with kLanes
// independent accumulators; inner > 1 accumulates whole rows into column accumulators, one term
// after another. Both are fixed-size block loops so that GCC vectorises them at -O2 (see
// elementwise.cpp).
//
// Accumulation: f64 and f32 in double (an f32 running sum drifts past 1e-5 relative within 1M
// elements), bf16 in f32, integers and bool in wrapping 64-bit integers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"

namespace axle::cpu {

// ---- Geometry --------------------------------------------------------------------------------

struct Geometry {
  int64_t outer = 1, n = 1, inner = 1;
};

/// A run of adjacent input dims that are all reduced or all kept (size-1 dims left out).
struct Group {
  int64_t size;
  bool reduced;
};

struct ReducePlan {
  Geometry geometry;
  std::vector<Group> groups;  // in input order
  bool gather = false;        // reduced groups are not adjacent: move kept dims to the front
};

/// How reducing `in` over `dims` (sorted, unique, in range) runs; throws invalid_argument naming
/// `name` when the dims are not valid or `out` is not the shape the reduction gives.
ReducePlan plan_reduction(std::string_view name, const Shape& in, std::span<const int64_t> dims,
                          bool keepdim, const Shape& out);

/// One kept group between two reduced ones, [runs, rows, run] reduced over runs and run (a
/// per-channel statistic over [N, C, H, W]): output j reduces the `runs` runs of `run` terms at
/// x[(i * rows + j) * run], fed to a RowReducer in that order, which gives the bits reduce_row
/// gives the gathered row without the copy.
struct StridedRows {
  int64_t runs, rows, run;
};

/// StridedRows reductions of fewer terms in all run on one thread.
inline constexpr int64_t kParallelStridedTerms = int64_t{1} << 16;

[[nodiscard]] inline std::optional<StridedRows> strided_rows(const ReducePlan& plan) {
  const std::vector<Group>& groups = plan.groups;
  if (groups.size() != 3 || !groups[0].reduced || groups[1].reduced || !groups[2].reduced) {
    return std::nullopt;
  }
  return StridedRows{groups[0].size, groups[1].size, groups[2].size};
}

// ---- Reducers --------------------------------------------------------------------------------

// A reducer: Acc, identity(), step(acc, x) (vectorisable), merge(acc, acc), finish(acc, n).
template <class T>
struct Sum {
  using Acc = std::conditional_t<std::is_same_v<T, Bf16>, float,
                                 std::conditional_t<kIsFloat<T>, double, uint64_t>>;
  static Acc identity() noexcept { return Acc(0); }
  static Acc step(Acc acc, compute_t<T> x) noexcept { return acc + static_cast<Acc>(x); }
  static Acc merge(Acc a, Acc b) noexcept { return a + b; }
  static auto finish(Acc acc, int64_t) noexcept {
    if constexpr (std::is_same_v<Acc, uint64_t>) {
      return static_cast<int64_t>(acc);  // two's complement: the wrapped signed sum
    } else {
      return acc;
    }
  }
};

template <class T>
struct Mean : Sum<T> {
  using Acc = typename Sum<T>::Acc;
  static double finish(Acc acc, int64_t n) noexcept {
    return static_cast<double>(acc) / static_cast<double>(n);  // 0 / 0 = NaN for empty, as torch
  }
};

// NaN wins, as torch.amax/amin: once the accumulator is NaN no comparison replaces it.
template <class T, bool kMax>
struct Extreme {
  using Acc = compute_t<T>;
  static Acc identity() noexcept {
    using L = std::numeric_limits<Acc>;
    if constexpr (L::has_infinity) {
      return kMax ? -L::infinity() : L::infinity();
    } else {
      return kMax ? L::lowest() : L::max();
    }
  }
  static constexpr bool kIsMax = kMax;  // (extreme_step below, for f32)
  static Acc step(Acc acc, Acc x) noexcept {
    return ((kMax ? x > acc : x < acc) || is_nan(x)) ? x : acc;
  }
  static Acc merge(Acc a, Acc b) noexcept { return step(a, b); }
  static Acc finish(Acc acc, int64_t) noexcept { return acc; }
};

// ---- Loops -----------------------------------------------------------------------------------

inline constexpr int64_t kLanes = 16;  // accumulators per row: a multiple of vector widths

template <class R>
using Lanes = std::array<typename R::Acc, kLanes>;

// Eight f32 values on GCC's vector extension (a ymm register: no wider, for the AVX2 build).
using Floats8 = float __attribute__((vector_size(8 * sizeof(float))));

// A max or min reducer over f32 (or bf16) terms: its select does not vectorise from the scalar
// step at -O2 (the loops compared and branched per term), so its loops take extreme_step.
template <class R>
inline constexpr bool kFloatExtreme = requires {
  R::kIsMax;
}
&&std::is_same_v<typename R::Acc, float>;

// R::step on 8 values of acc (f32) and x at once: the term where it is further out or NaN (NaN
// wins), else acc's value.
template <class R, class T>
void extreme_step(float* __restrict__ acc, const T* __restrict__ x) {
  Floats8 a, v;
  std::memcpy(&a, acc, sizeof a);
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(&v, x, sizeof v);
  } else {
    float values[8];
    for (int j = 0; j < 8; ++j) values[j] = load(x[j]);
    std::memcpy(&v, values, sizeof v);
  }
  const auto take = (R::kIsMax ? v > a : v < a) | (v != v);
  a = take ? v : a;
  std::memcpy(acc, &a, sizeof a);
}

/// Adds groups * kLanes terms of x to the lanes, term j of each group to lane j. The group is
/// unrolled so that the lanes live in vector registers; left to a loop, they stay in memory and
/// every group waits for the previous group's stores.
template <class R, class T>
void add_lane_groups(Lanes<R>& into, const T* __restrict__ x, int64_t groups) {
  if constexpr (kFloatExtreme<R>) {
    Lanes<R> lanes = into;
    for (int64_t g = 0; g < groups; ++g) {
      extreme_step<R>(lanes.data(), x + g * kLanes);
      extreme_step<R>(lanes.data() + 8, x + g * kLanes + 8);
    }
    into = lanes;
    return;
  }
  Lanes<R> lanes = into;
  for (int64_t g = 0; g < groups; ++g) {
#pragma GCC unroll 16
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = R::step(lanes[j], load(x[g * kLanes + j]));
  }
  into = lanes;
}

/// R over a contiguous row: lane j takes the terms at j, j + kLanes, ... of the row's first
/// n - n % kLanes; the lanes merge in order, then the remaining terms follow one by one.
template <class R, class T>
typename R::Acc reduce_row(const T* __restrict__ x, int64_t n) {
  Lanes<R> lanes;
  lanes.fill(R::identity());
  add_lane_groups<R>(lanes, x, n / kLanes);
  typename R::Acc acc = R::identity();
  for (auto lane : lanes) acc = R::merge(acc, lane);
  for (int64_t i = n - n % kLanes; i < n; ++i) acc = R::step(acc, load(x[i]));
  return acc;
}

/// acc[i] = R::step(acc[i], x[i]) for i < w: one more term for each of w column accumulators.
template <class R, class T>
void accumulate_row(typename R::Acc* __restrict__ acc, const T* __restrict__ x, int64_t w) {
  int64_t i = 0;
  if constexpr (kFloatExtreme<R>) {
    for (; i + 8 <= w; i += 8) extreme_step<R>(acc + i, x + i);
  }
  for (; i + kLanes <= w; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) acc[i + j] = R::step(acc[i + j], load(x[i + j]));
  }
  for (; i < w; ++i) acc[i] = R::step(acc[i], load(x[i]));
}

/// Calls run(output, column, w) for runs of whole columns [column, column + w) of each of
/// g.outer outputs' rows (inner > 1), spread over the pool's threads: a run is about inner /
/// threads columns, a multiple of 16. All of a column's rows are in one run, so a run that folds
/// them in order gives one thread's bits.
template <class Run>
void for_column_runs(ComputePool& pool, const Geometry& g, Run&& run) {
  constexpr int64_t kAlign = 16;
  const int64_t threads = pool.threads();
  const int64_t width = ((g.inner + threads - 1) / threads + kAlign - 1) / kAlign * kAlign;
  const int64_t runs = (g.inner + width - 1) / width;
  pool.run(g.outer * runs, [&](int64_t part, int) {
    const int64_t column = part % runs * width;
    run(part / runs, column, std::min(width, g.inner - column));
  });
}

/// A column reduction's rows (inner > 1, one output row, outer == 1) in parts summed apart and
/// merged in part order (R::merge): rows [i * rows, (i + 1) * rows) of `count` parts. The parts
/// depend on the geometry only, so the bits do not depend on the threads; the reduction kernel
/// and a fused chain that ends in the reduction split alike and agree bit for bit. A GPT's bias
/// and layer-norm gradients (4096 rows of 128 to 512 columns) ran on one thread before.
struct RowParts {
  int64_t count = 1, rows = 0;
  [[nodiscard]] int64_t begin(int64_t i, int64_t n) const noexcept { return std::min(n, i * rows); }
  [[nodiscard]] int64_t end(int64_t i, int64_t n) const noexcept {
    return std::min(n, (i + 1) * rows);
  }
};

/// Parts of at least kRowPartTerms terms (smaller ones, an MLP's bias gradients of 64K terms,
/// take longer to hand to another thread than to sum), at most kMaxRowParts, rows a multiple of 16
/// (a part's first term on a vector boundary); one part (no split) for rows wider than
/// kRowPartColumns, which split their columns instead (for_column_runs).
inline constexpr int64_t kRowPartTerms = int64_t{1} << 17;
inline constexpr int64_t kMaxRowParts = 8;
inline constexpr int64_t kRowPartColumns = 4096;

[[nodiscard]] inline RowParts row_parts(const Geometry& g) noexcept {
  if (g.outer != 1 || g.inner <= 1 || g.inner > kRowPartColumns) return {1, g.n};
  const int64_t count = std::min({kMaxRowParts, g.n * g.inner / kRowPartTerms, g.n / 16});
  if (count <= 1) return {1, g.n};
  const int64_t rows = ((g.n + count - 1) / count + 15) / 16 * 16;
  return {(g.n + rows - 1) / rows, rows};
}

/// reduce_row over rows of n terms that arrive in pieces (a fused kernel computes its operand a
/// block at a time): the same lanes take the same terms in the same order, so the result has the
/// same bits.
template <class R, class T>
class RowReducer {
 public:
  explicit RowReducer(int64_t n) noexcept : lanes_end_(n - n % kLanes) { reset(); }

  /// Adds the next m terms of the current row (m <= what the row has left).
  void feed(const T* __restrict__ x, int64_t m) noexcept {
    int64_t i = 0;
    auto add_to_lane = [&] {
      lanes_[at_ % kLanes] = R::step(lanes_[at_ % kLanes], load(x[i]));
      ++i;
      ++at_;
    };
    while (i < m && at_ < lanes_end_ && at_ % kLanes != 0) add_to_lane();  // to a group's start
    const int64_t groups = std::min(m - i, lanes_end_ - at_) / kLanes;
    add_lane_groups<R>(lanes_, x + i, groups);
    i += groups * kLanes;
    at_ += groups * kLanes;
    while (i < m && at_ < lanes_end_) add_to_lane();  // a group the piece ends in
    if (i == m) return;
    merge_lanes();
    for (; i < m; ++i, ++at_) acc_ = R::step(acc_, load(x[i]));
  }

  /// The row's accumulator (all its terms fed); starts the next row.
  typename R::Acc finish_row() noexcept {
    merge_lanes();
    const typename R::Acc acc = acc_;
    reset();
    return acc;
  }

 private:
  void reset() noexcept {
    lanes_.fill(R::identity());
    acc_ = R::identity();
    merged_ = false;
    at_ = 0;
  }
  void merge_lanes() noexcept {
    if (merged_) return;
    for (auto lane : lanes_) acc_ = R::merge(acc_, lane);
    merged_ = true;
  }

  int64_t lanes_end_;  // terms before this position go to the lanes, the rest one by one
  Lanes<R> lanes_;
  typename R::Acc acc_;
  bool merged_ = false;
  int64_t at_ = 0;  // position in the current row
};

// ---- Folds ---------------------------------------------------------------------------------

// How a fused kernel's trailing reduction folds blocks of the chain's values into the output.
template <class T>
class Fold {
 public:
  virtual ~Fold() = default;
  /// Folds the chain's next `len` values (blocks arrive in order).
  virtual void feed(const T* values, int64_t len) = 0;
  /// Merges in the accumulators of `later`, a fold of the row part after this one's.
  virtual void merge(const Fold& later) = 0;
  /// Writes the results.
  virtual void store(T* out) = 0;
};

// The reduction kernel's loops (reduce.cpp) on values that arrive a block at a time: rows of
// contiguous terms through a RowReducer, columns into one accumulator per output.
template <class R, class T>
class FoldInto final : public Fold<T> {
 public:
  // `g` the geometry of the rows this fold takes, `total_rows` of all the parts' rows.
  FoldInto(const Geometry& g, int64_t total_rows)
      : g_(g),
        total_rows_(total_rows),
        acc_(static_cast<std::size_t>(g.outer * g.inner), R::identity()),
        row_(g.n) {}

  void feed(const T* x, int64_t len) override {
    while (len > 0) {
      if (g_.inner == 1) {
        const int64_t m = std::min(len, g_.n - term_);
        row_.feed(x, m);
        x += m;
        len -= m;
        term_ += m;
        if (term_ == g_.n) {
          acc_[static_cast<std::size_t>(output_++)] = row_.finish_row();
          term_ = 0;
        }
      } else {
        const int64_t w = std::min(len, g_.inner - column_);
        accumulate_row<R>(acc_.data() + output_ * g_.inner + column_, x, w);
        x += w;
        len -= w;
        column_ += w;
        if (column_ == g_.inner) {
          column_ = 0;
          if (++term_ == g_.n) {
            term_ = 0;
            ++output_;
          }
        }
      }
    }
  }

  void merge(const Fold<T>& later) override {
    const auto& other = static_cast<const FoldInto&>(later);
    for (std::size_t i = 0; i < acc_.size(); ++i) acc_[i] = R::merge(acc_[i], other.acc_[i]);
  }

  void store(T* out) override {
    for (std::size_t i = 0; i < acc_.size(); ++i) {
      out[i] = cpu::store<T>(R::finish(acc_[i], total_rows_));
    }
  }

 private:
  Geometry g_;
  int64_t total_rows_;
  std::vector<typename R::Acc> acc_;
  RowReducer<R, T> row_;
  int64_t output_ = 0;  // where the next value goes: output (o) ...
  int64_t term_ = 0;    // ... its term (r) ...
  int64_t column_ = 0;  // ... and, with inner > 1, column (i)
};

// A StridedRows reduction (above) of the rows [first_row, first_row + rows) on values that
// arrive a block at a time: the runs of those rows in each of the `runs` spans, in order. Each
// row has a RowReducer of its own, fed its runs in order, so each output gets the reduction
// kernel's bits; the outputs of separate folds are separate rows (merge adds nothing).
template <class R, class T>
class FoldStridedRows final : public Fold<T> {
 public:
  FoldStridedRows(const StridedRows& s, int64_t first_row, int64_t rows)
      : first_row_(first_row),
        run_(s.run),
        terms_(s.runs * s.run),
        reducers_(static_cast<std::size_t>(rows), RowReducer<R, T>(s.runs * s.run)) {}

  void feed(const T* x, int64_t len) override {
    while (len > 0) {
      const int64_t m = std::min(len, run_ - term_);
      reducers_[static_cast<std::size_t>(row_)].feed(x, m);
      x += m;
      len -= m;
      term_ += m;
      if (term_ == run_) {
        term_ = 0;
        if (++row_ == static_cast<int64_t>(reducers_.size())) row_ = 0;  // the next span
      }
    }
  }

  void merge(const Fold<T>&) override {}

  void store(T* out) override {
    for (std::size_t j = 0; j < reducers_.size(); ++j) {
      out[first_row_ + static_cast<int64_t>(j)] =
          cpu::store<T>(R::finish(reducers_[j].finish_row(), terms_));
    }
  }

 private:
  int64_t first_row_, run_, terms_;
  std::vector<RowReducer<R, T>> reducers_;
  int64_t row_ = 0;   // the row the next value belongs to ...
  int64_t term_ = 0;  // ... and its place in that row's current run
};

}  // namespace axle::cpu
