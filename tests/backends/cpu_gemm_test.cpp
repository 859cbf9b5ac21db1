// Tests backends/cpu/gemm.h on every instruction-set path this processor has: products against
// plain loops that sum as the kernels promise (blocks of 256 products along k, each one chain of
// fused multiply-adds from 0, the blocks added in order), over shapes that cut register tiles and
// cache blocks at every edge, both storage orders, f32 and bf16 operands and outputs, row
// strides wider than the rows, accumulation, and one to three threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/vector_math.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

using cpu::Bf16;
using cpu::CpuIsa;
using cpu::Gemm;
using cpu::GemmPrecision;

constexpr int64_t kSumDepth = 256;  // gemm.h's block of k

template <class F>
std::string invalid_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Every path this processor has, the generic one (Eigen) aside: its f32 sums are Eigen's.
std::vector<CpuIsa> kernel_paths() {
  std::vector<CpuIsa> paths;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (isa <= cpu::detected_cpu_isa()) paths.push_back(isa);
  }
  return paths;
}

/// Sets the path for a test's scope and restores the one before.
class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : before_(cpu::cpu_isa()) { cpu::set_cpu_isa(isa); }
  ~IsaScope() { cpu::set_cpu_isa(before_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  CpuIsa before_;
};

/// A product's operands and output, stored as the kernels read them.
struct Problem {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  bool a_bf16 = false, b_bf16 = false, out_bf16 = false, accumulate = false;
  GemmPrecision precision = GemmPrecision::kF32;
  int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, out;  // f32 values (bf16 operands hold their exact values here)
  std::vector<Bf16> a16, b16, out16;

  [[nodiscard]] std::string describe() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " ta=" + std::to_string(transpose_a) + " tb=" + std::to_string(transpose_b) +
           " a_bf16=" + std::to_string(a_bf16) + " b_bf16=" + std::to_string(b_bf16) +
           " out_bf16=" + std::to_string(out_bf16) + " accumulate=" + std::to_string(accumulate) +
           " precision=" + (precision == GemmPrecision::kBf16 ? "bf16" : "f32");
  }
  [[nodiscard]] float a_at(int64_t i, int64_t p) const {
    return a[static_cast<std::size_t>(transpose_a ? p * lda + i : i * lda + p)];
  }
  [[nodiscard]] float b_at(int64_t p, int64_t j) const {
    return b[static_cast<std::size_t>(transpose_b ? j * ldb + p : p * ldb + j)];
  }
  [[nodiscard]] Gemm gemm() {
    Gemm g;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = {a_bf16 ? static_cast<const void*>(a16.data()) : a.data(), lda, transpose_a, a_bf16};
    g.b = {b_bf16 ? static_cast<const void*>(b16.data()) : b.data(), ldb, transpose_b, b_bf16};
    g.out = out_bf16 ? static_cast<void*>(out16.data()) : out.data();
    g.ldc = ldc;
    g.out_bf16 = out_bf16;
    g.accumulate = accumulate;
    g.precision = precision;
    return g;
  }
  [[nodiscard]] float result(int64_t i, int64_t j) const {
    const auto at = static_cast<std::size_t>(i * ldc + j);
    return out_bf16 ? cpu::widen(out16[at]) : out[at];
  }
};

Problem make_problem(std::mt19937& rng, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                     bool a_bf16, bool b_bf16, bool out_bf16, bool accumulate,
                     GemmPrecision precision) {
  Problem p{m, n, k, ta, tb, a_bf16, b_bf16, out_bf16, accumulate, precision};
  p.lda = (ta ? m : k) + 3;  // rows wider than the matrix
  p.ldb = (tb ? k : n) + 5;
  p.ldc = n + 7;
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& values, std::vector<Bf16>& halves, int64_t size, bool bf16) {
    values.resize(static_cast<std::size_t>(size));
    halves.resize(static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = normal(rng);
      halves[i] = cpu::narrow(values[i]);
      if (bf16) values[i] = cpu::widen(halves[i]);
    }
  };
  fill(p.a, p.a16, (ta ? k : m) * p.lda, a_bf16);
  fill(p.b, p.b16, (tb ? n : k) * p.ldb, b_bf16);
  std::vector<Bf16> unused;
  fill(p.out, unused, m * p.ldc, false);       // accumulated into, or overwritten
  p.out16.assign(p.out.size(), Bf16{0x7fc0});  // NaN: an entry left unwritten shows
  return p;
}

