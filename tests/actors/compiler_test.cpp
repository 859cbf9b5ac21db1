// The compiler end to end: its passes never change what a step computes.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

constexpr const char* kEveryPass = "canonicalize,cse,constant_folding,dce,fusion";

class Compiler : public ::testing::Test {
 protected:
  void TearDown() override {
    config::unset("AXLE_DISABLE_PASSES");
    LazySystem::restart();
  }
  // Restarts the system with `disabled` passes off.
  static void restart_without(const char* disabled) {
    config::set("AXLE_DISABLE_PASSES", disabled);
    LazySystem::restart();
    clear_all();
  }
};

std::vector<float> random_values(std::size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int32_t>(seed >> 8) % 2001 - 1000) / 250.0f;
  }
  return v;
}

// A step with something for every pass: transposes into matmuls, reshape and permute chains,
// repeated subexpressions, constants, dead values and broadcasting.
std::vector<Tensor> step(const Tensor& x, const Tensor& w) {
  // (x arrives as [6, 4]: a transpose folded into this matmul could change the order of its sums,
  // and every elementwise output below depends on it.)
  const Tensor h = matmul(x, w);                                               // [6, 5]
  const Tensor r = reshape(reshape(h, {30}), {5, 6});                          // chain
  const Tensor t = transpose(transpose(r, 0, 1), 0, 1);                        // identity
  const Tensor shared = exp(t * 0.25) + exp(t * 0.25);                         // CSE
  const Tensor constants = (ones({5, 6}) + ones({5, 6})) / (ones({6}) + 2.0);  // folding
  const Tensor dead = sqrt(abs(shared)) * 3.0;                                 // never read
  (void)dead;
  const Tensor gated = where(gt(shared, constants), shared - constants, t * constants);
  return {gated, sum(gated, {1}), matmul(w, transpose(h, 0, 1))};
}

std::vector<std::vector<float>> run_step() {
  const Tensor x = tensor(random_values(24, 1), {6, 4});
  const Tensor w = tensor(random_values(20, 2), {4, 5});
  std::vector<Tensor> outputs = step(x, w);
  mark_step();
  std::vector<std::vector<float>> values;
  for (const Tensor& t : outputs) values.push_back(t.to_vector<float>());
  return values;
}

TEST_F(Compiler, PassesDoNotChangeWhatAStepComputes) {
  restart_without(kEveryPass);
  const std::vector<std::vector<float>> plain = run_step();
  restart_without("");
  const std::vector<std::vector<float>> optimised = run_step();
  ASSERT_EQ(plain.size(), optimised.size());
  // Elementwise results are bit for bit the same; the matmul may only differ by the order of
  // its sums (a transposed operand is read, not copied).
  for (std::size_t k = 0; k + 1 < plain.size(); ++k) {
    ASSERT_EQ(plain[k].size(), optimised[k].size());
    for (std::size_t i = 0; i < plain[k].size(); ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(plain[k][i]), std::bit_cast<uint32_t>(optimised[k][i]))
          << "output " << k << " element " << i << ": " << plain[k][i] << " vs " << optimised[k][i];
    }
  }
  const std::vector<float>& a = plain.back();
  const std::vector<float>& b = optimised.back();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(a[i])));
}

}  // namespace
}  // namespace axle
