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
#include <vector>

#include "axle/backends/cpu/element.h"
#include "axle/engine/cores.h"

namespace axle::cpu {
namespace {

// Results at least this large are stored past the caches: they would not stay there anyway, and
// a plain store first reads each line it writes (a fifth more memory traffic for a 4-member sum).
constexpr std::size_t kStreamingBytes = std::size_t{8} << 20;

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

// Elements folded at a time: 256 bytes of the compute type, few enough to stay in registers
// while every member's run is added in, so each operand is read once and nothing else is.
template <class C>
constexpr int64_t kFoldChunk = std::max<int64_t>(32, 256 / static_cast<int64_t>(sizeof(C)));

// Stores a chunk of results past the caches; `out` is 64-byte aligned and the chunk a whole
// number of 16-byte units.
template <class T>
void stream_chunk(const T* chunk, T* out, int64_t n) {
#if defined(__SSE2__)
  const auto* src = reinterpret_cast<const std::byte*>(chunk);
  auto* dst = reinterpret_cast<std::byte*>(out);
  for (int64_t i = 0; i < n * static_cast<int64_t>(sizeof(T)); i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
#else
  std::copy_n(chunk, n, out);
#endif
}

// acc[i] = scale * fold(members' element at begin + i) for i in [0, n): members in group order,
// so every member computing an element gets the same bits. kN > 0 fixes n at compile time, so
// that GCC keeps acc in vector registers.
template <int64_t kN, class T, ReduceType kType>
void fold_into(compute_t<T>* acc, const std::vector<const T*>& in, int64_t begin, int64_t runtime_n,
               double scale) {
  using C = compute_t<T>;
  const int64_t n = kN > 0 ? kN : runtime_n;
  for (int64_t i = 0; i < n; ++i) acc[i] = load(in[0][begin + i]);
  for (std::size_t m = 1; m < in.size(); ++m) {
    const T* run = in[m] + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] = combine<C>(kType, acc[i], load(run[i]));
  }
  if (scale == 1.0) return;
  if constexpr (kIsFloat<T>) {
    const auto s = static_cast<C>(scale);
    for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] * s;
  } else if constexpr (!std::is_same_v<T, bool>) {
    for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<C>(static_cast<double>(acc[i]) * scale);
  }
}

// out[i] for i in [first, last), chunk by chunk; `stream` stores whole chunks with non-temporal
// stores (the caller aligns them).
template <class T, ReduceType kType>
void fold_chunks(double scale, const std::vector<const T*>& in, int64_t first, int64_t last, T* out,
                 bool stream) {
  using C = compute_t<T>;
  constexpr int64_t kChunk = kFoldChunk<C>;
  C acc[kChunk];
  int64_t begin = first;
  for (; begin + kChunk <= last; begin += kChunk) {
    fold_into<kChunk, T, kType>(acc, in, begin, kChunk, scale);
    if (stream) {
      T chunk[kChunk];
      for (int64_t i = 0; i < kChunk; ++i) chunk[i] = store<T>(acc[i]);
      stream_chunk(chunk, out + begin, kChunk);
    } else {
      for (int64_t i = 0; i < kChunk; ++i) out[begin + i] = store<T>(acc[i]);
    }
  }
  const int64_t rest = last - begin;
  fold_into<0, T, kType>(acc, in, begin, rest, scale);
  for (int64_t i = 0; i < rest; ++i) out[begin + i] = store<T>(acc[i]);
}

template <class T, ReduceType kType>
void fold_range(double scale, std::span<DeviceMemory* const> operands, int64_t offset,
                int64_t count, T* out, bool streaming) {
  std::vector<const T*> in;
  in.reserve(operands.size());
  for (DeviceMemory* m : operands) in.push_back(static_cast<const T*>(m->data()) + offset);
  if (!streaming) return fold_chunks<T, kType>(scale, in, 0, count, out, false);
  // Plain stores up to the first 64-byte boundary of the output and after the last whole chunk,
  // so each line stored past the caches is this member's alone.
  const auto misaligned = reinterpret_cast<uintptr_t>(out) % 64;
  const int64_t head = std::min<int64_t>(
      count, misaligned == 0 ? 0 : static_cast<int64_t>((64 - misaligned) / sizeof(T)));
  const int64_t body = (count - head) / kFoldChunk<compute_t<T>> * kFoldChunk<compute_t<T>>;
  fold_chunks<T, kType>(scale, in, 0, head, out, false);
  fold_chunks<T, kType>(scale, in, head, head + body, out, true);
  fold_chunks<T, kType>(scale, in, head + body, count, out, false);
#if defined(__SSE2__)
  _mm_sfence();  // the stores are visible before the members meet again
#endif
}

void fold(DType dtype, ReduceType type, double scale, std::span<DeviceMemory* const> operands,
          int64_t offset, int64_t count, void* out, bool streaming) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* result = static_cast<T*>(out);
    switch (type) {
      case ReduceType::kSum:
        return fold_range<T, ReduceType::kSum>(scale, operands, offset, count, result, streaming);
      case ReduceType::kMul:
        return fold_range<T, ReduceType::kMul>(scale, operands, offset, count, result, streaming);
      case ReduceType::kAnd:
        return fold_range<T, ReduceType::kAnd>(scale, operands, offset, count, result, streaming);
      case ReduceType::kOr:
        return fold_range<T, ReduceType::kOr>(scale, operands, offset, count, result, streaming);
      case ReduceType::kMin:
        return fold_range<T, ReduceType::kMin>(scale, operands, offset, count, result, streaming);
      case ReduceType::kMax:
        return fold_range<T, ReduceType::kMax>(scale, operands, offset, count, result, streaming);
    }
  });
}

