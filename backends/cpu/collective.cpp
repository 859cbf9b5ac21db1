// backends/cpu: one member's part of a collective, computed from every member's operand. The
// devices of the CPU backend share the host's memory, so a member reads its peers' buffers in
// place: a collective moves each byte once, with no staging copies.
#include <fmt/format.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>

#include "backends/cpu/element.h"

namespace axle::cpu {
namespace {

// Elements folded per block: a block of the result stays in L1 while each member's operand is
// folded into it.
constexpr int64_t kFoldBlock = 2048;

// Results at least this large are stored past the caches: they would not stay there anyway, and
// a plain store first reads each line it writes (a fifth more memory traffic for a 4-member sum).
constexpr std::size_t kStreamingBytes = std::size_t{8} << 20;

// memcpy with non-temporal stores, for data nobody reads soon.
void stream_copy(std::byte* dst, const std::byte* src, std::size_t bytes) {
#if defined(__SSE2__)
  const std::size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  std::size_t i = head;
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

template <class C>
C combine(ReduceType type, C a, C b) noexcept {
  switch (type) {
    case ReduceType::kSum:
      if constexpr (std::is_same_v<C, bool>)
        return a || b;
      else
        return a + b;
    case ReduceType::kMul:
      if constexpr (std::is_same_v<C, bool>)
        return a && b;
      else
        return a * b;
    case ReduceType::kAnd:
      return static_cast<C>(a && b);
    case ReduceType::kOr:
      return static_cast<C>(a || b);
    case ReduceType::kMin:
      return std::min(a, b);
    case ReduceType::kMax:
      return std::max(a, b);
  }
  return a;
}

// out[i] = scale * fold(members' element at offset + i) for i in [0, count): members in group
// order, so every member computing an element gets the same bits.
template <class T>
void fold_range(ReduceType type, double scale, std::span<DeviceMemory* const> operands,
                int64_t offset, int64_t count, T* out, bool streaming) {
  using C = compute_t<T>;
  C block[kFoldBlock];
  for (int64_t begin = 0; begin < count; begin += kFoldBlock) {
    const int64_t n = std::min(kFoldBlock, count - begin);
    const T* first = static_cast<const T*>(operands[0]->data()) + offset + begin;
    for (int64_t i = 0; i < n; ++i) block[i] = load(first[i]);
    for (std::size_t m = 1; m < operands.size(); ++m) {
      const T* in = static_cast<const T*>(operands[m]->data()) + offset + begin;
      // A loop per common kind, so that each vectorises.
      switch (type) {
        case ReduceType::kSum:
          for (int64_t i = 0; i < n; ++i)
            block[i] = combine<C>(ReduceType::kSum, block[i], load(in[i]));
          break;
        case ReduceType::kMul:
          for (int64_t i = 0; i < n; ++i)
            block[i] = combine<C>(ReduceType::kMul, block[i], load(in[i]));
          break;
        default:
          for (int64_t i = 0; i < n; ++i) block[i] = combine<C>(type, block[i], load(in[i]));
          break;
      }
    }
    if (scale != 1.0) {
      if constexpr (kIsFloat<T>) {
        const auto s = static_cast<C>(scale);
        for (int64_t i = 0; i < n; ++i) block[i] = block[i] * s;
      } else if constexpr (!std::is_same_v<T, bool>) {
        for (int64_t i = 0; i < n; ++i) {
          block[i] = static_cast<C>(static_cast<double>(block[i]) * scale);
        }
      }
    }
    if constexpr (std::is_same_v<T, C>) {
      if (streaming) {
        stream_copy(reinterpret_cast<std::byte*>(out + begin),
                    reinterpret_cast<const std::byte*>(block),
                    static_cast<std::size_t>(n) * sizeof(T));
        continue;
      }
    }
    for (int64_t i = 0; i < n; ++i) out[begin + i] = store<T>(block[i]);
  }
#if defined(__SSE2__)
  if (streaming) _mm_sfence();  // the stores are visible before the members meet again
#endif
}

void fold(DType dtype, ReduceType type, double scale, std::span<DeviceMemory* const> operands,
          int64_t offset, int64_t count, void* out, bool streaming) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fold_range<T>(type, scale, operands, offset, count, static_cast<T*>(out), streaming);
  });
}

// Copies a sub-tensor of `shape` between two contiguous tensors: element index x sits at
// sum(x[d] * src_strides[d]) in src and sum(x[d] * dst_strides[d]) in dst (strides in elements,
// the last dim contiguous in both), so only the last dim's runs are copied.
void copy_block(const std::byte* src, std::span<const int64_t> src_strides, std::byte* dst,
                std::span<const int64_t> dst_strides, std::span<const int64_t> shape,
                std::size_t element_bytes) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, element_bytes);
    return;
  }
  for (int64_t extent : shape) {
    if (extent == 0) return;
  }
  const std::size_t run = static_cast<std::size_t>(shape[rank - 1]) * element_bytes;
  const auto bytes = static_cast<int64_t>(element_bytes);
  std::vector<int64_t> index(rank - 1, 0);  // over every dim but the last
  while (true) {
    int64_t s = 0;
    int64_t d = 0;
    for (std::size_t k = 0; k + 1 < rank; ++k) {
      s += index[k] * src_strides[k];
      d += index[k] * dst_strides[k];
    }
    std::memcpy(dst + d * bytes, src + s * bytes, run);
    std::ptrdiff_t k = static_cast<std::ptrdiff_t>(rank) - 2;
    while (k >= 0 && ++index[static_cast<std::size_t>(k)] == shape[static_cast<std::size_t>(k)]) {
      index[static_cast<std::size_t>(k)] = 0;
      --k;
    }
    if (k < 0) return;
  }
}

