// Tests the depth split of backends/cpu/gemm.cpp: a short product over a few blocks of k whose
// op(b) is stored [k, n] (an input gradient dy · W) runs one part per depth block, then adds the
// blocks' sums. Its outputs must have the bits of the same product on one thread, with f32 and
// bf16 operands, op(a) stored either way, and a bias, relu's backward or relu applied to them, on
// the instruction-set path the run takes (AXLE_CPU_ISA).
#include <gtest/gtest.h>

#include <bit>
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

  Operands(std::mt19937& rng, int64_t m_, int64_t n_, int64_t k_, bool transpose_a_)
      : m(m_), n(n_), k(k_), transpose_a(transpose_a_) {
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<float>& values, std::size_t size) {
      values.resize(size);
      for (float& v : values) v = normal(rng);
    };
    fill(a, static_cast<std::size_t>((transpose_a ? k * (m + 3) : m * (k + 3))));
    fill(b, static_cast<std::size_t>(k * (n + 5)));
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
    g.b = {b_bf16 ? static_cast<const void*>(b16.data()) : b.data(), n + 5, false, b_bf16};
    g.out = out.data();
    g.ldc = n + 7;
    return g;
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

}  // namespace
}  // namespace axle::testing
