// backends/cpu: fused kernels (kFused). A chain of elementwise steps runs over its shape a block
// at a time, so its intermediates live in a few L1-sized scratch buffers instead of making a
// round trip through memory per op; a trailing reduction folds each block of the chain's result
// into its accumulators, so that result is never stored at all. Each step computes exactly what
// the unfused kernel computes (the same scalar code or the same Eigen expressions, over blocks
// that start on the same vector boundaries), and the reduction adds the same terms in the same
// order as the reduction kernel (reducer.h), so fusing never changes a result's bits. bf16 chains
// compute in f32 as the unfused bf16 kernels do, each step's block rounded to bf16 as those
// kernels round their outputs (a chain with a reduction stays unfused in bf16). The step list is
// read and checked in fused_steps.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/float_math.h"
#include "axle/backends/cpu/fused_steps.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/reducer.h"

namespace axle::cpu {
namespace {

// An operand as a step reads it: a block of values, or one value standing for all of them.
template <class T>
struct Operand {
  const T* data;
  bool scalar;
  [[nodiscard]] T at(int64_t i) const noexcept { return scalar ? data[0] : data[i]; }
};

template <class T>
using Array = Eigen::Array<T, Eigen::Dynamic, 1>;

// dst[i] = op(a[i], b[i]) in fixed groups of 16, each computed into a local array before it is
// stored: GCC at -O2 vectorises only loops whose trip count it knows and that cannot alias, and
// dst may be a or b here (steps write in place).
template <bool kScalarA, bool kScalarB, class T, class Op>
void binary_elementwise(const T* a, const T* b, T* dst, int64_t len, Op op) {
  auto x = [&](int64_t i) { return kScalarA ? a[0] : a[i]; };
  auto y = [&](int64_t i) { return kScalarB ? b[0] : b[i]; };
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= len; i += kGroup) {
    T result[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) result[j] = op(x(i + j), y(i + j));
    for (int64_t j = 0; j < kGroup; ++j) dst[i + j] = result[j];
  }
  for (; i < len; ++i) dst[i] = op(x(i), y(i));
}

template <class T, class Op>
void binary_elementwise(Operand<T> a, Operand<T> b, T* dst, int64_t len, Op op) {
  if (a.scalar) {
    binary_elementwise<true, false>(a.data, b.data, dst, len, op);
  } else if (b.scalar) {
    binary_elementwise<false, true>(a.data, b.data, dst, len, op);
  } else {
    binary_elementwise<false, false>(a.data, b.data, dst, len, op);
  }
}

// o = f(a, b) as an Eigen expression, a scalar operand taken as a scalar (the same IEEE
// operation per element as the unfused kernel's loop).
template <class T, class F>
void binary_expression(Operand<T> a, Operand<T> b, T* dst, int64_t len, F f) {
  Eigen::Map<Array<T>> o(dst, len);
  const Eigen::Map<const Array<T>> x(a.data, a.scalar ? 1 : len), y(b.data, b.scalar ? 1 : len);
  if (a.scalar) {
    f(o, a.data[0], y);
  } else if (b.scalar) {
    f(o, x, b.data[0]);
  } else {
    f(o, x, y);
  }
}

// A reduction's folds: one per part, each taking `part_size` of the chain's elements (the last
// fewer) from each of `spans` spans of `extent` elements. Row parts (reducer.h's row_parts) take
// one span, the whole chain, and merge in part order; a per-channel statistic's (StridedRows)
// parts take their rows' runs in every span and store their own outputs.
template <class T>
struct Folds {
  std::vector<std::unique_ptr<Fold<T>>> parts;
  int64_t part_size = 0;
  int64_t spans = 1, extent = 0;
  bool own_outputs = false;
};

// Rows per part of a StridedRows reduction, or 0 for one part taking the chain in order. A part's
// runs must start and end on multiples of 16 elements, where the unfused kernels' vectors do
// (an approximated step's last bit depends on its place in a vector): every run does when runs
// are multiples of 16 elements, every 16th row's when there are a multiple of 16 rows.
int64_t strided_part_rows(const StridedRows& s) {
  const int64_t align = s.run % 16 == 0 ? 1 : s.rows % 16 == 0 ? 16 : 0;
  if (align == 0 || s.rows * s.runs * s.run < kParallelStridedTerms) return 0;
  const int64_t parts = std::min<int64_t>(kMaxRowParts, s.rows / align);
  if (parts <= 1) return 0;
  return ((s.rows + parts - 1) / parts + align - 1) / align * align;
}

template <class R, class T>
Folds<T> strided_folds(const StridedRows& s) {
  Folds<T> folds;
  folds.own_outputs = true;
  const int64_t part_rows = strided_part_rows(s);
  if (part_rows == 0) {
    folds.parts.push_back(std::make_unique<FoldStridedRows<R, T>>(s, 0, s.rows));
    folds.extent = folds.part_size = s.runs * s.rows * s.run;
    return folds;
  }
  for (int64_t first = 0; first < s.rows; first += part_rows) {
    folds.parts.push_back(
        std::make_unique<FoldStridedRows<R, T>>(s, first, std::min(part_rows, s.rows - first)));
  }
  folds.spans = s.runs;
  folds.extent = s.rows * s.run;
  folds.part_size = part_rows * s.run;
  return folds;
}

template <class T>
Folds<T> make_folds(const FusedReduction& r, const Shape& out) {
  const std::string name = fmt::format("fused: {}", kernel_name(r.kernel));
  const ReducePlan plan = plan_reduction(name, r.shape, r.dims, r.keepdim, out);
  const std::optional<StridedRows> strided = strided_rows(plan);
  if (plan.gather && !strided) {
    fused_malformed(fmt::format("{} over dims {} of {}: the reduced dims are not adjacent",
                                kernel_name(r.kernel), fmt::join(r.dims, ","),
                                r.shape.to_string()));
  }
  const Geometry& g = plan.geometry;
  if ((r.kernel == Kernel::kReduceMax || r.kernel == Kernel::kReduceMin) && g.n == 0) {
    fused_malformed(
        fmt::format("{}: cannot reduce {} over a dim of size 0 (max and min have no identity)",
                    kernel_name(r.kernel), r.shape.to_string()));
  }
  const RowParts parts = row_parts(g);
  Folds<T> folds{{}, parts.count == 1 ? g.outer * g.n * g.inner : parts.rows * g.inner};
  folds.extent = g.outer * g.n * g.inner;
  auto fold_parts = [&]<class R>(R) {
    if (strided) return strided_folds<R, T>(*strided);
    for (int64_t p = 0; p < parts.count; ++p) {
      const Geometry rows{g.outer, parts.end(p, g.n) - parts.begin(p, g.n), g.inner};
      folds.parts.push_back(std::make_unique<FoldInto<R, T>>(rows, g.n));
    }
    return std::move(folds);
  };
  switch (r.kernel) {
    case Kernel::kSum:
      return fold_parts(Sum<T>{});
    case Kernel::kMean:
      return fold_parts(Mean<T>{});
    case Kernel::kReduceMax:
      return fold_parts(Extreme<T, true>{});
    default:
      return fold_parts(Extreme<T, false>{});
  }
}

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// T is the storage type (float, double or Bf16); the chain computes in C = compute_t<T>.
template <class T>
class FusedRun {
 public:
  using C = compute_t<T>;
  static constexpr bool kNarrow = !std::is_same_v<T, C>;  // bf16: stored rounded
  static constexpr int64_t kBlock = 4096 / sizeof(C);     // a multiple of every vector width
  // Scratch blocks sit a cache line more than a block apart: at exactly 4 KiB apart, a step
  // reading one block and writing another would hit the same 4 KiB offsets, which the CPU
  // mistakes for a store it must forward (4K aliasing) on every access.
  static constexpr int64_t kStride = kBlock + 64 / sizeof(C);

