// actors: torch.nn.parallel.DistributedDataParallel over spawn's replicas (threads, processes
// under mpirun, or both). A module wrapping the model: it starts every replica from the
// master's parameters and buffers, and averages the gradients during backward, bucket by bucket
// as they are produced, so the optimizer then steps on averaged gradients.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "axle/graph/collectives.h"
#include "axle/graph/nn/module.h"

namespace axle {

/// DistributedDataParallel's settings, with torch's names and defaults.
struct DistributedDataParallelOptions {
  /// Largest gradient bucket, in MiB (a parameter larger than this has a bucket of its own).
  double bucket_cap_mb = 25;
  /// Gives every replica the master's buffers at the start of each forward in grad mode.
  bool broadcast_buffers = true;
  /// Lets a parameter that requires grad get no gradient in a backward: it counts as zero in
  /// the average (and its grad() becomes that average). Without it, such a parameter is an error.
  bool find_unused_parameters = false;
  /// The replicas averaged together, as torch_xla's groups (empty: all of them); each group's
  /// first member is its master.
  ReplicaGroups groups = {};
};

/// Data-parallel training of `module`, as torch.nn.parallel.DistributedDataParallel: construct
/// it on every replica (inside spawn) around that replica's model, train through it, and call
/// the optimizer's step() after backward(). Construction gives every replica the master's
/// parameters and buffers. Each backward() averages the gradients over the replicas in buckets of
/// at most bucket_cap_mb, filled in reverse parameter order: each bucket's all_reduce is traced as
/// soon as backward has produced its last gradient, so the device can reduce it while the rest of
/// backward runs. optimizer_step() on averaged gradients does not average them again. A parameter
/// that requires grad and gets no gradient makes backward() throw std::runtime_error naming it,
/// unless find_unused_parameters. Its state_dict names are the module's with "module." before
/// them, as torch's. Every replica must construct its DDP, and run forward and backward, in the
/// same order.
///
/// Gradient accumulation, as torch's `with ddp.no_sync():` — while a NoSync guard from no_sync()
/// lives, backward() accumulates every replica's gradients locally (no all_reduce); the first
/// backward() after it averages the accumulated gradients:
///
///     for (int k = 0; k + 1 < micro_batches; ++k) {
///       auto guard = ddp.no_sync();
///       loss_of(ddp(x[k])).backward();
///     }
///     loss_of(ddp(x.back())).backward();  // averages the sum of all micro-batches' gradients
///     optimizer.step();
class DistributedDataParallel : public nn::Module {
 public:
  /// Turns gradient averaging off for as long as it lives (see no_sync()).
  class [[nodiscard]] NoSync {
   public:
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    /// Takes over `other`'s guard; `other` then restores nothing.
    NoSync(NoSync&& other) noexcept;
    NoSync& operator=(NoSync&&) = delete;
    /// Restores gradient averaging to what it was when the guard was made.
    ~NoSync();

   private:
    friend class DistributedDataParallel;
    NoSync(std::shared_ptr<void> reducer, bool was_syncing) noexcept;
    std::shared_ptr<void> reducer_;
    bool was_syncing_ = true;
  };

  /// Wraps `module` (registered as "module") and gives every replica the master's parameters
  /// and buffers; throws std::invalid_argument for a null module or bucket_cap_mb <= 0.
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                   DistributedDataParallelOptions options = {},
                                   std::source_location where = std::source_location::current());
  /// Stops averaging the module's gradients (removes its backward hooks).
  ~DistributedDataParallel() override;

  /// The wrapped module's forward (after broadcasting buffers, with broadcast_buffers).
  Tensor forward(const Tensor& input) override;
  /// The wrapped module's two-input forward, as forward(input).
  Tensor forward(const Tensor& input, const Tensor& other) override;

  /// The wrapped module.
  [[nodiscard]] const std::shared_ptr<nn::Module>& module() const noexcept { return module_; }
  /// The options it was made with.
  [[nodiscard]] const DistributedDataParallelOptions& options() const noexcept { return options_; }

  /// torch's DistributedDataParallel.no_sync(): a guard inside whose lifetime backward() adds each
  /// replica's gradients to its own .grad without averaging them; the first backward() outside
  /// every guard averages the gradients accumulated since the last averaging. Guards nest.
  [[nodiscard]] NoSync no_sync();
  /// Whether backward() averages gradients now (false inside a no_sync() guard).
  [[nodiscard]] bool require_backward_grad_sync() const noexcept;

  /// The gradient buckets in the order backward reduces them, each as its parameters' names
  /// ("module.fc2.bias", ...) in the order they sit in the bucket.
  [[nodiscard]] std::vector<std::vector<std::string>> bucket_layout() const;

 private:
  struct Reducer;

  // A new step starts: the last backward's state is dropped and buffers are broadcast.
  void before_forward();

  std::shared_ptr<nn::Module> module_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace axle
