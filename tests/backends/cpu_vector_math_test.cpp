// Tests backends/cpu/vector_math.h on every instruction-set path this processor has: exp against
// the exactly rounded value (std::exp in double), its edges, the sums' order, and the same bits
// from every path.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/vector_math.h"

namespace axle::testing {
namespace {

using cpu::CpuIsa;

std::vector<CpuIsa> every_path() {
  std::vector<CpuIsa> paths{CpuIsa::kGeneric};
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
    if (isa <= cpu::detected_cpu_isa()) paths.push_back(isa);
  }
  return paths;
}

class IsaScope {
 public:
  explicit IsaScope(CpuIsa isa) : before_(cpu::cpu_isa()) { cpu::set_cpu_isa(isa); }
  ~IsaScope() { cpu::set_cpu_isa(before_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  CpuIsa before_;
};

// Units in the last place between a float and the exact value (both finite, positive).
double ulps(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const float next = std::nextafter(rounded, std::numeric_limits<float>::infinity());
  return std::abs(static_cast<double>(got) - exact) / (static_cast<double>(next) - rounded);
}

class VectorMathPath : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(VectorMathPath, ExpIsWithinTwoUlpsOverTheNormalRange) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-87.0f, 88.7f);
  std::vector<float> x(100000);
  for (float& v : x) v = u(rng);
  for (int i = 0; i < 2000; ++i) x[static_cast<std::size_t>(i)] = -1.0f + 0.001f * i;  // near 0
  const std::vector<float> in = x;
  cpu::exp_shifted_sum(x.data(), static_cast<int64_t>(x.size()), 0.0f);
  double worst = 0;
  float worst_at = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = ulps(x[i], std::exp(static_cast<double>(in[i])));
    if (err > worst) {
      worst = err;
      worst_at = in[i];
    }
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_at;
}

TEST_P(VectorMathPath, ExpEdges) {
  const IsaScope scope(GetParam());
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> x{-kInf, kInf,    std::numeric_limits<float>::quiet_NaN(),
                       89.0f, -105.0f, 0.0f,
                       -0.0f, 88.72f,  -100.0f};
  cpu::exp_shifted_sum(x.data(), static_cast<int64_t>(x.size()), 0.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], kInf);
  EXPECT_TRUE(std::isnan(x[2]));
  EXPECT_EQ(x[3], kInf);
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_EQ(x[5], 1.0f);
  EXPECT_EQ(x[6], 1.0f);
  EXPECT_TRUE(std::isfinite(x[7]) && x[7] > 3e38f) << x[7];
  // exp(-100) is subnormal in f32 (3.7e-44): within a few of its units (1.4e-45).
  EXPECT_NEAR(x[8], std::exp(-100.0), 3 * 1.4e-45);
}

TEST_P(VectorMathPath, RowsShiftAndSumInSixteenLanes) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int64_t n : {1, 7, 16, 17, 64, 100}) {
    const int64_t rows = 5, ld = n + 3;
    std::vector<float> x(static_cast<std::size_t>(rows * ld)), shifts(rows), sums(rows);
    for (float& v : x) v = normal(rng);
    for (float& v : shifts) v = normal(rng);
    std::vector<float> want = x;
    std::vector<float> want_sums(rows);
    for (int64_t r = 0; r < rows; ++r) {
      // Each value through the one-row form, then the lanes added pairwise as documented.
      float lanes[16] = {};
      for (int64_t i = 0; i < n; ++i) {
        float& v = want[static_cast<std::size_t>(r * ld + i)];
        cpu::exp_shifted_sum(&v, 1, shifts[static_cast<std::size_t>(r)]);
        lanes[i % 16] += v;
      }
      for (int width = 8; width >= 1; width /= 2) {
        for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
      }
      want_sums[static_cast<std::size_t>(r)] = lanes[0];
    }
    cpu::exp_shifted_rows(x.data(), rows, n, ld, shifts.data(), sums.data());
    EXPECT_EQ(x, want) << "n=" << n;  // also: the values between rows are left alone
    EXPECT_EQ(sums, want_sums) << "n=" << n;
  }
}

TEST_P(VectorMathPath, GivesTheGenericPathsBits) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-110.0f, 95.0f);
  std::vector<float> x(3001);
  for (float& v : x) v = u(rng);
  // Densely where 2^m is applied to a subnormal or an overflowing result (x - 1.5 in
  // [-104, -87] and near 88.72), where the last scaling rounds.
  for (float v = -102.6f; v < -85.4f; v += 1.0f / 512) x.push_back(v);
  for (float v = 89.9f; v < 90.4f; v += 1.0f / 4096) x.push_back(v);
  std::vector<float> generic = x, here = x;
  float generic_sum = 0, here_sum = 0;
  {
    const IsaScope scope(CpuIsa::kGeneric);
    generic_sum = cpu::exp_shifted_sum(generic.data(), static_cast<int64_t>(x.size()), 1.5f);
  }
  const IsaScope scope(GetParam());
  here_sum = cpu::exp_shifted_sum(here.data(), static_cast<int64_t>(x.size()), 1.5f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(here[i]), std::bit_cast<uint32_t>(generic[i]))
        << "exp(" << x[i] << " - 1.5)";
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(here_sum), std::bit_cast<uint32_t>(generic_sum));
}