  // With `narrowed_output`, the chain (f32) ends in a cast: its result is rounded to the bf16
  // output as it is stored.
  FusedRun(const KernelArgs& args, FusedSteps fused, bool narrowed_output = false)
      : args_(args),
        fused_(std::move(fused)),
        shape_(fused_.reduction ? fused_.reduction->shape : args.output.desc->shape),
        narrowed_output_(narrowed_output) {
    const DType chain = narrowed_output ? DType::kFloat32 : args.output.desc->dtype;
    const std::size_t external = args.inputs.size();
    // A one-element operand of a binary step is read as a scalar; one read by a unary step or
    // the reduction, or with another one-element operand, is spread over a block of scratch.
    auto one_element = [&](int32_t operand) {
      if (operand < 0) return false;
      const Shape& shape = args.inputs[static_cast<std::size_t>(operand)].desc->shape;
      return shape.numel() == 1 && !(shape == shape_);
    };
    std::vector<bool> spread(external, false);
    auto spread_external = [&](int32_t operand) {
      if (operand >= 0) spread[static_cast<std::size_t>(operand)] = true;
    };
    for (const FusedStep& step : fused_.steps) {
      if (fused_step_arity(step.kernel) == 1) {
        spread_external(step.a);
      } else if (step.kernel == Kernel::kGeluBackward) {  // reads whole blocks
        spread_external(step.a);
        spread_external(step.b);
      } else if (one_element(step.a) && one_element(step.b)) {
        spread_external(step.a);
        spread_external(step.b);
      }
    }
    if (fused_.reduction) spread_external(fused_.reduction->a);
    // Scratch: one block per buffer, one per spread or gathered operand; 64-byte aligned, so
    // blocks start on the same vector boundaries as the unfused kernels' (whose buffers are too).
    std::size_t blocks = static_cast<std::size_t>(fused_.buffers);
    kinds_.resize(external);
    views_.resize(external);
    slot_of_.resize(external);
    for (std::size_t e = 0; e < external; ++e) {
      const BufferDesc& desc = *args.inputs[e].desc;
      if (desc.dtype != chain) {
        fused_malformed(fmt::format("operand {} is {}, the chain {}", e, dtype_name(desc.dtype),
                                    dtype_name(chain)));
      }
      if (!broadcasts_to(desc.shape, shape_)) {
        fused_malformed(fmt::format("operand {} {} does not broadcast to {}", e,
                                    desc.shape.to_string(), shape_.to_string()));
      }
      if (desc.shape == shape_) {
        kinds_[e] = Kind::kSame;
        if (kNarrow) slot_of_[e] = blocks++;  // widened a block at a time
      } else if (desc.shape.numel() == 1) {
        kinds_[e] = spread[e] ? Kind::kSplat : Kind::kScalar;
        if (spread[e]) slot_of_[e] = blocks++;
      } else {
        kinds_[e] = Kind::kGather;
        views_[e] = GatherView::of(broadcast_strides(desc.shape, shape_), shape_);
        slot_of_[e] = blocks++;
      }
    }
    if (kNarrow || narrowed_output_) {
      if (fused_.reduction) fused_malformed("a chain with a bf16 output cannot end in a reduction");
      output_slot_ = blocks++;  // the chain's result, rounded into the output
    }
    if (kNarrow) {
      scalars_.resize(external);
      for (std::size_t e = 0; e < external; ++e) {
        if (kinds_[e] == Kind::kScalar) scalars_[e] = load(args.inputs[e].as<T>()[0]);
      }
    } else if (fused_.reduction) {
      folds_ = make_folds<C>(*fused_.reduction, args.output.desc->shape);
    }
    // Without a reduction, blocks are independent and large chains spread them over the pool's
    // threads, each with scratch blocks of its own; so are a reduction's row parts.
    const int64_t n = shape_.numel();
    ComputePool& pool = args.pool;
    if (folds_.parts.size() != 1 && pool.threads() > 1 && n >= kParallelElements) pool_ = &pool;
    blocks_per_thread_ = std::max<std::size_t>(1, blocks);
    const std::size_t threads = pool_ ? static_cast<std::size_t>(pool.threads()) : 1;
    scratch_.reset(static_cast<C*>(
        std::aligned_alloc(64, threads * blocks_per_thread_ * kStride * sizeof(C))));
    if (!scratch_) throw std::bad_alloc();
    for (std::size_t t = 0; t < threads; ++t) {
      for (std::size_t e = 0; e < external; ++e) {
        if (kinds_[e] == Kind::kSplat) {
          std::fill_n(block(slot_of_[e], static_cast<int>(t)), kBlock,
                      load(args.inputs[e].as<T>()[0]));
        }
      }
    }
  }

