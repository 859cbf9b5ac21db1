// graph/optim: learning-rate schedulers, as torch.optim.lr_scheduler's. A scheduler sets its
// optimizer's group learning rates on the host; the optimizer feeds them to the graph as
// parameters, so a schedule never recompiles. Each computes its next rates from the current ones
// as torch's step() does, so the rates are the bits PyTorch's are.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "axle/graph/optim/optimizer.h"

namespace axle::optim {

/// What a scheduler needs to go on where it stopped, as torch's scheduler.state_dict(): the steps
/// taken, the rates it started from and the rates it last set. The groups' current rates are
/// the optimizer's (its param_groups).
struct LRSchedulerState {
  int64_t last_epoch = -1;       ///< Steps taken (last_epoch()).
  std::vector<double> base_lrs;  ///< The rates the schedule starts from, by group (base_lrs()).
  std::vector<double> last_lr;   ///< The rates step() last set, by group (get_last_lr()).
};

/// Base of the learning-rate schedulers, as torch.optim.lr_scheduler.LRScheduler: step() moves
/// to the next epoch and sets every group's lr to get_lr()'s.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Moves to the next epoch (or step) and sets every group's lr for it.
  void step();
  /// The rates step() last set, by group.
  [[nodiscard]] const std::vector<double>& get_last_lr() const noexcept { return last_lr_; }
  /// Steps taken: 0 right after construction, which already set the rates of epoch 0.
  [[nodiscard]] int64_t last_epoch() const noexcept { return last_epoch_; }
  /// The rates the schedule starts from (each group's initial_lr).
  [[nodiscard]] const std::vector<double>& base_lrs() const noexcept { return base_lrs_; }

  /// The scheduler's state (torch's state_dict): last_epoch(), base_lrs() and get_last_lr().
  [[nodiscard]] LRSchedulerState state_dict() const { return {last_epoch_, base_lrs_, last_lr_}; }
  /// Takes up a state_dict() of a scheduler of as many groups (torch's load_state_dict); throws
  /// std::invalid_argument, changing nothing, when the group counts differ. The groups' rates
  /// are not touched: they come back with the optimizer's param_groups.
  void load_state_dict(const LRSchedulerState& state);

 protected:
  /// Takes each group's lr as its initial_lr (unless a scheduler already set it); the derived
  /// constructor then calls initial_step().
  explicit LRScheduler(Optimizer& optimizer);
  /// Sets the rates of epoch 0 (a first step()); called at the end of a derived constructor.
  void initial_step() { step(); }
  /// The rates of epoch last_epoch(), from the groups' current rates.
  [[nodiscard]] virtual std::vector<double> get_lr() const = 0;
  /// Group g's current learning rate.
  [[nodiscard]] double group_lr(std::size_t g) const { return optimizer_.param_groups()[g].lr; }
  /// The number of the optimizer's parameter groups.
  [[nodiscard]] std::size_t groups() const { return optimizer_.param_groups().size(); }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

/// Multiplies the rate by `gamma` every `step_size` epochs, as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
 public:
  /// Schedules `optimizer`'s rates; throws std::invalid_argument unless step_size > 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 private:
  [[nodiscard]] std::vector<double> get_lr() const override;
  int64_t step_size_;
  double gamma_;
};

/// Scales the rate by a factor going linearly from `start_factor` to `end_factor` over
/// `total_iters` epochs, then keeps it (a linear warm-up), as torch's LinearLR.
class LinearLR : public LRScheduler {
 public:
  /// Schedules `optimizer`'s rates; throws std::invalid_argument unless 0 < start_factor <= 1,
  /// 0 <= end_factor <= 1 and total_iters > 0.
  explicit LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
                    int64_t total_iters = 5);

 private:
  [[nodiscard]] std::vector<double> get_lr() const override;
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// Anneals the rate from its initial value to `eta_min` along a cosine over `t_max` epochs (and
/// back up over the next t_max, as torch's CosineAnnealingLR).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// Schedules `optimizer`'s rates; throws std::invalid_argument unless t_max > 0.
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);

 private:
  [[nodiscard]] std::vector<double> get_lr() const override;
  int64_t t_max_;
  double eta_min_;
};

/// The rate is initial_lr * lr_lambda(epoch), as torch's LambdaLR: one function for every
/// group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  /// One function for every group; throws std::invalid_argument if it is empty.
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda);
  /// One function per group; throws std::invalid_argument unless there are as many as groups and
  /// none is empty.
  LambdaLR(Optimizer& optimizer, std::vector<std::function<double(int64_t)>> lr_lambdas);

 private:
  [[nodiscard]] std::vector<double> get_lr() const override;
  std::vector<std::function<double(int64_t)>> lr_lambdas_;
};

}  // namespace axle::optim