/// out[i, j] as gemm.h sums it, from the problem's values before the call (`before`).
float promised_sum(const Problem& p, const std::vector<float>& before, int64_t i, int64_t j) {
  const bool round = p.precision == GemmPrecision::kBf16;
  float total = p.accumulate ? before[static_cast<std::size_t>(i * p.ldc + j)] : 0.0f;
  bool started = p.accumulate;
  for (int64_t p0 = 0; p0 < p.k; p0 += kSumDepth) {
    float block = 0.0f;
    for (int64_t q = p0; q < std::min(p.k, p0 + kSumDepth); ++q) {
      float x = p.a_at(i, q), y = p.b_at(q, j);
      if (round) {
        x = cpu::widen(cpu::narrow(x));
        y = cpu::widen(cpu::narrow(y));
      }
      block = std::fma(x, y, block);
    }
    total = started ? total + block : block;
    started = true;
  }
  return p.out_bf16 ? cpu::widen(cpu::narrow(total)) : total;
}

/// Runs the product and checks every entry: equal to the promised sum, or (vdpbf16ps, which adds
/// products in pairs) within a few roundings of the exact sum. Entries outside the output's rows
/// must stay as they were.
void expect_product(Problem& p, int threads) {
  const std::vector<float> before = p.out;
  cpu::ComputePool pool(threads);
  cpu::gemm(p.gemm(), threads > 1 ? &pool : nullptr);
  const bool pairs = p.precision == GemmPrecision::kBf16 && cpu::cpu_isa() == CpuIsa::kAvx512Bf16;
  int failures = 0;
  for (int64_t i = 0; i < p.m && failures < 5; ++i) {
    for (int64_t j = 0; j < p.ldc && failures < 5; ++j) {
      if (j >= p.n) {
        if (!p.out_bf16 && p.out[static_cast<std::size_t>(i * p.ldc + j)] !=
                               before[static_cast<std::size_t>(i * p.ldc + j)]) {
          ADD_FAILURE() << p.describe() << ": wrote past the row at (" << i << ", " << j << ")";
          ++failures;
        }
        continue;
      }
      const float got = p.result(i, j), want = promised_sum(p, before, i, j);
      if (!pairs) {
        if (got != want) {
          ADD_FAILURE() << p.describe() << " on " << cpu::cpu_isa_name(cpu::cpu_isa())
                        << ", threads=" << threads << ": (" << i << ", " << j << ") is " << got
                        << ", the promised sum " << want;
          ++failures;
        }
        continue;
      }
      double exact = p.accumulate ? before[static_cast<std::size_t>(i * p.ldc + j)] : 0.0;
      double scale = std::abs(exact);
      for (int64_t q = 0; q < p.k; ++q) {
        const double term = static_cast<double>(cpu::widen(cpu::narrow(p.a_at(i, q)))) *
                            cpu::widen(cpu::narrow(p.b_at(q, j)));
        exact += term;
        scale += std::abs(term);
      }
      // f32 sums: a rounding per pair and per block; a bf16 output: its own rounding.
      const double bound = (p.out_bf16 ? 0x1p-8 * std::abs(exact) : 0.0) +
                           (static_cast<double>(p.k) / 2 + 8) * 0x1p-24 * scale + 1e-30;
      if (!(std::abs(got - exact) <= bound)) {
        ADD_FAILURE() << p.describe() << " on avx512_bf16, threads=" << threads << ": (" << i
                      << ", " << j << ") is " << got << ", exactly " << exact << " (bound " << bound
                      << ")";
        ++failures;
      }
    }
  }
}

