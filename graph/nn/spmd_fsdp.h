// graph/nn: FSDP on SPMD (torch_xla's SpmdFullyShardedDataParallel, "FSDPv2") — ZeRO-3 written as
// sharding annotations: every parameter is split over the mesh's "fsdp" axis, the batch too, and
// the SPMD compiler inserts the all-gathers before each use and the reduce-scatters of the
// gradients. Nothing runs differently from the module it wraps except the layout.
#pragma once

#include <memory>
#include <source_location>
#include <string>

#include "axle/graph/nn/module.h"
#include "axle/graph/spmd.h"

namespace axle::spmd {

/// SpmdFullyShardedDataParallel's options.
struct SpmdFsdpOptions {
  /// The mesh axis parameters and batches are split over.
  std::string axis = "fsdp";
  /// Split each parameter along its largest dimension the axis divides (torch_xla's
  /// shard_maximal); otherwise along dimension 0 when it divides, else the first that does.
  bool shard_maximal = false;
  /// Lay out the forward's output with its batch (dimension 0) over the axis, as torch_xla's
  /// default shard_output.
  bool shard_output = true;
};

/// Wraps `module` (registered as "module", as torch_xla names it): at construction each of its
/// parameters is laid out over `options.axis` of `mesh` (a parameter no dimension of which the
/// axis divides stays replicated); each forward lays its input's batch over the axis, runs the
/// module, and lays out the output. Throws std::invalid_argument when the mesh has no such axis.
class SpmdFullyShardedDataParallel : public nn::Module {
 public:
  /// Wraps `module` and lays out its parameters over `options.axis` of `mesh`.
  SpmdFullyShardedDataParallel(std::shared_ptr<nn::Module> module, Mesh mesh,
                               SpmdFsdpOptions options = {},
                               std::source_location where = std::source_location::current());

  Tensor forward(const Tensor& input) override;
  /// As forward(input), with both inputs' batches laid out over the axis.
  Tensor forward(const Tensor& input, const Tensor& other) override;

  /// The wrapped module.
  [[nodiscard]] nn::Module& module() const noexcept { return *module_; }
  /// The mesh the parameters are laid out over.
  [[nodiscard]] const Mesh& mesh() const noexcept { return mesh_; }

 private:
  // The partition spec splitting `dim` of a rank-`rank` tensor over the axis.
  [[nodiscard]] PartitionSpec along(int rank, int dim) const;
  // Lays `t`'s batch (dimension 0) over the axis when the axis divides it.
  void shard_batch(const Tensor& t) const;

  std::shared_ptr<nn::Module> module_;
  Mesh mesh_;
  SpmdFsdpOptions options_;
  int64_t axis_size_ = 1;
};

}  // namespace axle::spmd