  void run() {
    const int64_t n = shape_.numel();
    if (folds_.parts.empty()) {
      // Each block computes the same bits whichever thread runs it.
      constexpr int64_t kBlocksPerPart = kParallelElements / 4 / kBlock + 1;
      const int64_t blocks = (n + kBlock - 1) / kBlock;
      auto run_range = [&](int64_t first, int64_t last, int thread) {
        run_elements(first * kBlock, std::min(n, last * kBlock), thread, nullptr);
      };
      if (pool_) return parallel_for(*pool_, blocks, kBlocksPerPart, run_range);
      return run_range(0, blocks, 0);
    }
    // A row part's terms start on a multiple of 16 elements: blocks start on vector boundaries.
    const auto& folds = folds_.parts;
    const auto parts = static_cast<int64_t>(folds.size());
    auto run_part = [&](int64_t p, int thread) {
      const int64_t size = folds_.part_size, extent = folds_.extent;
      for (int64_t span = 0; span < folds_.spans; ++span) {
        run_elements(span * extent + p * size, span * extent + std::min(extent, (p + 1) * size),
                     thread, folds[p].get());
      }
    };
    if (pool_) {
      pool_->run(parts, run_part);
    } else {
      for (int64_t p = 0; p < parts; ++p) run_part(p, 0);
    }
    if constexpr (!kNarrow) {
      if (folds_.own_outputs) {
        for (const auto& fold : folds) fold->store(args_.output.as<T>());
        return;
      }
      for (int64_t p = 1; p < parts; ++p) folds[0]->merge(*folds[p]);
      folds[0]->store(args_.output.as<T>());
    }
  }