int64_t host_cores() {
  static const int64_t cores = usable_cores();
  return cores;
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

// all_gather along `dim`: each outer index holds every member's run, in member order.
void all_gather(int dim, const BufferDesc& operand, std::span<DeviceMemory* const> operands,
                std::byte* out) {
  const auto members = static_cast<int64_t>(operands.size());
  const int64_t outer = extent(operand.shape, 0, dim);
  const auto run = static_cast<std::size_t>(extent(operand.shape, dim, operand.shape.rank())) *
                   dtype_size(operand.dtype);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t m = 0; m < members; ++m) {
      std::memcpy(
          out + (o * members + m) * static_cast<int64_t>(run),
          static_cast<const std::byte*>(operands[m]->data()) + o * static_cast<int64_t>(run), run);
    }
  }
}

// all_to_all: block `position` of each member's operand along `split`, laid side by side along
// `concat` in member order.
void all_to_all(int split, int concat, const BufferDesc& operand, const BufferDesc& result,
                std::span<DeviceMemory* const> operands, int position, std::byte* out) {
  const auto members = static_cast<int64_t>(operands.size());
  const std::size_t element_bytes = dtype_size(operand.dtype);
  Shape block = operand.shape;
  block[split] = operand.shape[split] / members;
  const auto src_strides = contiguous_strides(operand.shape);
  const auto dst_strides = contiguous_strides(result.shape);
  const std::vector<int64_t> dims(block.dims().begin(), block.dims().end());
  const int64_t src_offset = position * block[split] * src_strides[split];
  for (int64_t m = 0; m < members; ++m) {
    copy_block(static_cast<const std::byte*>(operands[m]->data()) +
                   src_offset * static_cast<int64_t>(element_bytes),
               std::span(src_strides).first(dims.size()),
               out + m * block[concat] * dst_strides[concat] * static_cast<int64_t>(element_bytes),
               std::span(dst_strides).first(dims.size()), dims, element_bytes);
  }
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
      // At most one stretch per core: more members than cores would take turns on them, and
      // streaming loops that share a core evict each other's prefetched lines.
      const int64_t parts = std::min<int64_t>(members, host_cores());
      if (position >= parts) return;
      const int64_t n = operand.shape.numel();
      const int64_t begin = n * position / parts;
      const int64_t end = n * (position + 1) / parts;
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
    case Kernel::kAllGather:
      return all_gather(static_cast<int>(call.ints.at(0)), operand, operands, out);
    case Kernel::kAllToAll:
      return all_to_all(static_cast<int>(call.ints.at(0)), static_cast<int>(call.ints.at(1)),
                        operand, result, operands, position, out);
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
