// actors: fully sharded data parallel (ZeRO-3) across spawn's replicas, as torch_xla's
// XlaFullyShardedDataParallel. Each replica keeps 1/N of every parameter (flattened per dtype
// and padded to a multiple of N); the wrapped module's forward runs on parameters all-gathered
// just before it, and backward reduce-scatters their gradients, averaged, so each replica ends
// the step with its own shard's gradient. Optimizers built over the wrapper's parameters hold
// state for the shards only. Everything is traced into the step like any op.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "axle/graph/nn/module.h"
// ShardMetadata: the file format of sharded checkpoints, below actors.
#include "axle/graph/formats/shard_metadata.h"

namespace axle {

/// Decides which submodules become FSDP units of their own, as torch's auto_wrap_policy
/// (module, recurse, unwrapped_params): with `recurse` true, whether to look inside `module`
/// for units; with it false, whether to wrap `module` itself, whose parameters not yet in a
/// nested unit number `unwrapped_params`.
using AutoWrapPolicy =
    std::function<bool(const nn::Module& module, bool recurse, int64_t unwrapped_params)>;

/// Wraps every submodule with at least `min_num_params` parameters not already wrapped, as
/// torch's size_based_auto_wrap_policy.
[[nodiscard]] AutoWrapPolicy size_based_auto_wrap_policy(int64_t min_num_params = 100'000'000);

/// Wraps every submodule for which `is_layer` holds (each transformer block, say), as torch's
/// transformer_auto_wrap_policy; see transformer_auto_wrap_policy<Block>().
[[nodiscard]] AutoWrapPolicy module_type_auto_wrap_policy(
    std::function<bool(const nn::Module&)> is_layer);
/// Wraps every submodule of type `Layer` (or derived from it).
template <class Layer>
[[nodiscard]] AutoWrapPolicy transformer_auto_wrap_policy() {
  return module_type_auto_wrap_policy(
      [](const nn::Module& m) { return dynamic_cast<const Layer*>(&m) != nullptr; });
}

/// XlaFullyShardedDataParallel's options, with its defaults.
struct FsdpOptions {
  /// Free the gathered parameters after the forward pass and gather them again for the
  /// backward pass. Not for the root unit (the one no other unit holds), whose parameters the
  /// backward pass needs first, as in torch. A lazy graph cannot refill a freed buffer, so an
  /// inner unit's backward gathers anew behind an optimization barrier and computes the unit's
  /// forward again on those (as activation checkpointing does): the unit's activations are freed
  /// too.
  bool reshard_after_forward = true;
  /// One flat shard per dtype for all the unit's parameters (else one per parameter).
  bool flatten_parameters = true;
  /// Without flattening, shard each parameter along dim 0 (padded to a multiple of N) instead of
  /// flattened.
  bool shard_param_on_dim_0 = false;
  /// The dtype the gathered parameters are computed in (bf16, say); the shards, their gradients
  /// and the optimizer stay in the parameters' own dtype. Gathered in this dtype (half the
  /// bytes for bf16), gradients reduce-scattered in it.
  std::optional<DType> compute_dtype;
  /// Buffers are cast to this dtype once, at wrapping.
  std::optional<DType> buffer_dtype;
  /// Nested units; none when empty.
  AutoWrapPolicy auto_wrap_policy;
};

namespace fsdp {
struct Flat;  // one flat parameter of a unit (fsdp_internal.h)
}  // namespace fsdp

/// A module trained fully sharded, as torch_xla's XlaFullyShardedDataParallel. Wrap a module
/// already on the replica's device, on every replica (inside spawn) with the same
/// initialisation, then build the optimizer over this wrapper's parameters(): the shards. The
/// wrapped module is registered as "_fsdp_wrapped_module"; its parameters leave it (their
/// slots stay undefined except while it runs), so they are only reached through the shards.
class FullyShardedDataParallel : public nn::Module {
 public:
  /// Wraps `module` (nested units first, by options.auto_wrap_policy) and keeps this replica's
  /// shard of its parameters. Throws ShapeError for a null or already wrapped module,
  /// shard_param_on_dim_0 with flatten_parameters, or a compute_dtype that is not floating.
  explicit FullyShardedDataParallel(std::shared_ptr<nn::Module> module, FsdpOptions options = {},
                                    std::source_location where = std::source_location::current());
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  Tensor forward(const Tensor& input) override;
  /// The wrapped module's two-input forward (`model(x, y)`), on gathered parameters as above.
  Tensor forward(const Tensor& input, const Tensor& other) override;

  /// The wrapped module (its parameter slots undefined except while it runs).
  [[nodiscard]] const std::shared_ptr<nn::Module>& module() const noexcept { return module_; }
  /// The options it was made with.
  [[nodiscard]] const FsdpOptions& options() const noexcept { return options_; }

  /// Scales the shards' gradients so that the global `norm_type`-norm of the whole model's
  /// gradient (every replica's shards together, nested units' too) is at most `max_norm`, as
  /// XlaFullyShardedDataParallel.clip_grad_norm_. Returns the global norm (a pending 0-d
  /// tensor).
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0,
                         std::source_location where = std::source_location::current());

  /// This replica's shard layout, nested units' included, named as in state_dict().
  [[nodiscard]] ShardMetadata get_shard_metadata() const;
  /// state_dict() plus the entry "shard_metadata" (get_shard_metadata() as text): what each
  /// replica saves (io save with master_only = false) for consolidate_sharded_model_checkpoints.
  [[nodiscard]] nn::StateDict sharded_checkpoint() const;

  /// The gathered parameters of this unit only (not nested units'), each once, named as in
  /// the unwrapped module; traced, for inspection and tests.
  [[nodiscard]] nn::StateDict full_parameters() const;

 private:
  struct Pass;  // one run of the wrapped module on gathered parameters
  friend struct FsdpUnitBackward;

  [[nodiscard]] std::vector<Tensor> shards() const;
  Tensor forward_inputs(const std::vector<Tensor>& inputs);
  Pass run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& shards,
           const std::vector<bool>& inputs_need_grad);
  [[nodiscard]] std::vector<Tensor> gather(const std::vector<Tensor>& shards) const;
  /// Each flat parameter's gradient from its parameters' (undefined: zeros), reduce-scattered.
  [[nodiscard]] std::vector<Tensor> reduce_gradients(std::span<const Tensor> param_grads,
                                                     std::span<const Tensor> full) const;
  void install(const std::vector<Tensor>& full) const;
  void uninstall() const;

  std::shared_ptr<nn::Module> module_;
  FsdpOptions options_;
  int world_size_ = 1;
  int rank_ = 0;
  std::vector<std::shared_ptr<fsdp::Flat>> flats_;
  std::source_location where_;
};

}  // namespace axle
