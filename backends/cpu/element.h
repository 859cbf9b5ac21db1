// backends/cpu: element types and dtype dispatch shared by the kernel families.
//
// Kernels see each buffer as an array of its dtype's storage type (Bf16 for bf16, bool for pred)
// and compute in compute_t of it: bf16 in float, everything else in its own type. The helpers
// here are written so that GCC 12 at -O2 still vectorises the fixed-size block loops built on
// them (see elementwise.cpp).
#pragma once

#include <fmt/format.h>
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/vector_math.h"
#include "axle/engine/this_thread.h"

namespace axle::cpu {

// ---- Element types ---------------------------------------------------------------------------

/// bf16 storage. The conversions are written out rather than taken from Eigen::bfloat16 (same bit
/// layout) because Eigen's branchy rounding keeps GCC from vectorising loops that use it. They
/// round to nearest even exactly as Eigen does for every non-NaN float; a NaN keeps its sign and
/// its top payload bits with the quiet bit set (Eigen returns 0x7fc0 or 0xffc0).
struct Bf16 {
  uint16_t bits;
};
inline float widen(Bf16 x) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}
inline Bf16 narrow(float f) noexcept {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t nearest_even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return Bf16{static_cast<uint16_t>(f != f ? quiet_nan : nearest_even)};
}

/// A storage type passed as a value, so generic lambdas can name it.
template <class T>
struct Tag {
  using type = T;
};

/// Calls f(Tag<T>{}) with T the storage type of `dtype`, for the dtypes kernels compute in. Pred
/// buffers hold 0 or 1 (every kernel writes only those), so they are read as C++ bool.
template <class F>
void visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(Tag<float>{});
    case DType::kFloat64:
      return f(Tag<double>{});
    case DType::kBFloat16:
      return f(Tag<Bf16>{});
    case DType::kInt32:
      return f(Tag<int32_t>{});
    case DType::kInt64:
      return f(Tag<int64_t>{});
    case DType::kBool:
      return f(Tag<bool>{});
    case DType::kFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
      // The compiler computes these in widened_dtype() (graph/passes' widen_storage_only_dtypes);
      // only data movement, fills and casts see them.
      throw std::invalid_argument(
          fmt::format("{} is stored, not computed in, by this kernel", dtype_name(dtype)));
  }
  throw std::invalid_argument(fmt::format("unknown dtype {}", static_cast<int>(dtype)));
}

/// The type an element of storage type T is computed in: bf16 in float, everything else in T.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Bf16>, float, T>;
template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<compute_t<T>>;

template <class T>
compute_t<T> load(T x) noexcept {
  if constexpr (std::is_same_v<T, Bf16>) {
    return widen(x);
  } else {
    return x;
  }
}
/// Float to integer truncates toward zero (NaN and out-of-range values give what the hardware
/// conversion gives, INT_MIN on x86, as torch on CPU); to bool is `!= 0` (NaN is true, as torch).
template <class T, class V>
T store(V v) noexcept {
  if constexpr (std::is_same_v<T, Bf16>) {
    return narrow(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <class V>
bool is_nan(V v) noexcept {
  return v != v;  // false for integers; vectorises, unlike a call
}

/// load() over w contiguous elements. In fixed groups of 16, each converted into a local array
/// before it is stored: GCC at -O2 vectorises only loops whose trip count it knows and whose
/// operands cannot alias.
template <class T>
void widen_block(const T* x, compute_t<T>* dst, int64_t w) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return widen_bf16(&x->bits, dst, w);  // on the widest vectors
  }
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= w; i += kGroup) {
    compute_t<T> group[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) group[j] = load(x[i + j]);
    for (int64_t j = 0; j < kGroup; ++j) dst[i + j] = group[j];
  }
  for (; i < w; ++i) dst[i] = load(x[i]);
}
/// store() over w contiguous elements, in groups as widen_block.
template <class T>
void narrow_block(const compute_t<T>* src, T* out, int64_t w) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return narrow_bf16(src, &out->bits, w);
  }
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= w; i += kGroup) {
    T group[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) group[j] = store<T>(src[i + j]);
    for (int64_t j = 0; j < kGroup; ++j) out[i + j] = group[j];
  }
  for (; i < w; ++i) out[i] = store<T>(src[i]);
}

