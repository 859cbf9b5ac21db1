// Tests the products backends/cpu/gemm.cpp computes in another arrangement than blocks of output
// rows or columns, on the instruction-set path the run takes (AXLE_CPU_ISA):
// - by depth block: a short product over a few blocks of k whose op(a) is stored [m, k] and op(b)
//   [k, n] (an input gradient dy · W) runs one part per block, then adds the blocks' sums. Its
//   outputs must have the bits of the same product on one thread, with f32 and bf16 operands, and
//   a bias, relu's backward or relu applied to them (op(a) stored transposed, a weight
//   gradient's layout, goes by rows instead: the same bits again);
// - transposed: a product into a few columns over many rows (a classifier's logits) computed as
//   outᵀ = op(b)ᵀ · op(a)ᵀ must have the bits gemm.h promises (blocks of 256 along k, each one
//   chain of fused multiply-adds from 0, added in order, then the bias);
// - shallow: a product over at most 16 along k whose op(b) is stored [k, n] (a first
//   convolution's taps) reads op(b) where it lies instead of packing it. Its outputs must have
//   the bits of the same product with op(b) stored transposed, which is packed, through every
//   epilogue; and bf16 outputs are rounded as narrow() rounds, denormal values included.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

using cpu::Bf16;
using cpu::Gemm;

/// Operands of op(a) [m, k] (stored transposed or not) and op(b) [k, n] stored [k, n], each in
/// f32 and as bf16, rows wider than the matrices.
struct Operands {
  int64_t m, n, k;
  bool transpose_a;
  std::vector<float> a, b, x, bias;
  std::vector<Bf16> a16, b16;

  bool transpose_b = false;

  Operands(std::mt19937& rng, int64_t m_, int64_t n_, int64_t k_, bool transpose_a_,
           bool transpose_b_ = false)
      : m(m_), n(n_), k(k_), transpose_a(transpose_a_), transpose_b(transpose_b_) {
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& values, std::size_t size) {
      values.resize(size);
      for (float& v : values) v = normal(rng);
    };
    fill(a, static_cast<std::size_t>((transpose_a ? k * (m + 3) : m * (k + 3))));
    fill(b, static_cast<std::size_t>(transpose_b ? n * (k + 5) : k * (n + 5)));
    fill(x, static_cast<std::size_t>(m * (n + 7)));
    fill(bias, static_cast<std::size_t>(n));
    for (float v : a) a16.push_back(cpu::narrow(v));
    for (float v : b) b16.push_back(cpu::narrow(v));
  }

  [[nodiscard]] Gemm gemm(bool a_bf16, bool b_bf16, std::vector<float>& out) const {
    out.assign(static_cast<std::size_t>(m * (n + 7)), -7.0f);
    Gemm g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = {a_bf16 ? static_cast<const void*>(a16.data()) : a.data(), transpose_a ? m + 3 : k + 3,
           transpose_a, a_bf16};
    g.b = {b_bf16 ? static_cast<const void*>(b16.data()) : b.data(), transpose_b ? k + 5 : n + 5,
           transpose_b, b_bf16};
    g.out = out.data();
    g.ldc = n + 7;
    return g;
  }

  /// op(a)(i, p) and op(b)(p, j) as the product reads them (bf16 operands widened).
  [[nodiscard]] float a_at(int64_t i, int64_t p, bool bf16) const {
    const auto at = static_cast<std::size_t>(transpose_a ? p * (m + 3) + i : i * (k + 3) + p);
    return bf16 ? cpu::widen(a16[at]) : a[at];
  }
  [[nodiscard]] float b_at(int64_t p, int64_t j, bool bf16) const {
    const auto at = static_cast<std::size_t>(transpose_b ? j * (k + 5) + p : p * (n + 5) + j);
    return bf16 ? cpu::widen(b16[at]) : b[at];
  }

  /// out[i, j] as gemm.h promises it: blocks of 256 products along k, each one chain of fused
  /// multiply-adds from 0, the blocks added in order, then the bias.
  [[nodiscard]] float promised(int64_t i, int64_t j, bool a_bf16, bool b_bf16,
                               bool with_bias) const {
    constexpr int64_t kDepth = 256;
    float total = 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
      float block = 0.0f;
      for (int64_t p = p0; p < std::min(k, p0 + kDepth); ++p) {
        block = std::fma(a_at(i, p, a_bf16), b_at(p, j, b_bf16), block);
      }
      total = p0 == 0 ? block : total + block;
    }
    return with_bias ? total + bias[static_cast<std::size_t>(j)] : total;
  }
};

