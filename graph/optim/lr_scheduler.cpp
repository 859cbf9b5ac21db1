// graph/optim: the schedulers' rates, in torch.optim.lr_scheduler's recursive forms (each rate
// from the group's current one), evaluated in double as Python does.
#include "axle/graph/optim/lr_scheduler.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace axle::optim {
namespace {

// Python's a % b for b > 0: never negative.
int64_t python_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroupOptions& group : optimizer_.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.lr;
    base_lrs_.push_back(*group.initial_lr);
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  last_lr_ = get_lr();
  std::vector<ParamGroupOptions>& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].lr = last_lr_[g];
}

void LRScheduler::load_state_dict(const LRSchedulerState& state) {
  if (state.base_lrs.size() != groups() || state.last_lr.size() != groups()) {
    throw std::invalid_argument(fmt::format(
        "LRScheduler.load_state_dict: the state has {} base rates and {} last rates for an "
        "optimizer of {} parameter groups",
        state.base_lrs.size(), state.last_lr.size(), groups()));
  }
  last_epoch_ = state.last_epoch;
  base_lrs_ = state.base_lrs;
  last_lr_ = state.last_lr;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) {
    throw std::invalid_argument(
        fmt::format("StepLR: step_size must be positive, not {}", step_size));
  }
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  for (std::size_t g = 0; g < groups(); ++g) {
    const bool decay = last_epoch() != 0 && last_epoch() % step_size_ == 0;
    out.push_back(decay ? group_lr(g) * gamma_ : group_lr(g));
  }
  return out;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  if (!(start_factor > 0 && start_factor <= 1)) {
    throw std::invalid_argument(fmt::format(
        "LinearLR: start_factor must be greater than 0 and at most 1, not {}", start_factor));
  }
  if (!(end_factor >= 0 && end_factor <= 1)) {
    throw std::invalid_argument(
        fmt::format("LinearLR: end_factor must be between 0 and 1, not {}", end_factor));
  }
  if (total_iters <= 0) {
    throw std::invalid_argument(
        fmt::format("LinearLR: total_iters must be positive, not {}", total_iters));
  }
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  std::vector<double> out;
  const auto epoch = static_cast<double>(last_epoch());
  const auto total = static_cast<double>(total_iters_);
  for (std::size_t g = 0; g < groups(); ++g) {
    if (last_epoch() == 0) {
      out.push_back(group_lr(g) * start_factor_);
    } else if (last_epoch() > total_iters_) {
      out.push_back(group_lr(g));
    } else {
      out.push_back(group_lr(g) * (1.0 + (end_factor_ - start_factor_) /
                                             (total * start_factor_ +
                                              (epoch - 1) * (end_factor_ - start_factor_))));
    }
  }
  return out;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) {
    throw std::invalid_argument(
        fmt::format("CosineAnnealingLR: T_max must be positive, not {}", t_max));
  }
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  constexpr double kPi = std::numbers::pi;
  std::vector<double> out;
  const int64_t epoch = last_epoch();
  const auto t_max = static_cast<double>(t_max_);
  for (std::size_t g = 0; g < groups(); ++g) {
    const double lr = group_lr(g);
    if (epoch == 0) {
      out.push_back(lr);
    } else if (python_mod(epoch - 1 - t_max_, 2 * t_max_) == 0) {
      out.push_back(lr + (base_lrs()[g] - eta_min_) * (1 - std::cos(kPi / t_max)) / 2);
    } else {
      out.push_back((1 + std::cos(kPi * static_cast<double>(epoch) / t_max)) /
                        (1 + std::cos(kPi * static_cast<double>(epoch - 1) / t_max)) *
                        (lr - eta_min_) +
                    eta_min_);
    }
  }
  return out;
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LambdaLR(optimizer, std::vector<std::function<double(int64_t)>>(
                              optimizer.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<std::function<double(int64_t)>> lr_lambdas)
    : LRScheduler(optimizer), lr_lambdas_(std::move(lr_lambdas)) {
  if (lr_lambdas_.size() != groups()) {
    throw std::invalid_argument(fmt::format("LambdaLR: {} lr_lambdas for {} parameter groups",
                                            lr_lambdas_.size(), groups()));
  }
  for (std::size_t g = 0; g < lr_lambdas_.size(); ++g) {
    if (!lr_lambdas_[g]) {
      throw std::invalid_argument(fmt::format("LambdaLR: lr_lambda {} is empty", g));
    }
  }
  initial_step();
}

std::vector<double> LambdaLR::get_lr() const {
  std::vector<double> out;
  for (std::size_t g = 0; g < groups(); ++g) {
    out.push_back(base_lrs()[g] * lr_lambdas_[g](last_epoch()));
  }
  return out;
}

}  // namespace axle::optim
