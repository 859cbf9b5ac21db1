// backends/cpu: how CPU kernels are called. One kernel family per file (elementwise.cpp,
// reduce.cpp, ...); each registers its functions in the table the CPU backend dispatches on.
#pragma once

#include <array>
#include <span>

#include "axle/backends/executable.h"
#include "axle/engine/device_memory.h"

namespace axle::cpu {

class ComputePool;

/// A buffer as a kernel sees it: contiguous row-major data of `desc`.
struct ConstView {
  const void* data;
  const BufferDesc* desc;
  template <class T>
  [[nodiscard]] const T* as() const noexcept {
    return static_cast<const T*>(data);
  }
};
struct View {
  void* data;
  const BufferDesc* desc;
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(data);
  }
};

/// Everything one kernel call needs. The output buffer is uninitialised and aliases no input,
/// except where the memory plan writes in place: then it is an input of the output's shape and
/// dtype, for kernels that read each element before writing it (see actors/compiler/memory_plan.h).
struct KernelArgs {
  const KernelCall& call;
  std::span<const ConstView> inputs;
  View output;
  /// The device's compute threads, which large kernels split their work over (a one-thread
  /// pool runs the kernel on the calling thread alone).
  ComputePool& pool;
};

/// Whether `in` broadcasts to `out` as in NumPy: dims align at the end, and each is 1 or equal.
[[nodiscard]] inline bool broadcasts_to(const Shape& in, const Shape& out) noexcept {
  if (in.rank() > out.rank()) return false;
  for (int d = in.rank() - 1, o = out.rank() - 1; d >= 0; --d, --o) {
    if (in[d] != 1 && in[d] != out[o]) return false;
  }
  return true;
}

/// Strides (elements) of contiguous `in` along each of `out`'s dims when broadcast to it: 0 where
/// it repeats.
[[nodiscard]] inline std::array<int64_t, Shape::kMaxRank> broadcast_strides(
    const Shape& in, const Shape& out) noexcept {
  std::array<int64_t, Shape::kMaxRank> strides{};
  int64_t stride = 1;
  for (int d = in.rank() - 1, o = out.rank() - 1; d >= 0; --d, --o) {
    if (in[d] != 1) strides[static_cast<std::size_t>(o)] = stride;
    stride *= in[d];
  }
  return strides;
}

using KernelFn = void (*)(const KernelArgs&);
using KernelTable = std::array<KernelFn, static_cast<std::size_t>(Kernel::kCount)>;

inline void set_kernel(KernelTable& table, Kernel k, KernelFn fn) {
  table[static_cast<std::size_t>(k)] = fn;
}

void register_elementwise_kernels(KernelTable& table);
void register_reduce_kernels(KernelTable& table);
void register_linalg_kernels(KernelTable& table);
void register_conv_kernels(KernelTable& table);
void register_pooling_kernels(KernelTable& table);
void register_data_movement_kernels(KernelTable& table);
void register_random_kernels(KernelTable& table);
void register_fused_kernels(KernelTable& table);
void register_scatter_kernels(KernelTable& table);
void register_scan_kernels(KernelTable& table);
void register_topk_kernels(KernelTable& table);
void register_attention_kernels(KernelTable& table);
void register_gelu_backward_kernel(KernelTable& table);
void register_layer_norm_kernels(KernelTable& table);
void register_conv_transpose_kernel(KernelTable& table);

/// One member's part of a collective call (see Backend::collective).
void run_collective(const KernelCall& call, const BufferDesc& operand, const BufferDesc& result,
                    std::span<DeviceMemory* const> operands, int position, DeviceMemory& output);

/// The table with every family registered (built once).
const KernelTable& kernel_table();

}  // namespace axle::cpu