 private:
  enum class Kind : uint8_t { kSame, kScalar, kSplat, kGather };

  // A broadcast operand's strides over the chain's dims, with neighbouring dims merged where
  // the outer one continues the inner one (two broadcast dims, or two contiguous ones), so that
  // a gather copies or repeats whole runs: a channel bias [1, C, 1, 1] over [N, C, H, W] becomes
  // runs of H * W copies of one value.
  struct GatherView {
    int rank = 0;
    std::array<int64_t, Shape::kMaxRank> extent{}, stride{};

    static GatherView of(const std::array<int64_t, Shape::kMaxRank>& strides, const Shape& shape) {
      // Built innermost first, then reversed into the chain's order.
      GatherView v;
      int64_t inner_extent = 1, inner_stride = 0;
      for (int d = shape.rank() - 1; d >= 0; --d) {
        const int64_t s = strides[static_cast<std::size_t>(d)];
        if (shape[d] == 1) continue;
        if (inner_extent == 1) {
          inner_stride = s;
        } else if (s != inner_stride * inner_extent) {
          v.push(inner_extent, inner_stride);
          inner_extent = 1;
          inner_stride = s;
        }
        inner_extent *= shape[d];
      }
      v.push(inner_extent, inner_stride);
      std::reverse(v.extent.begin(), v.extent.begin() + v.rank);
      std::reverse(v.stride.begin(), v.stride.begin() + v.rank);
      return v;
    }

   private:
    void push(int64_t e, int64_t s) {
      extent[static_cast<std::size_t>(rank)] = e;
      stride[static_cast<std::size_t>(rank++)] = s;
    }
  };

  // Chains smaller than this run on one thread (see elementwise.cpp).
  static constexpr int64_t kParallelElements = int64_t{1} << 15;

