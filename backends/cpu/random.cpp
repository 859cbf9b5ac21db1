// backends/cpu: random-number kernels on counter-based Philox 4x32-10 (Salmon, Moraes, Dror and
// Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator of Random123,
// cuRAND and numpy's Philox family).
//
// Which bits an element gets — the contract; a reimplementation that follows it reproduces axle's
// numbers exactly:
//   key     = {seed & 0xffffffff, seed >> 32}            (seed read as uint64)
//   c       = uint64(offset) + i  (mod 2^64)              i = the element's row-major flat index
//   counter = {c & 0xffffffff, c >> 32, 0, 0}
//   {r0, r1, r2, r3} = philox4x32_10(counter, key)
// Every element has its own counter, so its value does not depend on how the output is split
// between calls or threads, and an op of n elements uses counters [offset, offset + n): the next
// op continues at offset + n. Words 2 and 3 of the counter stay 0 except for rand_int's rare
// extra draws below, so they never collide with another element's counter.
// Per kernel, with u24(w) = (w >> 8) * 2^-24 and u53(lo, hi) = ((hi << 32 | lo) >> 11) * 2^-53:
//   rand_uniform  u = u24(r0) for f32 and bf16, u53(r0, r1) for f64;
//                 value = low + (high - low) * u in double, rounded to the dtype; a value that
//                 rounds up to high becomes the largest value of the dtype below high.
//   rand_normal   f32/bf16: u1 = (r0 + 1) * 2^-32, u2 = r1 * 2^-32;
//                 f64: u1 = u53(r0, r1) + 2^-53, u2 = u53(r2, r3);
//                 value = mean + std * sqrt(-2 ln u1) * cos(2 pi u2) in double (Box-Muller,
//                 cosine branch only; u1 is in (0, 1], so ln never sees 0).
//   rand_int      range = high - low; draws x = r1 << 32 | r0, then r3 << 32 | r2, then the same
//                 two from counter {c lo, c hi, k, 0} for k = 1, 2, ...; each draw is taken by
//                 Lemire's multiply-shift with rejection (m = x * range as 128 bits; rejected when
//                 m mod 2^64 < 2^64 mod range), value = low + (m >> 64). Exactly uniform; a
//                 rejection has probability below range / 2^64.
//   bernoulli     u = u53(r0, r1); value = u < p ? 1 : 0.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/philox.h"

namespace axle::cpu {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) noexcept {
  constexpr uint64_t kMul0 = 0xD2511F53;
  constexpr uint64_t kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9;  // golden ratio
  constexpr uint32_t kWeyl1 = 0xBB67AE85;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = kMul0 * counter[0];
    const uint64_t p1 = kMul1 * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return counter;
}

namespace {

using Block = std::array<uint32_t, 4>;
__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang; __extension__ quiets -Wpedantic

constexpr double kTwoPow24 = 16777216.0;
constexpr double kTwoPow32 = 4294967296.0;
constexpr double kTwoPow53 = 9007199254740992.0;

double u24(uint32_t w) noexcept { return static_cast<double>(w >> 8) / kTwoPow24; }
uint64_t join(uint32_t lo, uint32_t hi) noexcept { return static_cast<uint64_t>(hi) << 32 | lo; }
double u53(uint32_t lo, uint32_t hi) noexcept {
  return static_cast<double>(join(lo, hi) >> 11) / kTwoPow53;
}

/// Key and first counter of one kernel call, read from its seed and offset inputs.
struct Stream {
  std::array<uint32_t, 2> key;
  uint64_t offset;

  [[nodiscard]] Block block(int64_t i, uint32_t extra = 0) const noexcept {
    const uint64_t c = offset + static_cast<uint64_t>(i);
    return philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), extra, 0}, key);
  }
};

int64_t read_s64_scalar(const ConstView& view, std::string_view kernel, std::string_view what) {
  const BufferDesc& desc = *view.desc;
  if (desc.dtype != DType::kInt64 || desc.shape.numel() != 1) {
    throw std::invalid_argument(fmt::format("{}: {} must be an s64 scalar, not {}{}", kernel, what,
                                            dtype_name(desc.dtype), desc.shape.to_string()));
  }
  int64_t value;
  std::memcpy(&value, view.data, sizeof(value));
  return value;
}

