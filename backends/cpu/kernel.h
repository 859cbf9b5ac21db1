// backends/cpu: how CPU kernels are called. One kernel family per file (elementwise.cpp,
// reduce.cpp, ...); each registers its functions in the table the CPU backend dispatches on.
#pragma once

#include <array>
#include <span>

#include "backends/executable.h"

namespace axle::cpu {

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
/// dtype, for kernels that read each element before writing it (see actors/memory_plan.h).
struct KernelArgs {
  const KernelCall& call;
  std::span<const ConstView> inputs;
  View output;
};

using KernelFn = void (*)(const KernelArgs&);
using KernelTable = std::array<KernelFn, static_cast<std::size_t>(Kernel::kCount)>;

inline void set_kernel(KernelTable& table, Kernel k, KernelFn fn) {
  table[static_cast<std::size_t>(k)] = fn;
}

void register_elementwise_kernels(KernelTable& table);
void register_reduce_kernels(KernelTable& table);
void register_linalg_kernels(KernelTable& table);
void register_conv_kernels(KernelTable& table);
void register_data_movement_kernels(KernelTable& table);
void register_random_kernels(KernelTable& table);
void register_fused_kernels(KernelTable& table);

/// The table with every family registered (built once).
const KernelTable& kernel_table();

}  // namespace axle::cpu