// The product of each case on one thread and on `threads` threads, bit for bit, the padding past
// each row untouched.
void expect_as_on_one_thread(const Operands& operands, int threads) {
  enum Epilogue { kNone, kBias, kReluBackward, kBiasRelu };
  cpu::ComputePool pool(threads);
  for (const bool a_bf16 : {false, true}) {
    for (const bool b_bf16 : {false, true}) {
      for (const Epilogue epilogue : {kNone, kBias, kReluBackward, kBiasRelu}) {
        std::vector<float> alone, split;
        Gemm one = operands.gemm(a_bf16, b_bf16, alone);
        Gemm many = operands.gemm(a_bf16, b_bf16, split);
        for (Gemm* g : {&one, &many}) {
          if (epilogue == kBias || epilogue == kBiasRelu) g->bias = operands.bias.data();
          if (epilogue == kReluBackward) g->relu_input = operands.x.data();
          g->relu = epilogue == kBiasRelu;
        }
        cpu::gemm(one, nullptr);
        cpu::gemm(many, &pool);
        const std::string where =
            "m=" + std::to_string(operands.m) + " n=" + std::to_string(operands.n) +
            " k=" + std::to_string(operands.k) + " ta=" + std::to_string(operands.transpose_a) +
            " a_bf16=" + std::to_string(a_bf16) + " b_bf16=" + std::to_string(b_bf16) +
            " epilogue=" + std::to_string(epilogue) + " threads=" + std::to_string(threads);
        for (std::size_t i = 0; i < alone.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(split[i]), std::bit_cast<uint32_t>(alone[i]))
              << where << " at " << i;
        }
      }
    }
  }
}

TEST(GemmDepthSplit, TwoDepthBlocksOnTwoThreadsHaveTheBitsOfOne) {
  std::mt19937 rng(41);
  for (const bool transpose_a : {false, true}) {
    expect_as_on_one_thread(Operands(rng, 40, 300, 500, transpose_a), 2);
    expect_as_on_one_thread(Operands(rng, 128, 512, 512, transpose_a), 2);
  }
}

TEST(GemmDepthSplit, ThreeDepthBlocksOnThreeThreadsHaveTheBitsOfOne) {
  std::mt19937 rng(43);
  for (const bool transpose_a : {false, true}) {
    expect_as_on_one_thread(Operands(rng, 30, 260, 700, transpose_a), 3);
  }
}

// A classifier's logits (n of a few classes) and narrower products still, op(a) and op(b) stored
// either way and each f32 or bf16, with and without a bias, on one thread and two. The shapes
// take the transposed product on each path: n at most half a register tile's columns (16 on
// AVX2, 32 on AVX-512), m at least a whole tile's, and under 1M multiply-adds (one thread).
TEST(GemmTransposed, FewColumnsOverManyRowsHaveThePromisedBits) {
  std::mt19937 rng(47);
  for (const auto& [m, n, k] :
       {std::array<int64_t, 3>{128, 10, 512}, std::array<int64_t, 3>{64, 10, 128},
        std::array<int64_t, 3>{48, 8, 520}, std::array<int64_t, 3>{100, 3, 700}}) {
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        const Operands operands(rng, m, n, k, transpose_a, transpose_b);
        for (const int bf16 : {0, 1, 2, 3}) {
          const bool a_bf16 = (bf16 & 1) != 0, b_bf16 = (bf16 & 2) != 0;
          for (const bool with_bias : {false, true}) {
            for (const int threads : {1, 2}) {
              cpu::ComputePool pool(threads);
              std::vector<float> out;
              Gemm g = operands.gemm(a_bf16, b_bf16, out);
              if (with_bias) g.bias = operands.bias.data();
              cpu::gemm(g, &pool);
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n + 7; ++j) {
                  const float want =
                      j < n ? operands.promised(i, j, a_bf16, b_bf16, with_bias) : -7.0f;
                  ASSERT_EQ(std::bit_cast<uint32_t>(out[static_cast<std::size_t>(i * (n + 7) + j)]),
                            std::bit_cast<uint32_t>(want))
                      << "m=" << m << " n=" << n << " k=" << k << " ta=" << transpose_a
                      << " tb=" << transpose_b << " a_bf16=" << a_bf16 << " b_bf16=" << b_bf16
                      << " bias=" << with_bias << " threads=" << threads << " at (" << i << ", "
                      << j << ")";
                }
              }
            }
          }
        }
      }
    }
  }
}