Stream read_stream(const KernelArgs& args, std::size_t inputs, std::string_view kernel) {
  if (args.inputs.size() != inputs) {
    throw std::invalid_argument(
        fmt::format("{}: takes {} inputs, got {}", kernel, inputs, args.inputs.size()));
  }
  const auto seed = static_cast<uint64_t>(read_s64_scalar(args.inputs[0], kernel, "seed"));
  const auto offset = static_cast<uint64_t>(read_s64_scalar(args.inputs[1], kernel, "offset"));
  return {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, offset};
}

// visit_dtype for the floating-point dtypes (f32, f64, bf16); any other is rejected.
template <class F>
void visit_float_dtype(DType dtype, std::string_view kernel, F&& f) {
  if (!is_floating(dtype)) {
    throw std::invalid_argument(
        fmt::format("{}: needs a floating-point output, not {}", kernel, dtype_name(dtype)));
  }
  visit_dtype(dtype, [&](auto tag) {
    if constexpr (kIsFloat<typename decltype(tag)::type>) f(tag);
  });
}

template <class T>
double as_double(T v) noexcept {
  return static_cast<double>(load(v));
}

// The next value of T toward -infinity.
template <class T>
T next_down(T v) noexcept {
  if constexpr (std::is_same_v<T, Bf16>) {
    if (v.bits == 0) {
      v.bits = 0x8001;  // +0 -> the negative subnormal closest to 0
    } else if (v.bits & 0x8000) {
      ++v.bits;  // negative: one step larger in magnitude
    } else {
      --v.bits;  // positive: one step smaller in magnitude
    }
    return v;
  } else {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  }
}

// The largest T strictly below `high`: where a uniform draw that rounded up to high goes.
template <class T>
T largest_below(double high) noexcept {
  T v = store<T>(high);
  while (as_double(v) >= high) v = next_down(v);
  return v;
}

template <class T, class Gen>
void fill(const KernelArgs& args, const Stream& stream, Gen&& gen) {
  T* out = args.output.as<T>();
  const int64_t n = args.output.desc->shape.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = gen(stream.block(i), i);
}

void expect_reals(const KernelArgs& args, std::string_view kernel) {
  if (args.call.reals.size() != 2) {
    throw std::invalid_argument(
        fmt::format("{}: takes 2 real attributes, got {}", kernel, args.call.reals.size()));
  }
}

void rand_uniform_kernel(const KernelArgs& args) {
  const Stream stream = read_stream(args, 2, "rand_uniform");
  expect_reals(args, "rand_uniform");
  const double low = args.call.reals[0];
  const double high = args.call.reals[1];
  if (!(low <= high)) {
    throw std::invalid_argument(
        fmt::format("rand_uniform: needs low <= high, got [{}, {})", low, high));
  }
  visit_float_dtype(args.output.desc->dtype, "rand_uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kWide = std::is_same_v<T, double>;
    // With low == high the range is empty; torch returns low, and so does the formula.
    const T below_high = low < high ? largest_below<T>(high) : store<T>(low);
    fill<T>(args, stream, [&](const Block& r, int64_t) {
      const double u = kWide ? u53(r[0], r[1]) : u24(r[0]);
      const T v = store<T>(low + (high - low) * u);
      return low < high && as_double(v) >= high ? below_high : v;
    });
  });
}

void rand_normal_kernel(const KernelArgs& args) {
  const Stream stream = read_stream(args, 2, "rand_normal");
  expect_reals(args, "rand_normal");
  const double mean = args.call.reals[0];
  const double std = args.call.reals[1];
  if (!(std >= 0)) throw std::invalid_argument(fmt::format("rand_normal: std {} is negative", std));
  visit_float_dtype(args.output.desc->dtype, "rand_normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kWide = std::is_same_v<T, double>;
    fill<T>(args, stream, [&](const Block& r, int64_t) {
      const double u1 =
          kWide ? u53(r[0], r[1]) + 1.0 / kTwoPow53 : (static_cast<double>(r[0]) + 1.0) / kTwoPow32;
      const double u2 = kWide ? u53(r[2], r[3]) : static_cast<double>(r[1]) / kTwoPow32;
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      return store<T>(mean + std * z);
    });
  });
}