class GemmPath : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(GemmPath, F32MatchesThePromisedSumsOnRandomShapes) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> size(1, 70);
  for (int round = 0; round < 120; ++round) {
    const int64_t m = size(rng), n = size(rng), k = size(rng);
    Problem p = make_problem(rng, m, n, k, rng() & 1, rng() & 1, false, false, false, rng() & 1,
                             GemmPrecision::kF32);
    expect_product(p, 1 + round % 3);
  }
}

TEST_P(GemmPath, F32MatchesThePromisedSumsAcrossCacheBlocks) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(8);
  // Past the depth block (256 products), the row block and the column block (512).
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {230, 531, 530}, {29, 1100, 257}, {700, 33, 1025}, {1, 1, 3000}, {15, 47, 511}}) {
    for (const bool ta : {false, true}) {
      Problem p =
          make_problem(rng, m, n, k, ta, !ta, false, false, false, false, GemmPrecision::kF32);
      expect_product(p, 2);
    }
  }
}

TEST_P(GemmPath, Bf16ProductsRoundOperandsAndSumInF32) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> size(1, 60);
  for (int round = 0; round < 120; ++round) {
    const int64_t m = size(rng), n = size(rng), k = size(rng) * (round % 7 == 0 ? 13 : 1);
    const bool out_bf16 = rng() & 1;
    Problem p = make_problem(rng, m, n, k, rng() & 1, rng() & 1, rng() & 1, rng() & 1, out_bf16,
                             !out_bf16 && (rng() & 1), GemmPrecision::kBf16);
    expect_product(p, 1 + round % 2);
  }
}

// bf16 products past the depth block (512 products), the row blocks (op(a) across its rows is
// packed in blocks of 504 rows, else 112) and the column block, with f32 and bf16 (staged)
// outputs.
TEST_P(GemmPath, Bf16ProductsMatchThePromisedSumsAcrossCacheBlocks) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(12);
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {700, 33, 1100}, {530, 140, 600}, {1030, 20, 530}, {20, 600, 1030}}) {
    for (const bool ta : {false, true}) {
      for (const bool out_bf16 : {false, true}) {
        Problem p =
            make_problem(rng, m, n, k, ta, !ta, true, true, out_bf16, false, GemmPrecision::kBf16);
        expect_product(p, 2);
      }
    }
  }
}

TEST_P(GemmPath, F32WithBf16OperandsWidensThemExactly) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(10);
  for (const bool out_bf16 : {false, true}) {
    Problem p = make_problem(rng, 37, 45, 300, false, true, true, false, out_bf16, false,
                             GemmPrecision::kF32);
    expect_product(p, 2);
  }
}

TEST_P(GemmPath, F32BitsDoNotDependOnThePathOrTheThreads) {
  std::mt19937 rng(11);
  Problem p = make_problem(rng, 301, 133, 700, false, true, false, false, false, false,
                           GemmPrecision::kF32);
  const std::vector<float> initial = p.out;
  std::vector<float> reference;
  {
    const IsaScope scope(CpuIsa::kAvx2);
    cpu::gemm(p.gemm(), nullptr);
    reference = p.out;
  }
  const IsaScope scope(GetParam());
  for (const int threads : {1, 2, 3}) {
    p.out = initial;
    cpu::ComputePool pool(threads);
    cpu::gemm(p.gemm(), &pool);
    EXPECT_EQ(p.out, reference) << "threads=" << threads;
  }
}

TEST_P(GemmPath, NanAndInfinityPropagate) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(12);
  for (const GemmPrecision precision : {GemmPrecision::kF32, GemmPrecision::kBf16}) {
    Problem p = make_problem(rng, 20, 40, 50, false, false, false, false, false, false, precision);
    p.a[static_cast<std::size_t>(3 * p.lda + 7)] = std::numeric_limits<float>::quiet_NaN();
    p.b[static_cast<std::size_t>(9 * p.ldb + 33)] = std::numeric_limits<float>::infinity();
    cpu::gemm(p.gemm(), nullptr);
    for (int64_t j = 0; j < p.n; ++j) EXPECT_TRUE(std::isnan(p.result(3, j))) << j;
    for (int64_t i = 0; i < p.m; ++i) {
      if (i == 3) continue;
      EXPECT_TRUE(std::isinf(p.result(i, 33))) << i;
    }
  }
}

