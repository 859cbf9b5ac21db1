// Tests backends/cpu/bf16_pairs.h (the AVX512_BF16 product of bf16 pairs and the layouts
// attention gives it) against plain loops: the product exact on values whose sums f32 holds
// exactly and close on any, over odd sizes, row strides and rows that start mid-word's
// alignment; the layouts bit for bit as element.h's scalar narrow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "axle/backends/cpu/bf16_pairs.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/isa.h"

namespace axle::cpu {
namespace {

#if defined(__x86_64__)

// The product needs vdpbf16ps; on a processor without it there is nothing here to run.
bool has_pairs() { return detected_cpu_isa() >= CpuIsa::kAvx512Bf16; }

uint16_t bits_of(float x) { return narrow(x).bits; }
float value_of(uint16_t bits) { return widen(Bf16{bits}); }

struct PairCase {
  int64_t m, n, pairs, lda, ldb, ldc;
  bool accumulate;
  bool a_transposed = false;  // a(i, s) at word s * lda + i
};

// Runs one product on bf16 values drawn by `draw` and compares with the double sums, exactly or
// within `relative` of the sum of the terms' magnitudes. The a rows start one bf16 after an
// aligned word, so every broadcast word straddles an alignment.
template <class Draw>
void check_product(const PairCase& k, Draw draw, double relative, const std::string& what) {
  const int64_t a_lines = k.a_transposed ? k.pairs : k.m;
  std::vector<uint16_t> a16(static_cast<std::size_t>(2 * a_lines * k.lda + 4));
  std::vector<uint16_t> b16(static_cast<std::size_t>(2 * k.pairs * k.ldb));
  std::vector<float> c(static_cast<std::size_t>(k.m * k.ldc));
  for (uint16_t& v : a16) v = bits_of(draw());
  for (uint16_t& v : b16) v = bits_of(draw());
  for (float& v : c) v = value_of(bits_of(draw()));
  const uint16_t* a_start = a16.data() + 1;
  std::vector<float> got = c;
  avx512_pair_gemm({k.m, k.n, k.pairs, reinterpret_cast<const uint32_t*>(a_start), k.lda,
                    reinterpret_cast<const uint32_t*>(b16.data()), k.ldb, got.data(), k.ldc,
                    k.accumulate, k.a_transposed});
  for (int64_t i = 0; i < k.m; ++i) {
    for (int64_t j = 0; j < k.n; ++j) {
      const std::size_t at = static_cast<std::size_t>(i * k.ldc + j);
      double sum = k.accumulate ? c[at] : 0.0, magnitude = std::abs(sum);
      for (int64_t s = 0; s < k.pairs; ++s) {
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t a_word = k.a_transposed ? s * k.lda + i : i * k.lda + s;
          const double term =
              double{value_of(a_start[2 * a_word + h])} *
              double{value_of(b16[static_cast<std::size_t>(2 * (s * k.ldb + j) + h)])};
          sum += term;
          magnitude += std::abs(term);
        }
      }
      ASSERT_LE(std::abs(got[at] - sum), relative * magnitude)
          << what << ": c[" << i << ", " << j << "] m=" << k.m << " n=" << k.n
          << " pairs=" << k.pairs << " accumulate=" << k.accumulate
          << " a_transposed=" << k.a_transposed;
    }
  }
}

TEST(Bf16Pairs, ProductSumsEveryPairInF32) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(31);
  std::uniform_int_distribution<int64_t> size(1, 80), depth(1, 40);
  std::uniform_int_distribution<int> small(-8, 8);
  std::normal_distribution<float> normal;
  for (int round = 0; round < 40; ++round) {
    const int64_t m = size(rng), n = size(rng), pairs = depth(rng);
    const PairCase k{m, n, pairs, pairs + 3, n + 5, n + 1, (rng() & 1) != 0};
    // Small integers: every product and partial sum is exact in f32, so the sums are too.
    check_product(
        k, [&] { return static_cast<float>(small(rng)); }, 0.0, "integers");
    check_product(
        k, [&] { return normal(rng); }, 1e-6, "normal values");
  }
}

TEST(Bf16Pairs, ProductReadsATransposedAsItsColumns) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(34);
  std::uniform_int_distribution<int64_t> size(1, 80), depth(1, 40);
  std::uniform_int_distribution<int> small(-8, 8);
  std::normal_distribution<float> normal;
  for (int round = 0; round < 40; ++round) {
    const int64_t m = size(rng), n = size(rng), pairs = depth(rng);
    const PairCase k{m, n, pairs, m + 3, n + 5, n + 1, (rng() & 1) != 0, true};
    check_product(
        k, [&] { return static_cast<float>(small(rng)); }, 0.0, "integers");
    check_product(
        k, [&] { return normal(rng); }, 1e-6, "normal values");
  }
}