// The product of shape[begin, end).
int64_t extent(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= shape[d];
  return n;
}

void check(bool ok, const KernelCall& call, const BufferDesc& operand, const BufferDesc& result,
           const char* what) {
  if (!ok) {
    throw std::invalid_argument(fmt::format(
        "{} of {}{} -> {}{}: {}", kernel_name(call.kernel), dtype_name(operand.dtype),
        operand.shape.to_string(), dtype_name(result.dtype), result.shape.to_string(), what));
  }
}

}  // namespace

void run_collective(const KernelCall& call, const BufferDesc& operand, const BufferDesc& result,
                    std::span<DeviceMemory* const> operands, int position, DeviceMemory& output) {
  const auto members = static_cast<int64_t>(operands.size());
  check(members > 0 && position >= 0 && position < members, call, operand, result,
        "this device is not among the members");
  for (DeviceMemory* m : operands) {
    // A buffer from the run's pool may be larger than its slot.
    check(m && m->bytes() >= operand.bytes(), call, operand, result,
          "a member's operand is smaller than the operand");
  }
  check(output.bytes() >= result.bytes(), call, operand, result, "the output is too small");
  const std::size_t element_bytes = dtype_size(operand.dtype);
  auto* out = static_cast<std::byte*>(output.data());
  switch (call.kernel) {
    case Kernel::kAllReduce: {
      const int64_t n = operand.shape.numel();
      const int64_t begin = n * position / members;
      const int64_t end = n * (position + 1) / members;
      fold(operand.dtype, static_cast<ReduceType>(call.ints.at(0)), call.reals.at(0), operands,
           begin, end - begin, out + begin * static_cast<int64_t>(element_bytes),
           result.bytes() >= kStreamingBytes);
      return;
    }
    case Kernel::kReduceScatter: {
      const int dim = static_cast<int>(call.ints.at(1));
      const int64_t outer = extent(operand.shape, 0, dim);
      // Each outer index holds `members` blocks; this member's block is one contiguous run.
      const int64_t block =
          result.shape[dim] * extent(operand.shape, dim + 1, operand.shape.rank());
      for (int64_t o = 0; o < outer; ++o) {
        fold(operand.dtype, static_cast<ReduceType>(call.ints.at(0)), call.reals.at(0), operands,
             (o * members + position) * block, block,
             out + o * block * static_cast<int64_t>(element_bytes),
             result.bytes() >= kStreamingBytes);
      }
      return;
    }
    case Kernel::kAllGather: {
      const int dim = static_cast<int>(call.ints.at(0));
      const int64_t outer = extent(operand.shape, 0, dim);
      const auto run = static_cast<std::size_t>(extent(operand.shape, dim, operand.shape.rank())) *
                       element_bytes;
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t m = 0; m < members; ++m) {
          std::memcpy(
              out + (o * members + m) * static_cast<int64_t>(run),
              static_cast<const std::byte*>(operands[m]->data()) + o * static_cast<int64_t>(run),
              run);
        }
      }
      return;
    }
    case Kernel::kAllToAll: {
      const int split = static_cast<int>(call.ints.at(0));
      const int concat = static_cast<int>(call.ints.at(1));
      Shape block = operand.shape;
      block[split] = operand.shape[split] / members;
      const auto src_strides = contiguous_strides(operand.shape);
      const auto dst_strides = contiguous_strides(result.shape);
      const std::vector<int64_t> dims(block.dims().begin(), block.dims().end());
      const int64_t src_offset = position * block[split] * src_strides[split];
      for (int64_t m = 0; m < members; ++m) {
        copy_block(
            static_cast<const std::byte*>(operands[m]->data()) +
                src_offset * static_cast<int64_t>(element_bytes),
            std::span(src_strides).first(dims.size()),
            out + m * block[concat] * dst_strides[concat] * static_cast<int64_t>(element_bytes),
            std::span(dst_strides).first(dims.size()), dims, element_bytes);
      }
      return;
    }
    case Kernel::kCollectivePermute: {
      for (std::size_t i = 1; i + 1 < call.ints.size(); i += 2) {
        if (call.ints[i + 1] == position) {
          std::memcpy(out, operands[static_cast<std::size_t>(call.ints[i])]->data(),
                      result.bytes());
          return;
        }
      }
      std::memset(out, 0, result.bytes());  // no pair sends here
      return;
    }
    default:
      break;
  }
  check(false, call, operand, result, "not a collective");
}

}  // namespace axle::cpu