TEST_P(VectorMathPath, ErfAndGeluAreWithinAFewUlps) {
  const IsaScope scope(GetParam());
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  std::vector<float> x(50001);
  for (float& v : x) v = u(rng);
  x[0] = 0.0f;
  std::vector<float> erf(x.size()), gelu(x.size());
  cpu::map_f32(cpu::VectorFunction::kErf, x.data(), erf.data(), static_cast<int64_t>(x.size()));
  cpu::map_f32(cpu::VectorFunction::kGelu, x.data(), gelu.data(), static_cast<int64_t>(x.size()));
  double worst_erf = 0, worst_gelu = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = std::erf(static_cast<double>(x[i]));
    const double g = 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    // In units of f32's spacing at the exact value (an absolute floor of 2^-126 near 0).
    auto spacing = [](double v) { return std::max(std::abs(v) * 0x1p-23, 0x1p-126); };
    worst_erf = std::max(worst_erf, std::abs(erf[i] - e) / spacing(e));
    // gelu of a negative x is x times 1 + erf, a difference of nearly equal terms: its error is
    // measured against the size of x (for x below -5.6, erf is -1 and gelu exactly 0).
    worst_gelu = std::max(
        worst_gelu, std::abs(gelu[i] - g) / spacing(std::max(std::abs(g), std::abs(double{x[i]}))));
  }
  EXPECT_LE(worst_erf, 4.0);
  EXPECT_LE(worst_gelu, 4.0);
  std::vector<float> edges{std::numeric_limits<float>::quiet_NaN(), 100.0f, -100.0f};
  cpu::map_f32(cpu::VectorFunction::kErf, edges.data(), edges.data(), 3);
  EXPECT_TRUE(std::isnan(edges[0]));
  EXPECT_EQ(edges[1], 1.0f);
  EXPECT_EQ(edges[2], -1.0f);
}

TEST_P(VectorMathPath, MappedFunctionsGiveTheGenericPathsBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  std::vector<float> x(1037);
  for (float& v : x) v = u(rng);
  for (const auto f :
       {cpu::VectorFunction::kExp, cpu::VectorFunction::kErf, cpu::VectorFunction::kGelu}) {
    std::vector<float> generic(x.size()), here(x.size());
    {
      const IsaScope scope(CpuIsa::kGeneric);
      cpu::map_f32(f, x.data(), generic.data(), static_cast<int64_t>(x.size()));
    }
    const IsaScope scope(GetParam());
    cpu::map_f32(f, x.data(), here.data(), static_cast<int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(here[i]), std::bit_cast<uint32_t>(generic[i]))
          << "function " << static_cast<int>(f) << " of " << x[i];
    }
  }
}

// gelu's derivative times g: within a few ulps of the formula in double (in units of the terms'
// size, since for negative x the result is a difference of nearly equal terms), and bit for bit
// the generic path's at every position, tails included.
TEST_P(VectorMathPath, GeluBackwardIsAccurateAndGivesTheGenericPathsBits) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-9.0f, 9.0f);
  std::vector<float> g(20011), x(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    g[i] = u(rng) / 3;
    x[i] = u(rng);
  }
  x[0] = 0.0f;
  x[1] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> generic(g.size()), here(g.size());
  {
    const IsaScope scope(CpuIsa::kGeneric);
    cpu::gelu_backward_f32(g.data(), x.data(), generic.data(), static_cast<int64_t>(g.size()));
  }
  const IsaScope scope(GetParam());
  cpu::gelu_backward_f32(g.data(), x.data(), here.data(), static_cast<int64_t>(g.size()));
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(here[i]), std::bit_cast<uint32_t>(generic[i]))
        << "g " << g[i] << ", x " << x[i];
    if (i == 1) {
      EXPECT_TRUE(std::isnan(here[i]));
      continue;
    }
    const double v = x[i];
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * std::numbers::pi);
    const double exact = g[i] * (0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * pdf);
    const double terms = std::abs(double{g[i]}) * (1 + std::abs(v) * pdf);
    worst = std::max(worst, std::abs(here[i] - exact) / std::max(terms * 0x1p-23, 0x1p-126));
  }
  EXPECT_LE(worst, 8.0);
}

