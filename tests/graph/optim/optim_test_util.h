// Test helpers for the optimizer tests (tests/graph/optim, tests/actors/optim_test.cpp): a small
// problem with a known gradient, one training step, torch.optim's update rules in double to
// compare with, and parameters whose gradients are set by hand for clip_grad_norm_.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "tests/graph/nn_test_util.h"

namespace axle::testing {

using Optim = NnTest;

// ---- the problem ----------------------------------------------------------------------------
// Parameters p_k (f64) with loss sum_k sum(a_k * (p_k - c_k)^2 + 0.1 * p_k^3), whose gradient
// is 2 a_k (p_k - c_k) + 0.3 p_k^2. A last parameter takes no part in the loss: it never has a
// gradient, and torch leaves such a parameter alone.

struct Problem {
  std::vector<Shape> shapes{{2, 3}, {3}};
  std::vector<std::vector<double>> a, c, start;

  explicit Problem(unsigned seed = 1) {
    std::mt19937 rng(seed);
    for (const Shape& s : shapes) {
      a.push_back(uniform_values(rng, s.numel(), 0.5, 2));
      c.push_back(uniform_values(rng, s.numel(), -1, 1));
      start.push_back(uniform_values(rng, s.numel(), -1, 1));
    }
  }

  [[nodiscard]] std::vector<double> grad(std::size_t k, const std::vector<double>& p) const {
    std::vector<double> g(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      g[i] = 2 * a[k][i] * (p[i] - c[k][i]) + 0.3 * p[i] * p[i];
    }
    return g;
  }

  // Fresh device parameters at the start values, plus the unused one (last).
  [[nodiscard]] std::vector<Tensor> make_params() const {
    std::vector<Tensor> params;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      params.push_back(f64_tensor(start[k], shapes[k]));
      params.back().requires_grad_();
    }
    params.push_back(f64_tensor({0.5, -0.5}, {2}));
    params.back().requires_grad_();
    return params;
  }

  // Traces the loss over params[0..shapes) and its backward; `which` limits it to some of them.
  void backward(const std::vector<Tensor>& params, std::vector<bool> which = {}) const {
    Tensor loss;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      if (!which.empty() && !which[k]) continue;
      const Tensor d = params[k] - f64_tensor(c[k], shapes[k]);
      const Tensor term =
          sum(f64_tensor(a[k], shapes[k]) * d * d + params[k] * params[k] * params[k] * 0.1);
      loss = loss.defined() ? loss + term : term;
    }
    loss.backward();
  }
};

// One training step: zero_grad, backward, step, mark_step.
inline void train_step(optim::Optimizer& opt, const Problem& problem,
                       const std::vector<Tensor>& params, std::vector<bool> which = {}) {
  opt.zero_grad();
  problem.backward(params, std::move(which));
  opt.step();
  sync_step();
}

// ---- references: torch.optim's algorithms, in double ----------------------------------------

struct SgdRef {
  optim::SgdOptions o;
  std::vector<std::vector<double>> buf;
  std::vector<bool> started;

  void step(std::size_t k, std::vector<double>& p, std::vector<double> g) {
    if (buf.size() <= k) {
      buf.resize(k + 1);
      started.resize(k + 1, false);
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (o.weight_decay != 0) g[i] += o.weight_decay * p[i];
    }
    if (o.momentum != 0) {
      if (!started[k]) {
        buf[k] = g;
        started[k] = true;
      } else {
        for (std::size_t i = 0; i < p.size(); ++i) {
          buf[k][i] = o.momentum * buf[k][i] + (1 - o.dampening) * g[i];
        }
      }
      for (std::size_t i = 0; i < p.size(); ++i) {
        g[i] = o.nesterov ? g[i] + o.momentum * buf[k][i] : buf[k][i];
      }
    }
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * g[i];
  }
};

struct AdamRef {
  optim::AdamOptions o;
  bool decoupled = false;
  std::vector<std::vector<double>> m, v;
  std::vector<int> t;  // per parameter, as torch's state["step"]

  void step(std::size_t k, std::vector<double>& p, std::vector<double> g) {
    if (m.size() <= k) {
      m.resize(k + 1);
      v.resize(k + 1);
      t.resize(k + 1, 0);
    }
    if (m[k].empty()) {
      m[k].assign(p.size(), 0.0);
      v[k].assign(p.size(), 0.0);
    }
    const int step = ++t[k];
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decoupled) {
        p[i] *= 1 - o.lr * o.weight_decay;
      } else if (o.weight_decay != 0) {
        g[i] += o.weight_decay * p[i];
      }
      m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g[i];
      v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g[i] * g[i];
      const double m_hat = m[k][i] / (1 - std::pow(o.beta1, step));
      const double v_hat = v[k][i] / (1 - std::pow(o.beta2, step));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

using RefStep = std::function<void(std::size_t, std::vector<double>&, std::vector<double>)>;

// Runs `steps` steps of `opt` and of the reference side by side, comparing every parameter after
// each step; `lr_at` (when given) sets the learning rate of step s on both.
inline void expect_matches_reference(optim::Optimizer& opt, const std::vector<Tensor>& params,
                                     const Problem& problem, const RefStep& ref, int steps,
                                     const std::function<double(int)>& lr_at = {},
                                     const std::function<void(double)>& set_ref_lr = {}) {
  std::vector<std::vector<double>> p = problem.start;
  for (int s = 0; s < steps; ++s) {
    if (lr_at) {
      opt.set_lr(lr_at(s));
      set_ref_lr(lr_at(s));
    }
    train_step(opt, problem, params);
    for (std::size_t k = 0; k < p.size(); ++k) {
      ref(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
    EXPECT_EQ(values(params.back()), (std::vector<double>{0.5, -0.5})) << "the unused parameter";
  }
  EXPECT_EQ(opt.steps(), steps);
}

// Two parameters whose gradients are set by hand: [3, -4] and [12] (2-norm 13, inf-norm 12,
// 1-norm 19).
struct Clipped {
  Tensor a = tensor(std::vector<double>{0, 0}, {2});
  Tensor b = tensor(std::vector<double>{0}, {1});
  Tensor frozen = tensor(std::vector<double>{1}, {1});  // no gradient: skipped
  Clipped() {
    a.set_grad(tensor(std::vector<double>{3, -4}, {2}));
    b.set_grad(tensor(std::vector<double>{12}, {1}));
  }
  [[nodiscard]] std::vector<Tensor> params() const { return {a, frozen, b}; }
};

}  // namespace axle::testing
