// backends/cpu: kLayerNorm and kLayerNormBackward, layer_norm's normalisation and its gradient a
// row at a time (the row's statistics stay in registers; written as reductions and elementwise
// ops they cost eight kernels and as many passes over the activation). A row's sums run in double
// on four chains of four lanes, two passes (the mean, then the centred squares), so a long row is
// summed as carefully as a short one; each row is one thread's, so every thread count gives the
// same bits. A backward call may fold the affine weight's product into its incoming gradient
// and the residual gradient's add into its result (executable.h), with the bits of those ops.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/layer_norm_rows.h"

namespace axle::cpu {
namespace {

using layer_norm_detail::normalize_row;
using layer_norm_detail::normalize_row_backward;

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

// The f32 row loops compiled for the widest instruction set the processor has (the same bits on
// each: layer_norm_rows.h).
struct F32Rows {
  decltype(&layer_norm_detail::normalize_rows<float>) normalize;
  decltype(&layer_norm_detail::normalize_rows_backward<float>) backward;
};

F32Rows f32_rows() {
#if defined(AXLE_HAVE_AVX512_KERNELS)
  if (cpu_isa() >= CpuIsa::kAvx512) {
    return {&avx512_normalize_rows, &avx512_normalize_rows_backward};
  }
#endif
  return {&layer_norm_detail::normalize_rows<float>,
          &layer_norm_detail::normalize_rows_backward<float>};
}

void layer_norm_kernel(const KernelArgs& args) {
  const Rows rows = rows_of(args, 1, 1);
  if (args.output.desc->dtype == DType::kFloat32) {
    const auto normalize = f32_rows().normalize;
    const float* x = args.inputs[0].as<float>();
    float* y = args.output.as<float>();
    return parallel_for(args.pool, rows.count, rows.grain(), [&](int64_t first, int64_t last, int) {
      normalize(x, y, first, last, rows.width, rows.eps);
    });
  }
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
  if (args.output.desc->dtype == DType::kFloat32) {
    const auto backward = f32_rows().backward;
    const float* g = args.inputs[0].as<float>();
    const float* x = args.inputs[1].as<float>();
    const float* w = weighted ? args.inputs[2].as<float>() : nullptr;
    const float* r = residual ? args.inputs[operands - 1].as<float>() : nullptr;
    float* out = args.output.as<float>();
    return parallel_for(args.pool, rows.count, rows.grain(), [&](int64_t first, int64_t last, int) {
      // The weighted gradient a row at a time, as the mul's own kernel rounds it.
      float* weighted_row = w ? thread_floats(0, static_cast<std::size_t>(rows.width)) : nullptr;
      backward(g, w, x, r, out, first, last, rows.width, rows.eps, weighted_row);
    });
  }
  // In f32 the product and the sum each round to float between double-precision steps, so no
  // contraction into an fma can change their bits (in f64 one could).
  if (folded != 0) {
    throw std::invalid_argument(fmt::format("layer_norm_backward: folded operands are f32, not {}",
                                            dtype_name(args.output.desc->dtype)));
  }
  for_rows<2>(args, rows, [&](const auto* g, const auto* x, auto* dx) {
    using C = std::remove_cvref_t<decltype(*x)>;
    normalize_row_backward(g, x, static_cast<const C*>(nullptr), dx, rows.width, rows.eps);
  });
}

}  // namespace

void register_layer_norm_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kLayerNorm, &layer_norm_kernel);
  set_kernel(table, Kernel::kLayerNormBackward, &layer_norm_backward_kernel);
}

}  // namespace axle::cpu