/// dst[0, n) = value. std::fill_n with a value other than zero compiles to one scalar store per
/// element at -O2; loops of a fixed count, as here, are vectorised.
template <class T>
inline void fill_values(T* dst, int64_t n, T value) noexcept {
  constexpr int64_t kChunk = 256 / static_cast<int64_t>(sizeof(T));
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) dst[i + j] = value;
  }
  for (; i < n; ++i) dst[i] = value;
}

// ---- Scratch ---------------------------------------------------------------------------------

/// Kernel scratch starts on a 64-byte boundary. Eigen's vectorised loops run scalar up to the
/// first aligned element, and its vector and scalar exp, log and sums can differ in the last
/// bit, so on malloc's 16-byte alignment a kernel's bits would depend on where the allocator
/// (whose arenas are per thread) put its scratch.
inline constexpr std::size_t kScratchAlign = 64;

struct ScratchDelete {
  void operator()(void* p) const noexcept {
    ::operator delete (p, std::align_val_t{kScratchAlign});
  }
};
template <class T>
using ScratchArray = std::unique_ptr<T[], ScratchDelete>;

/// n value-initialised (zero) elements on a 64-byte boundary; T may be bool.
template <class T>
ScratchArray<T> scratch_array(std::size_t n) {
  static_assert(std::is_trivially_destructible_v<T>);
  void* p =
      ::operator new (std::max<std::size_t>(n, 1) * sizeof(T), std::align_val_t{kScratchAlign});
  std::uninitialized_value_construct_n(static_cast<T*>(p), n);
  return ScratchArray<T>(static_cast<T*>(p));
}

/// The calling thread's buffers for thread_floats, kept until it exits (engine/this_thread.h).
struct ThreadFloats {
  struct Buffer {
    ScratchArray<float> data;
    std::size_t size = 0;
  };
  std::array<Buffer, 4> buffers;
};

/// At least `floats` floats of the calling thread's buffer `slot` (0 to 3), kept between calls and
/// grown as needed: for kernels that compute bf16 whole in f32. A fresh allocation per call would
/// cost a page fault per 4 KiB of it every time.
inline float* thread_floats(int slot, std::size_t floats) {
  ThreadFloats::Buffer& b =
      this_thread_object<ThreadFloats>().buffers.at(static_cast<std::size_t>(slot));
  if (floats > b.size) {
    b.data = scratch_array<float>(floats);
    b.size = floats;
  }
  return b.data.get();
}

/// A whole bf16 buffer widened to f32 into the calling thread's buffer `slot` (thread_floats),
/// for kernels that compute bf16 in f32 after widening each operand once (round the result back
/// with narrow_block).
inline const float* widened(const ConstView& v, int slot) {
  const int64_t n = v.desc->shape.numel();
  float* out = thread_floats(slot, static_cast<std::size_t>(n));
  widen_block(v.as<Bf16>(), out, n);
  return out;
}

// ---- Dtype checks ----------------------------------------------------------------------------

[[noreturn]] inline void unsupported(Kernel kernel, DType dtype) {
  throw std::invalid_argument(
      fmt::format("{} is not defined for {}", kernel_name(kernel), dtype_name(dtype)));
}

inline void check_dtype(const KernelArgs& args, const char* what, DType got, DType want) {
  if (got != want) {
    throw std::invalid_argument(fmt::format("{}: {} is {}, expected {}",
                                            kernel_name(args.call.kernel), what, dtype_name(got),
                                            dtype_name(want)));
  }
}

// ---- Buffers as Eigen matrices ---------------------------------------------------------------

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
template <class T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;

}  // namespace axle::cpu
