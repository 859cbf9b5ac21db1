// graph/reference: random ops (rand, randn, randint, bernoulli) with the CPU backend's meaning but
// not its bits. Element i of an op whose seed and offset operands are (s, o) draws from counter
// o + i under key s — so values depend only on (seed, offset, element index), and an op at the
// next offset draws other numbers — through a SplitMix64-style hash (a simpler generator than
// the backend's Philox, which is all a reference needs). The ranges, dtypes and distributions
// are the backend's: uniform in [low, high) (a value rounding up to high becomes the largest
// below it), normal by Box-Muller, integers exactly uniform in [low, high) (Lemire's method with
// rejection), bernoulli 1 with probability p.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang; __extension__ quiets -Wpedantic

uint64_t mix(uint64_t z) noexcept {  // SplitMix64's finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The stream of one op: word k of element i.
struct Stream {
  uint64_t seed;
  uint64_t offset;
  [[nodiscard]] uint64_t word(int64_t i, uint64_t k) const noexcept {
    return mix(mix(mix(seed) ^ (offset + static_cast<uint64_t>(i))) + k);
  }
  /// Uniform in [0, 1), 53 bits.
  [[nodiscard]] double uniform(int64_t i, uint64_t k) const noexcept {
    return static_cast<double>(word(i, k) >> 11) * 0x1p-53;
  }
};

int64_t scalar_s64(const OpCall& call, const CpuTensor& t, const char* what) {
  if (t.dtype != DType::kInt64 || t.shape.numel() != 1) {
    fail(call, fmt::format("the {} must be an s64 scalar, not {}{}", what, dtype_name(t.dtype),
                           t.shape.to_string()));
  }
  return int_at(t, 0);
}

Stream stream_of(const OpCall& call, std::size_t operands) {
  expect_operands(call, operands);
  return {static_cast<uint64_t>(scalar_s64(call, call.operand(0), "seed")),
          static_cast<uint64_t>(scalar_s64(call, call.operand(1), "offset"))};
}

void expect_floating(const OpCall& call) {
  if (!is_floating(call.dtype())) {
    fail(call, fmt::format("needs a floating-point result, not {}", dtype_name(call.dtype())));
  }
}

void expect_reals(const OpCall& call, const char* layout) {
  if (call.reals().size() != 2) fail(call, fmt::format("real attributes must be {}", layout));
}

// The largest value of `dtype` strictly below `high`.
double largest_below(DType dtype, double high) {
  CpuTensor v = zeros(dtype, Shape{});
  store_real(v, 0, high);
  while (real_at(v, 0) >= high) {
    if (dtype == DType::kFloat64) {
      store_real(v, 0, std::nextafter(real_at(v, 0), -std::numeric_limits<double>::infinity()));
    } else if (dtype == DType::kFloat32) {
      const auto f = static_cast<float>(real_at(v, 0));
      store_real(v, 0, std::nextafter(f, -std::numeric_limits<float>::infinity()));
    } else {  // bf16: one step toward -infinity in its 16 bits
      uint16_t bits;
      std::memcpy(&bits, v.bytes.data(), 2);
      bits = bits == 0 ? 0x8001 : (bits & 0x8000) ? bits + 1 : bits - 1;
      std::memcpy(v.bytes.data(), &bits, 2);
    }
  }
  return real_at(v, 0);
}

// reals = [low, high].
CpuTensor rand_uniform(const OpCall& call) {
  const Stream stream = stream_of(call, 2);
  expect_reals(call, "[low, high]");
  expect_floating(call);
  const double low = call.reals()[0], high = call.reals()[1];
  if (!(low <= high)) fail(call, fmt::format("needs low <= high, got [{}, {})", low, high));
  // With low == high the range is empty; torch returns low, and so does the formula.
  const double below_high = low < high ? largest_below(call.dtype(), high) : low;
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape().numel(); ++i) {
    store_real(out, i, low + (high - low) * stream.uniform(i, 0));
    if (low < high && real_at(out, i) >= high) store_real(out, i, below_high);
  }
  return out;
}

// reals = [mean, std].
CpuTensor rand_normal(const OpCall& call) {
  const Stream stream = stream_of(call, 2);
  expect_reals(call, "[mean, std]");
  expect_floating(call);
  const double mean = call.reals()[0], std = call.reals()[1];
  if (!(std >= 0)) fail(call, fmt::format("std {} is negative", std));
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape().numel(); ++i) {
    const double u1 = stream.uniform(i, 0) + 0x1p-53;  // in (0, 1]: log never sees 0
    const double u2 = stream.uniform(i, 1);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    store_real(out, i, mean + std * z);
  }
  return out;
}

// ints = [low, high]: uniform integers in [low, high).
CpuTensor rand_int(const OpCall& call) {
  const Stream stream = stream_of(call, 2);
  expect_ints(call, 2, "[low, high]");
  const int64_t low = call.ints()[0], high = call.ints()[1];
  const DType dtype = call.dtype();
  if (low >= high) fail(call, fmt::format("needs low < high, got [{}, {})", low, high));
  if ((dtype == DType::kInt32 && (low < std::numeric_limits<int32_t>::min() ||
                                  high - 1 > std::numeric_limits<int32_t>::max())) ||
      (dtype == DType::kBool && (low < 0 || high > 2))) {
    fail(call, fmt::format("[{}, {}) does not fit in {}", low, high, dtype_name(dtype)));
  }
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range: the products to reject
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape().numel(); ++i) {
    uint64_t drawn = 0;
    for (uint64_t k = 0;; ++k) {
      const Uint128 m = static_cast<Uint128>(stream.word(i, k)) * range;
      if (static_cast<uint64_t>(m) >= threshold) {
        drawn = static_cast<uint64_t>(m >> 64);
        break;
      }
    }
    store_int(out, i, static_cast<int64_t>(static_cast<uint64_t>(low) + drawn));
  }
  return out;
}

// [seed, offset, p (a scalar or the result's shape, floating)]: 1 with probability p, else 0.
CpuTensor bernoulli(const OpCall& call) {
  const Stream stream = stream_of(call, 3);
  const CpuTensor& p = call.operand(2);
  const bool scalar = p.shape.numel() == 1;
  if (!is_floating(p.dtype) || !(scalar || p.shape == call.shape())) {
    fail(call, "p must be a floating-point scalar or of the result's shape");
  }
  for (int64_t i = 0; i < p.shape.numel(); ++i) {
    const double v = real_at(p, i);
    if (!(v >= 0 && v <= 1)) fail(call, fmt::format("p = {} is outside [0, 1]", v));
  }
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < call.shape().numel(); ++i) {
    store_real(out, i, stream.uniform(i, 0) < real_at(p, scalar ? 0 : i) ? 1.0 : 0.0);
  }
  return out;
}

}  // namespace

CpuTensor evaluate_random(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kRandUniform:
      return rand_uniform(call);
    case Op::kRandNormal:
      return rand_normal(call);
    case Op::kRandInt:
      return rand_int(call);
    case Op::kBernoulli:
      return bernoulli(call);
    default:
      fail(call, "is not a random op");
  }
}

}  // namespace axle::reference::detail