// Lemire, "Fast random integer generation in an interval" (2019): the high half of x * range is
// uniform in [0, range) once the 2^64 mod range lowest products are rejected.
uint64_t bounded(const Stream& stream, int64_t i, const Block& first, uint64_t range) noexcept {
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  Block r = first;
  for (uint32_t k = 1;; ++k) {
    for (int half = 0; half < 2; ++half) {
      const uint64_t x = join(r[2 * half], r[2 * half + 1]);
      const Uint128 m = static_cast<Uint128>(x) * range;
      if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
    }
    r = stream.block(i, k);
  }
}

void rand_int_kernel(const KernelArgs& args) {
  const Stream stream = read_stream(args, 2, "rand_int");
  if (args.call.ints.size() != 2) {
    throw std::invalid_argument(
        fmt::format("rand_int: takes 2 int attributes, got {}", args.call.ints.size()));
  }
  const int64_t low = args.call.ints[0];
  const int64_t high = args.call.ints[1];
  const DType dtype = args.output.desc->dtype;
  if (low >= high) {
    throw std::invalid_argument(fmt::format("rand_int: needs low < high, got [{}, {})", low, high));
  }
  if ((dtype == DType::kInt32 && (low < std::numeric_limits<int32_t>::min() ||
                                  high - 1 > std::numeric_limits<int32_t>::max())) ||
      (dtype == DType::kBool && (low < 0 || high > 2))) {
    throw std::invalid_argument(
        fmt::format("rand_int: [{}, {}) does not fit in {}", low, high, dtype_name(dtype)));
  }
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill<T>(args, stream, [&](const Block& r, int64_t i) {
      const auto v =
          static_cast<int64_t>(static_cast<uint64_t>(low) + bounded(stream, i, r, range));
      if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(v);
      } else {
        return store<T>(static_cast<double>(v));
      }
    });
  });
}

void bernoulli_kernel(const KernelArgs& args) {
  const Stream stream = read_stream(args, 3, "bernoulli");
  const BufferDesc& p_desc = *args.inputs[2].desc;
  const BufferDesc& out = *args.output.desc;
  const bool scalar = p_desc.shape.numel() == 1;
  if (!is_floating(p_desc.dtype) || !(scalar || p_desc.shape == out.shape)) {
    throw std::invalid_argument(
        fmt::format("bernoulli: p must be a floating-point scalar or of shape {}, not {}{}",
                    out.shape.to_string(), dtype_name(p_desc.dtype), p_desc.shape.to_string()));
  }
  visit_float_dtype(p_desc.dtype, "bernoulli", [&](auto p_tag) {
    using P = typename decltype(p_tag)::type;
    const P* p = args.inputs[2].as<P>();
    const int64_t count = p_desc.shape.numel();
    for (int64_t i = 0; i < count; ++i) {
      const double v = as_double(p[i]);
      if (!(v >= 0 && v <= 1)) {
        throw std::invalid_argument(fmt::format("bernoulli: p = {} is outside [0, 1]", v));
      }
    }
    visit_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T one = store<T>(1.0);
      const T zero = store<T>(0.0);
      fill<T>(args, stream, [&](const Block& r, int64_t i) {
        return u53(r[0], r[1]) < as_double(p[scalar ? 0 : i]) ? one : zero;
      });
    });
  });
}

}  // namespace

void register_random_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kRandUniform, rand_uniform_kernel);
  set_kernel(table, Kernel::kRandNormal, rand_normal_kernel);
  set_kernel(table, Kernel::kRandInt, rand_int_kernel);
  set_kernel(table, Kernel::kBernoulli, bernoulli_kernel);
}

}  // namespace axle::cpu