  // The chain's elements [first, last), in blocks from first, folded into `fold` if not null.
  void run_elements(int64_t first, int64_t last, int thread, Fold<C>* fold) {
    T* out = narrowed_output_ ? nullptr : args_.output.as<T>();
    // Operands of one block; a chain has few, so they stay on the stack.
    constexpr std::size_t kOnStack = 16;
    const C* on_stack[kOnStack];
    std::vector<const C*> on_heap(args_.inputs.size() > kOnStack ? args_.inputs.size() : 0);
    const C** operand = on_heap.empty() ? on_stack : on_heap.data();
    for (int64_t start = first; start < last; start += kBlock) {
      const int64_t len = std::min(kBlock, last - start);
      for (std::size_t e = 0; e < args_.inputs.size(); ++e) {
        operand[e] = read(e, start, len, thread);
      }
      for (const FusedStep& step : fused_.steps) {
        C* dst = step.destination >= 0         ? block(step.destination, thread)
                 : kNarrow || narrowed_output_ ? block(output_slot_, thread)
                                               : reinterpret_cast<C*>(out) + start;
        apply(step, resolve(step.a, operand, thread), resolve(step.b, operand, thread), dst, len);
        if constexpr (kNarrow) round_to_bf16(dst, len);
      }
      if constexpr (kNarrow) {
        narrow_block(block(output_slot_, thread), out + start, len);
      } else if (narrowed_output_) {
        if constexpr (std::is_same_v<C, float>) {
          narrow_block(block(output_slot_, thread), args_.output.as<Bf16>() + start, len);
        }
      } else if (fold) {
        fold->feed(resolve(fused_.reduction->a, operand, thread).data, len);
      }
    }
  }

  C* block(std::size_t i, int thread) {
    return scratch_.get() + (static_cast<std::size_t>(thread) * blocks_per_thread_ + i) * kStride;
  }

  Operand<C> resolve(int32_t ref, const C* const* operand, int thread) {
    if (ref < 0) return {block(static_cast<std::size_t>(-ref - 1), thread), false};
    return {operand[static_cast<std::size_t>(ref)],
            kinds_[static_cast<std::size_t>(ref)] == Kind::kScalar};
  }

  // Operand e's values for elements [start, start + len), contiguous (its one value if scalar).
  const C* read(std::size_t e, int64_t start, int64_t len, int thread) {
    const T* data = args_.inputs[e].as<T>();
    switch (kinds_[e]) {
      case Kind::kSame:
        if constexpr (kNarrow) {
          C* buffer = block(slot_of_[e], thread);
          widen_block(data + start, buffer, len);
          return buffer;
        } else {
          return data + start;
        }
      case Kind::kScalar:
        if constexpr (kNarrow) {
          return &scalars_[e];
        } else {
          return data;
        }
      case Kind::kSplat:
        return block(slot_of_[e], thread);
      case Kind::kGather:
        break;
    }
    const GatherView& v = views_[e];
    const int last = v.rank - 1;
    int64_t index[Shape::kMaxRank];
    int64_t offset = 0;
    int64_t rest = start;
    for (int d = last; d >= 0; --d) {
      index[d] = rest % v.extent[d];
      rest /= v.extent[d];
      offset += index[d] * v.stride[d];
    }
    C* buffer = block(slot_of_[e], thread);
    const int64_t inner = v.extent[last], step = v.stride[last];
    for (int64_t i = 0; i < len;) {
      // The rest of the innermost run, repeated, copied or strided.
      const int64_t run = std::min(inner - index[last], len - i);
      if (step == 0) {
        fill_values(buffer + i, run, load(data[offset]));
      } else if (step == 1) {
        if constexpr (kNarrow) {
          widen_block(data + offset, buffer + i, run);
        } else {
          std::copy_n(data + offset, run, buffer + i);
        }
      } else {
        for (int64_t k = 0; k < run; ++k) buffer[i + k] = load(data[offset + k * step]);
      }
      i += run;
      if (i == len) break;
      offset -= index[last] * step;
      index[last] = 0;
      for (int d = last - 1; d >= 0; --d) {  // next run, carrying into outer dims
        offset += v.stride[d];
        if (++index[d] < v.extent[d]) break;
        offset -= index[d] * v.stride[d];
        index[d] = 0;
      }
    }
    return buffer;
  }