/// The same product with op(b) stored transposed: [n, k] with rows k + 5 long.
struct TransposedB {
  std::vector<float> b;
  std::vector<Bf16> b16;
  explicit TransposedB(const Operands& o) {
    b.assign(static_cast<std::size_t>(o.n * (o.k + 5)), 0.0f);
    for (int64_t j = 0; j < o.n; ++j) {
      for (int64_t p = 0; p < o.k; ++p)
        b[static_cast<std::size_t>(j * (o.k + 5) + p)] = o.b_at(p, j, false);
    }
    for (float v : b) b16.push_back(cpu::narrow(v));
  }
  void into(Gemm& g) const {
    g.b = {g.b.bf16 ? static_cast<const void*>(b16.data()) : b.data(), g.k + 5, true, g.b.bf16};
  }
};

enum class Ending { kNone, kBias, kReluBackward, kBiasRelu, kAccumulate, kResidual, kRoundBf16 };

/// Sets `ending` on g; false where it does not apply to g's output.
bool end_with(Gemm& g, Ending ending, const Operands& o) {
  switch (ending) {
    case Ending::kNone:
      return true;
    case Ending::kBias:
      g.bias = o.bias.data();
      return true;
    case Ending::kReluBackward:
      g.relu_input = g.out_bf16 ? nullptr : o.x.data();
      return !g.out_bf16;
    case Ending::kBiasRelu:
      g.bias = o.bias.data();
      g.relu = true;
      return true;
    case Ending::kAccumulate:
      g.accumulate = true;
      return !g.out_bf16;
    case Ending::kResidual:
      g.residual = o.x.data();
      return !g.out_bf16;
    case Ending::kRoundBf16:
      g.round_bf16 = true;
      return !g.out_bf16;
  }
  return false;
}

TEST(GemmShallow, ReadingOpBWhereItLiesGivesThePackedBits) {
  std::mt19937 rng(53);
  const std::vector<std::array<int64_t, 3>> shapes{
      {1, 1, 1},    {5, 17, 2},   {7, 32, 3},   {15, 45, 8},  {32, 100, 9},
      {33, 70, 15}, {14, 64, 16}, {29, 40, 17}, {64, 2048, 9}};  // the last on both threads
  cpu::ComputePool pool(2);
  for (const auto& [m, n, k] : shapes) {
    for (const bool transpose_a : {false, true}) {
      const Operands o(rng, m, n, k, transpose_a);
      const TransposedB packed(o);
      for (const int kind : {0, 1, 2, 3, 4, 5}) {  // bit 0: operands bf16; 1-2: precision, output
        const bool bf16_operands = (kind & 1) != 0;
        const auto precision = kind >= 2 ? cpu::GemmPrecision::kBf16 : cpu::GemmPrecision::kF32;
        const bool out_bf16 = kind >= 4;
        for (const Ending ending :
             {Ending::kNone, Ending::kBias, Ending::kReluBackward, Ending::kBiasRelu,
              Ending::kAccumulate, Ending::kResidual, Ending::kRoundBf16}) {
          std::vector<float> shallow_out, packed_out;
          Gemm shallow = o.gemm(bf16_operands, bf16_operands, shallow_out);
          Gemm reference = o.gemm(bf16_operands, bf16_operands, packed_out);
          std::vector<Bf16> shallow16(shallow_out.size(), Bf16{0x7fc1}), packed16 = shallow16;
          bool applies = true;
          for (Gemm* g : {&shallow, &reference}) {
            g->precision = precision;
            g->out_bf16 = out_bf16;
            if (out_bf16) g->out = g == &shallow ? shallow16.data() : packed16.data();
            applies = end_with(*g, ending, o) &&
                      !(ending == Ending::kRoundBf16 && precision == cpu::GemmPrecision::kF32);
          }
          if (!applies) continue;
          packed.into(reference);
          cpu::gemm(shallow, &pool);
          cpu::gemm(reference, &pool);
          const std::string where =
              "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
              " ta=" + std::to_string(transpose_a) + " kind=" + std::to_string(kind) +
              " ending=" + std::to_string(static_cast<int>(ending));
          for (std::size_t i = 0; i < shallow_out.size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(shallow_out[i]),
                      std::bit_cast<uint32_t>(packed_out[i]))
                << where << " at " << i;
            ASSERT_EQ(shallow16[i].bits, packed16[i].bits) << where << " at " << i;
          }
        }
      }
    }
  }
}