TEST_P(GemmPath, DirectProductsAreOneChainPerElementFromTheOutput) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> size(1, 80);
  for (int round = 0; round < 60; ++round) {
    const int64_t m = size(rng), n = size(rng), depth = size(rng);
    const bool transposed = rng() & 1, accumulate = rng() & 1;
    // a(i, p) at a[i * a_row + p * a_col]; rows wider than the matrices.
    const int64_t a_row = transposed ? 1 : depth + 2, a_col = transposed ? m + 3 : 1;
    const int64_t ldb = n + 5, ldc = n + 1;
    std::vector<float> a(static_cast<std::size_t>((transposed ? depth * a_col : m * a_row) + 4));
    std::vector<float> b(static_cast<std::size_t>(depth * ldb)),
        c(static_cast<std::size_t>(m * ldc));
    for (float& v : a) v = normal(rng);
    for (float& v : b) v = normal(rng);
    for (float& v : c) v = normal(rng);
    std::vector<float> want = c;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float sum = accumulate ? c[static_cast<std::size_t>(i * ldc + j)] : 0.0f;
        for (int64_t q = 0; q < depth; ++q) {
          sum = std::fma(a[static_cast<std::size_t>(i * a_row + q * a_col)],
                         b[static_cast<std::size_t>(q * ldb + j)], sum);
        }
        want[static_cast<std::size_t>(i * ldc + j)] = sum;
      }
    }
    cpu::direct_gemm(
        {m, n, depth, a.data(), a_row, a_col, b.data(), ldb, c.data(), ldc, accumulate});
    ASSERT_EQ(c, want) << "m=" << m << " n=" << n << " depth=" << depth
                       << " transposed=" << transposed << " accumulate=" << accumulate;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, GemmPath, ::testing::ValuesIn(kernel_paths()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(cpu::cpu_isa_name(info.param));
                         });

TEST(Gemm, EmptyContractionWritesZerosOrKeepsTheAccumulator) {
  std::vector<float> out(6, 5.0f);
  Gemm g;
  g.m = 2;
  g.n = 3;
  g.k = 0;
  g.out = out.data();
  g.ldc = 3;
  g.accumulate = true;
  cpu::gemm(g, nullptr);
  EXPECT_EQ(out, std::vector<float>(6, 5.0f));
  g.accumulate = false;
  cpu::gemm(g, nullptr);
  EXPECT_EQ(out, std::vector<float>(6, 0.0f));
}

// round_bf16 stores the values of a bf16 output as f32: through each path's staged and unstaged
// outputs (k past the depth block), with a bias, on one and two threads.
TEST_P(GemmPath, Bf16ValuesAsF32AreTheBf16OutputWidened) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {37, 45, 60}, {130, 70, 700}, {5, 600, 300}, {1, 1, 3}}) {
    Problem p =
        make_problem(rng, m, n, k, false, true, true, true, true, false, GemmPrecision::kBf16);
    std::vector<float> bias(static_cast<std::size_t>(n));
    for (float& value : bias) value = normal(rng);
    for (const int threads : {1, 2}) {
      cpu::ComputePool pool(threads);
      Gemm g = p.gemm();
      g.bias = bias.data();
      cpu::gemm(g, &pool);
      std::vector<float> values(p.out.size(), -1.0f);
      g.out = values.data();
      g.out_bf16 = false;
      g.round_bf16 = true;
      cpu::gemm(g, &pool);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const auto at = static_cast<std::size_t>(i * p.ldc + j);
          ASSERT_EQ(values[at], cpu::widen(p.out16[at]))
              << p.describe() << " threads=" << threads << " at (" << i << ", " << j << ")";
        }
      }
    }
  }
}