  static void apply(const FusedStep& step, Operand<C> a, Operand<C> b, C* dst, int64_t len) {
    if constexpr (std::is_same_v<C, float>) {
      // As the unfused kernel computes them (elementwise.cpp).
      if (const auto f = vector_function(step.kernel, step.tanh_form)) {
        return map_f32(*f, a.data, dst, len);
      }
    }
    const Eigen::Map<const Array<C>> x(a.data, len);  // unary steps: never a scalar
    Eigen::Map<Array<C>> o(dst, len);
    switch (step.kernel) {
      case Kernel::kAdd:
        binary_expression(a, b, dst, len, [](auto& r, const auto& p, const auto& q) { r = p + q; });
        return;
      case Kernel::kSub:
        binary_expression(a, b, dst, len, [](auto& r, const auto& p, const auto& q) { r = p - q; });
        return;
      case Kernel::kMul:
        binary_expression(a, b, dst, len, [](auto& r, const auto& p, const auto& q) { r = p * q; });
        return;
      case Kernel::kDiv:
        binary_expression(a, b, dst, len, [](auto& r, const auto& p, const auto& q) { r = p / q; });
        return;
      case Kernel::kPow:
        // As the unfused kernel: a square is one product.
        if (b.scalar && !a.scalar && b.data[0] == C(2)) {
          o = x * x;
          return;
        }
        for (int64_t i = 0; i < len; ++i) {
          const C p = a.at(i), q = b.at(i);
          dst[i] = q == C(2) ? p * p : std::pow(p, q);
        }
        return;
      case Kernel::kMaximum:
        // NaN propagates, as in the unfused kernel.
        binary_elementwise(a, b, dst, len, [](C p, C q) { return (p > q || p != p) ? p : q; });
        return;
      case Kernel::kMinimum:
        binary_elementwise(a, b, dst, len, [](C p, C q) { return (p < q || p != p) ? p : q; });
        return;
      case Kernel::kGeluBackward:
        gelu_backward_values(a.data, b.data, dst, len, step.tanh_form);
        return;
      case Kernel::kNeg:
        o = -x;
        return;
      case Kernel::kAbs:
        o = x.abs();
        return;
      case Kernel::kRelu:
        binary_elementwise(a, a, dst, len, [](C p, C) { return p < C(0) ? C(0) : p; });
        return;
#define AXLE_FUSED_FLOAT_FUNCTION(name, str) \
  case Kernel::k##name:                      \
    o = transcendental<Kernel::k##name>(x);  \
    return;
        AXLE_FLOAT_FUNCTIONS(AXLE_FUSED_FLOAT_FUNCTION)
#undef AXLE_FUSED_FLOAT_FUNCTION
      case Kernel::kGelu:
        if (step.tanh_form) {
          o = gelu_tanh(x);
        } else {
          o = gelu_erf(x);
        }
        return;
      default:
        fused_malformed(fmt::format("{} is not fusible", kernel_name(step.kernel)));
    }
  }

  const KernelArgs& args_;
  FusedSteps fused_;
  const Shape& shape_;    // the chain's
  bool narrowed_output_;  // f32 chain, bf16 output (a cast ends the chain)
  std::vector<Kind> kinds_;
  std::vector<GatherView> views_;
  std::vector<std::size_t> slot_of_;  // scratch block of each spread, gathered or widened operand
  std::vector<C> scalars_;            // bf16: one-element operands, widened
  std::size_t output_slot_ = 0;       // bf16: the block the chain's result is rounded from
  std::unique_ptr<C[], FreeDeleter> scratch_;
  std::size_t blocks_per_thread_ = 1;
  Folds<C> folds_;               // a reduction's
  ComputePool* pool_ = nullptr;  // set when the blocks or row parts are spread over threads
};

void fused_kernel(const KernelArgs& args) {
  FusedSteps steps = parse_fused_steps(args);
  switch (args.output.desc->dtype) {
    case DType::kFloat32:
      FusedRun<float>(args, std::move(steps)).run();
      return;
    case DType::kFloat64:
      FusedRun<double>(args, std::move(steps)).run();
      return;
    case DType::kBFloat16:
      // f32 operands: an f32 chain that a cast to bf16 ends.
      if (!args.inputs.empty() && args.inputs[0].desc->dtype == DType::kFloat32) {
        FusedRun<float>(args, std::move(steps), true).run();
      } else {
        FusedRun<Bf16>(args, std::move(steps)).run();
      }
      return;
    default:
      fused_malformed(
          fmt::format("{} output (f32, f64 and bf16 fuse)", dtype_name(args.output.desc->dtype)));
  }
}

}  // namespace

void register_fused_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kFused, &fused_kernel);
}

}  // namespace axle::cpu