// The bf16 conversions against element.h's scalar widen and narrow, on random bit patterns and on
// the cases that need care: ties (to even), NaNs with payloads, infinities, subnormals, the
// largest finite values (which round up to infinity); lengths with a tail.
TEST_P(VectorMathPath, Bf16ConversionsGiveTheScalarConversionsBits) {
  std::mt19937 rng(8);
  std::vector<uint32_t> bits = {
      0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f817fffu, 0x3f818001u,   // 1, ties, around them
      0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,   // infinities, NaNs
      0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u,   // NaN, subnormals
      0x7f7fffffu, 0xff7f8000u, 0x7f7f7fffu, 0x00000000u, 0x80000000u};  // largest, zeros
  while (bits.size() < 1061) bits.push_back(static_cast<uint32_t>(rng()));
  const auto n = static_cast<int64_t>(bits.size());
  std::vector<float> x(bits.size());
  std::transform(bits.begin(), bits.end(), x.begin(),
                 [](uint32_t b) { return std::bit_cast<float>(b); });

  const IsaScope scope(GetParam());
  std::vector<uint16_t> narrowed(bits.size());
  cpu::narrow_bf16(x.data(), narrowed.data(), n);
  std::vector<float> widened(bits.size()), rounded = x;
  cpu::widen_bf16(narrowed.data(), widened.data(), n);
  cpu::round_to_bf16(rounded.data(), n);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const cpu::Bf16 want = cpu::narrow(x[i]);
    ASSERT_EQ(narrowed[i], want.bits) << "narrowing bits " << std::hex << bits[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(cpu::widen(want)))
        << "widening bits " << std::hex << want.bits;
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(cpu::widen(want)))
        << "rounding bits " << std::hex << bits[i];
  }
  // Ties go to the even neighbour; just past a tie, away from it.
  EXPECT_EQ(narrowed[1], 0x3f80u);
  EXPECT_EQ(narrowed[2], 0x3f82u);
  EXPECT_EQ(narrowed[3], 0x3f81u);
  EXPECT_EQ(narrowed[4], 0x3f82u);
  EXPECT_EQ(narrowed[15], 0x7f80u);  // FLT_MAX rounds to infinity
  EXPECT_EQ(narrowed[8], 0xffc0u);   // a NaN stays a NaN of its sign
  EXPECT_EQ(narrowed[9], 0x7fc0u);   // a signalling NaN is quieted
}

// map_bf16 and gelu_backward_bf16 give, at every position of lengths with a tail, the bits of
// widening, the generic path's f32 function and narrowing in turn; NaN and infinities included.
TEST_P(VectorMathPath, Bf16FunctionsGiveTheGenericF32FunctionsBitsRounded) {
  std::mt19937 rng(10);
  std::uniform_real_distribution<float> u(-9.0f, 9.0f);
  const std::size_t n = 1061;
  std::vector<uint16_t> g(n), x(n);
  for (std::size_t i = 0; i < n; ++i) {
    g[i] = cpu::narrow(u(rng) / 3).bits;
    x[i] = cpu::narrow(u(rng)).bits;
  }
  x[0] = cpu::narrow(std::numeric_limits<float>::quiet_NaN()).bits;
  x[1] = cpu::narrow(std::numeric_limits<float>::infinity()).bits;
  x[2] = cpu::narrow(-std::numeric_limits<float>::infinity()).bits;
  auto widened = [](const std::vector<uint16_t>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = cpu::widen(cpu::Bf16{v[i]});
    return out;
  };
  const std::vector<float> gf = widened(g), xf = widened(x);
  for (const int64_t length : {int64_t{1061}, int64_t{16}, int64_t{7}}) {
    std::vector<float> want(n);
    std::vector<uint16_t> got(n);
    auto expect_rounded = [&](const char* what) {
      for (int64_t i = 0; i < length; ++i) {
        ASSERT_EQ(got[i], cpu::narrow(want[i]).bits)
            << what << " of " << xf[i] << " at " << i << " of " << length;
      }
    };
    for (const auto f :
         {cpu::VectorFunction::kExp, cpu::VectorFunction::kErf, cpu::VectorFunction::kGelu}) {
      {
        const IsaScope scope(CpuIsa::kGeneric);
        cpu::map_f32(f, xf.data(), want.data(), length);
      }
      const IsaScope scope(GetParam());
      cpu::map_bf16(f, x.data(), got.data(), length);
      expect_rounded("function");
    }
    {
      const IsaScope scope(CpuIsa::kGeneric);
      cpu::gelu_backward_f32(gf.data(), xf.data(), want.data(), length);
    }
    const IsaScope scope(GetParam());
    cpu::gelu_backward_bf16(g.data(), x.data(), got.data(), length);
    expect_rounded("gelu_backward");
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, VectorMathPath, ::testing::ValuesIn(every_path()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(cpu::cpu_isa_name(info.param));
                         });

}  // namespace
}  // namespace axle::testing