// Every value a bias alone makes (the products are zero): ties, denormals, NaN payloads,
// infinities and zeros of both signs, rounded as narrow() rounds them, whether the product is
// shallow, packed, or packed over several depth blocks (a staged bf16 output).
TEST(GemmShallow, Bf16OutputsRoundAsNarrowRoundsWhateverThePath) {
  const std::vector<uint32_t> bits{0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x00000001u, 0x80000001u,
                                   0x007fffffu, 0x007f8000u, 0x00008000u, 0x00018000u, 0x7f800001u,
                                   0xffa00000u, 0x7fc12345u, 0x7f800000u, 0xff800000u, 0x00000000u,
                                   0x80000000u, 0x7f7fffffu, 0x7f7f8000u, 0x00800000u, 0x807fffffu};
  std::mt19937 rng(59);
  for (const auto& [k, transpose_b] :
       {std::pair<int64_t, bool>{3, false}, {3, true}, {600, true}}) {
    Operands o(rng, 9, static_cast<int64_t>(bits.size()), k, false, transpose_b);
    std::fill(o.a.begin(), o.a.end(), 0.0f);
    std::fill(o.a16.begin(), o.a16.end(), Bf16{});
    for (std::size_t j = 0; j < bits.size(); ++j) o.bias[j] = std::bit_cast<float>(bits[j]);
    std::vector<float> unused;
    Gemm g = o.gemm(true, true, unused);
    std::vector<Bf16> out(unused.size(), Bf16{0x1234});
    g.out = out.data();
    g.out_bf16 = true;
    g.precision = cpu::GemmPrecision::kBf16;
    g.bias = o.bias.data();
    cpu::gemm(g, nullptr);
    for (int64_t i = 0; i < o.m; ++i) {
      for (std::size_t j = 0; j < bits.size(); ++j) {
        const Bf16 want = cpu::narrow(0.0f + o.bias[j]);
        ASSERT_EQ(out[static_cast<std::size_t>(i) * (bits.size() + 7) + j].bits, want.bits)
            << "k=" << k << " tb=" << transpose_b << " bias bits " << std::hex << bits[j];
      }
    }
  }
}

// Products of values near the smallest normal, whose sums are often denormal: each bf16 output
// is the same product's f32 output rounded as narrow() rounds it, shallow and packed.
TEST(GemmShallow, Bf16OutputsOfTinySumsAreTheF32OutputsNarrowed) {
  std::mt19937 rng(61);
  for (const auto& [k, transpose_b] :
       {std::pair<int64_t, bool>{9, false}, {9, true}, {40, true}, {600, true}}) {
    Operands o(rng, 20, 45, k, false, transpose_b);
    for (auto* values : {&o.a, &o.b}) {
      for (float& v : *values) v = std::ldexp(v, -63);
    }
    for (std::size_t i = 0; i < o.a.size(); ++i) o.a16[i] = cpu::narrow(o.a[i]);
    for (std::size_t i = 0; i < o.b.size(); ++i) o.b16[i] = cpu::narrow(o.b[i]);
    std::vector<float> wide;
    Gemm g = o.gemm(true, true, wide);
    g.precision = cpu::GemmPrecision::kBf16;
    cpu::gemm(g, nullptr);
    std::vector<Bf16> narrow_out(wide.size(), Bf16{0x1234});
    g.out = narrow_out.data();
    g.out_bf16 = true;
    cpu::gemm(g, nullptr);
    int denormal = 0;
    for (int64_t i = 0; i < o.m; ++i) {
      for (int64_t j = 0; j < o.n; ++j) {
        const auto at = static_cast<std::size_t>(i * (o.n + 7) + j);
        denormal += std::fpclassify(wide[at]) == FP_SUBNORMAL;
        ASSERT_EQ(narrow_out[at].bits, cpu::narrow(wide[at]).bits)
            << "k=" << k << " tb=" << transpose_b << " at (" << i << ", " << j << ")";
      }
    }
    // Sums this small are denormal unless the path flushes them (vdpbf16ps does): either way the
    // rounding must agree.
    RecordProperty("denormal_sums_k" + std::to_string(k), denormal);
  }
}

}  // namespace
}  // namespace axle::testing