// A residual (Gemm::residual) is added to each value as it would be stored: after the bias and
// the rounding to bf16 values, whatever the depth blocks, the path and the threads.
TEST_P(GemmPath, AResidualIsAddedToTheValuesAsStored) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(14);
  std::normal_distribution<float> normal;
  for (const bool bf16_values : {false, true}) {
    for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
             {37, 45, 60}, {130, 70, 700}, {5, 600, 300}, {1, 1, 3}}) {
      const GemmPrecision precision = bf16_values ? GemmPrecision::kBf16 : GemmPrecision::kF32;
      Problem p = make_problem(rng, m, n, k, false, true, bf16_values, bf16_values, false, false,
                               precision);
      std::vector<float> bias(static_cast<std::size_t>(n)), residual(p.out.size());
      for (float& value : bias) value = normal(rng);
      for (float& value : residual) value = 4 * normal(rng);
      for (const int threads : {1, 2}) {
        cpu::ComputePool pool(threads);
        Gemm g = p.gemm();
        g.bias = bias.data();
        g.round_bf16 = bf16_values;
        cpu::gemm(g, &pool);
        const std::vector<float> stored = p.out;
        g.residual = residual.data();
        cpu::gemm(g, &pool);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const auto at = static_cast<std::size_t>(i * p.ldc + j);
            ASSERT_EQ(p.out[at], residual[at] + stored[at])
                << p.describe() << " threads=" << threads << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// An epilogue on each shape, f32 and bf16 outputs, one thread and two: the product is computed
// once plainly (with a bias of normal values, `specials` first); `want` turns its stored rows
// (as f32, with x, the epilogue's operand in the output's values, alongside) into the expected
// ones, and `set` turns the epilogue on. Outputs are compared bit for bit.
template <class Want, class Set>
void expect_epilogue(CpuIsa isa, uint32_t seed, std::span<const float> specials, Want want,
                     Set set) {
  const IsaScope scope(isa);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (const bool out_bf16 : {false, true}) {
    for (const auto& [m, n, k] :
         std::vector<std::array<int64_t, 3>>{{37, 45, 60}, {130, 70, 700}, {5, 600, 10}}) {
      const GemmPrecision precision = out_bf16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
      Problem p =
          make_problem(rng, m, n, k, false, true, out_bf16, out_bf16, out_bf16, false, precision);
      std::vector<float> bias(static_cast<std::size_t>(n)), x(p.out.size());
      for (float& value : bias) value = normal(rng);
      std::copy(specials.begin(), specials.end(), bias.begin());
      for (float& value : x) value = cpu::widen(cpu::narrow(2 * normal(rng)));
      std::copy(specials.begin(), specials.end(), x.begin());
      std::vector<Bf16> x16(x.size());
      std::transform(x.begin(), x.end(), x16.begin(), [](float v) { return cpu::narrow(v); });
      const void* x_values = out_bf16 ? static_cast<const void*>(x16.data()) : x.data();
      for (const int threads : {1, 2}) {
        cpu::ComputePool pool(threads);
        Gemm g = p.gemm();
        g.bias = bias.data();
        cpu::gemm(g, &pool);
        std::vector<float> expected(p.out.size());
        for (int64_t i = 0; i < m; ++i) {
          const auto row = static_cast<std::size_t>(i * p.ldc);
          for (int64_t j = 0; j < n; ++j) expected[row + j] = p.result(i, j);
          want(expected.data() + row, x.data() + row, n);
          for (int64_t j = 0; out_bf16 && j < n; ++j) {
            expected[row + j] = cpu::widen(cpu::narrow(expected[row + j]));
          }
        }
        set(g, x_values);
        cpu::gemm(g, &pool);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const float want_value = expected[static_cast<std::size_t>(i * p.ldc + j)];
            ASSERT_EQ(std::bit_cast<uint32_t>(p.result(i, j)), std::bit_cast<uint32_t>(want_value))
                << p.describe() << " threads=" << threads << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// gelu's backward on the output (Gemm::gelu_input) gives the bits of the product stored, then
// gelu_backward_f32 on it as kGeluBackward runs it (bf16 widened and rounded back).
TEST_P(GemmPath, GeluBackwardOnTheOutputIsTheProductThenGeluBackward) {
  expect_epilogue(
      GetParam(), 13, {},
      [](float* v, const float* x, int64_t n) { cpu::gelu_backward_f32(v, x, v, n); },
      [](Gemm& g, const void* x) { g.gelu_input = x; });
}

// relu's backward on the output (Gemm::relu_input) keeps the product stored where x > 0 and
// writes +0 elsewhere (where(x > 0, v, 0)).
TEST_P(GemmPath, ReluBackwardOnTheOutputKeepsTheProductWhereXIsAboveZero) {
  const float specials[] = {0.0f, -0.0f, std::nanf(""), INFINITY, -INFINITY, -1e-30f};
  expect_epilogue(
      GetParam(), 17, specials,
      [](float* v, const float* x, int64_t n) {
        for (int64_t j = 0; j < n; ++j) v[j] = x[j] > 0.0f ? v[j] : 0.0f;
      },
      [](Gemm& g, const void* x) { g.relu_input = x; });
}

// relu on the output (Gemm::relu), after the bias: kRelu's v < 0 ? 0 : v (NaN and -0 kept).
TEST_P(GemmPath, ReluOnTheOutputIsTheProductThenRelu) {
  const float specials[] = {std::nanf(""), -INFINITY, INFINITY, -std::nanf("")};
  expect_epilogue(
      GetParam(), 19, specials,
      [](float* v, const float*, int64_t n) {
        for (int64_t j = 0; j < n; ++j) v[j] = v[j] < 0.0f ? 0.0f : v[j];
      },
      [](Gemm& g, const void*) { g.relu = true; });
}

TEST(Gemm, RefusesToAccumulateIntoBf16) {
  std::vector<Bf16> out(4);
  Gemm g;
  g.m = g.n = g.k = 2;
  g.out = out.data();
  g.ldc = 2;
  g.out_bf16 = true;
  g.accumulate = true;
  EXPECT_THROW(cpu::gemm(g, nullptr), std::invalid_argument);
  std::vector<float> values(4);
  g.out = values.data();
  g.out_bf16 = false;
  g.round_bf16 = true;  // bf16 values are written, not summed into
  EXPECT_THROW(cpu::gemm(g, nullptr), std::invalid_argument);
}

TEST(Gemm, AddsAResidualToAWrittenF32OutputOnly) {
  std::vector<float> out(4), residual(4);
  std::vector<Bf16> out16(4);
  Gemm g;
  g.m = g.n = g.k = 2;
  g.ldc = 2;
  g.residual = residual.data();
  g.out = out16.data();
  g.out_bf16 = true;
  EXPECT_THROW(cpu::gemm(g, nullptr), std::invalid_argument);
  g.out = out.data();
  g.out_bf16 = false;
  g.accumulate = true;
  EXPECT_THROW(cpu::gemm(g, nullptr), std::invalid_argument);
}

TEST(CpuIsa, NamesRoundTripAndAPathAboveTheProcessorsIsRefused) {
  for (CpuIsa isa : {CpuIsa::kGeneric, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    EXPECT_EQ(cpu::parse_cpu_isa(cpu::cpu_isa_name(isa)), isa);
  }
  EXPECT_FALSE(cpu::parse_cpu_isa("sse2").has_value());
  const CpuIsa before = cpu::cpu_isa();
  const std::string unknown = invalid_message([] { cpu::set_cpu_isa("neon", "AXLE_CPU_ISA"); });
  EXPECT_NE(unknown.find("AXLE_CPU_ISA=neon"), std::string::npos) << unknown;
  if (cpu::detected_cpu_isa() < CpuIsa::kAvx512Bf16) {
    const std::string above = invalid_message([] { cpu::set_cpu_isa(CpuIsa::kAvx512Bf16); });
    EXPECT_NE(above.find("avx512_bf16"), std::string::npos) << above;
  }
  cpu::set_cpu_isa("avx2", "AXLE_CPU_ISA");
  EXPECT_EQ(cpu::cpu_isa(), CpuIsa::kAvx2);
  cpu::set_cpu_isa("auto", "AXLE_CPU_ISA");
  EXPECT_EQ(cpu::cpu_isa(), cpu::detected_cpu_isa());
  cpu::set_cpu_isa(before);
}

}  // namespace
}  // namespace axle::testing