TEST(Bf16Pairs, RowsArePairedAsTheScalarNarrowRoundsThem) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(32);
  std::normal_distribution<float> normal(0, 100);
  for (const auto& [rows, cols] : {std::pair{7, 37}, std::pair{64, 64}, std::pair{1, 16}}) {
    const int64_t lds = cols + 3, ldo = cols + 2, pairs = (rows + 1) / 2;
    std::vector<float> src(static_cast<std::size_t>(rows * lds));
    for (float& v : src) v = normal(rng);
    src[5] = std::numeric_limits<float>::quiet_NaN();
    src[static_cast<std::size_t>((rows - 1) * lds + 1)] = -std::numeric_limits<float>::infinity();
    std::vector<uint16_t> src16(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) src16[i] = bits_of(src[i]);
    std::vector<uint32_t> from_f32(static_cast<std::size_t>(pairs * ldo), 0xdeadbeef);
    std::vector<uint32_t> from_bf16 = from_f32;
    avx512_pair_rows(src.data(), rows, cols, lds, from_f32.data(), ldo);
    avx512_pair_rows(src16.data(), rows, cols, lds, from_bf16.data(), ldo);
    for (int64_t s = 0; s < pairs; ++s) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint32_t low = bits_of(src[static_cast<std::size_t>(2 * s * lds + c)]);
        const uint32_t high =
            2 * s + 1 < rows ? bits_of(src[static_cast<std::size_t>((2 * s + 1) * lds + c)]) : 0;
        const std::size_t at = static_cast<std::size_t>(s * ldo + c);
        ASSERT_EQ(from_f32[at], low | high << 16) << "pair " << s << " column " << c;
        ASSERT_EQ(from_bf16[at], low | high << 16) << "pair " << s << " column " << c;
      }
      // Past the columns nothing is written.
      EXPECT_EQ(from_f32[static_cast<std::size_t>(s * ldo + cols)], 0xdeadbeefu);
    }
  }
}

TEST(Bf16Pairs, NarrowedRowsEndOnAWholeWord) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(33);
  std::normal_distribution<float> normal(0, 3);
  for (const int64_t cols : {int64_t{33}, int64_t{64}}) {
    const int64_t rows = 5, lds = 70, ldo = cols + 1 + (cols % 2);
    std::vector<float> src(static_cast<std::size_t>(rows * lds));
    for (float& v : src) v = normal(rng);
    std::vector<uint16_t> out(static_cast<std::size_t>(rows * ldo), 0xffff);
    avx512_narrow_rows(src.data(), rows, cols, lds, out.data(), ldo);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(out[static_cast<std::size_t>(r * ldo + c)],
                  bits_of(src[static_cast<std::size_t>(r * lds + c)]))
            << r << ", " << c;
      }
      if (cols % 2 != 0) {
        EXPECT_EQ(out[static_cast<std::size_t>(r * ldo + cols)], 0) << r;
      }
    }
  }
}

TEST(Bf16Pairs, ScaledRowsAreRoundedAsTheScalarNarrowRoundsTheProduct) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(35);
  std::normal_distribution<float> normal(0, 3);
  for (const int64_t cols : {int64_t{7}, int64_t{32}, int64_t{45}}) {
    const int64_t rows = 6, lds = cols + 3, ldo = cols + 5;
    const float factor = 0.17677669f;
    std::vector<float> src(static_cast<std::size_t>(rows * lds));
    for (float& v : src) v = normal(rng);
    src[2] = std::numeric_limits<float>::quiet_NaN();
    src[static_cast<std::size_t>(lds + 1)] = std::numeric_limits<float>::infinity();
    std::vector<uint16_t> out(static_cast<std::size_t>(rows * ldo), 0xabcd);
    avx512_narrow_scaled_rows(src.data(), rows, cols, lds, factor, out.data(), ldo);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(out[static_cast<std::size_t>(r * ldo + c)],
                  bits_of(src[static_cast<std::size_t>(r * lds + c)] * factor))
            << r << ", " << c;
      }
      // Past the columns nothing is written.
      EXPECT_EQ(out[static_cast<std::size_t>(r * ldo + cols)], 0xabcd) << r;
    }
  }
}

TEST(Bf16Pairs, RowTermsAreEachRowsDotAndTheValueAfterIt) {
  if (!has_pairs()) GTEST_SKIP() << "this processor lacks AVX512_BF16";
  std::mt19937 rng(36);
  std::normal_distribution<float> normal(0, 2);
  for (const int64_t cols : {int64_t{5}, int64_t{32}, int64_t{40}}) {
    const int64_t rows = 9, g_row = cols + 6;
    std::vector<float> forward(static_cast<std::size_t>(rows * (cols + 1)));
    std::vector<uint16_t> grad(static_cast<std::size_t>(rows * g_row));
    for (float& v : forward) v = normal(rng);
    for (uint16_t& v : grad) v = bits_of(normal(rng));
    std::vector<float> d(static_cast<std::size_t>(rows)), lse(d.size());
    avx512_row_terms(forward.data(), grad.data(), g_row, rows, cols, d.data(), lse.data());
    for (int64_t i = 0; i < rows; ++i) {
      double dot = 0, magnitude = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double term = double{value_of(grad[static_cast<std::size_t>(i * g_row + c)])} *
                            double{forward[static_cast<std::size_t>(i * (cols + 1) + c)]};
        dot += term;
        magnitude += std::abs(term);
      }
      EXPECT_NEAR(d[static_cast<std::size_t>(i)], dot, 4e-7 * magnitude) << "row " << i;
      EXPECT_EQ(lse[static_cast<std::size_t>(i)],
                forward[static_cast<std::size_t>(i * (cols + 1) + cols)])
          << "row " << i;
    }
  }
}

#endif

}  // namespace
}  // namespace axle::cpu
