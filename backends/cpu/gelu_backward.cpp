// backends/cpu: kGeluBackward, gelu's derivative times the incoming gradient in one pass (the
// derivative written out as elementwise ops would read and write the activation a dozen times,
// and round a bf16 value at each of them).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/float_math.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

// Elements per part and per bf16 chunk: parts start on multiples of it, so that each element
// takes the same vector lane position (and bits) whatever the thread count.
constexpr int64_t kChunk = 1024;

void gelu_backward_kernel(const KernelArgs& args) {
  if (args.inputs.size() != 2) {
    throw std::invalid_argument(
        fmt::format("gelu_backward takes [grad, x], got {} operands", args.inputs.size()));
  }
  const BufferDesc& out = *args.output.desc;
  for (std::size_t i = 0; i < 2; ++i) {
    const BufferDesc& in = *args.inputs[i].desc;
    check_dtype(args, i == 0 ? "grad" : "x", in.dtype, out.dtype);
    if (!(in.shape == out.shape)) {
      throw std::invalid_argument(fmt::format("gelu_backward: {} is {}, the output {}",
                                              i == 0 ? "grad" : "x", in.shape.to_string(),
                                              out.shape.to_string()));
    }
  }
  const bool tanh_form = !args.call.ints.empty() && args.call.ints[0] != 0;
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsFloat<T>) {
      unsupported(Kernel::kGeluBackward, out.dtype);
    } else {
      const T* g = args.inputs[0].as<T>();
      const T* x = args.inputs[1].as<T>();
      T* o = args.output.as<T>();
      parallel_for(
          args.pool, out.shape.numel(), 8 * kChunk,
          [&](int64_t begin, int64_t end, int) {
            if constexpr (std::is_same_v<T, Bf16>) {
              if (!tanh_form) {
                return gelu_backward_bf16(&g[begin].bits, &x[begin].bits, &o[begin].bits,
                                          end - begin);
              }
              alignas(64) float grad[kChunk], at[kChunk];
              for (int64_t i = begin; i < end; i += kChunk) {
                const int64_t m = std::min(kChunk, end - i);
                widen_block(g + i, grad, m);
                widen_block(x + i, at, m);
                gelu_backward_values(grad, at, grad, m, tanh_form);
                narrow_block(grad, o + i, m);
              }
            } else {
              gelu_backward_values(g + begin, x + begin, o + begin, end - begin, tanh_form);
            }
          },
          kChunk);
    }
  });
}

}  // namespace

void register_gelu_backward_kernel(KernelTable& table) {
  set_kernel(table, Kernel::kGeluBackward, &gelu_backward_kernel);
}

}  // namespace axle::cpu
