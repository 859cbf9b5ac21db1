// graph: the SPMD user API, as torch_xla.distributed.spmd — a device mesh, and sharding
// annotations on tensors of the one global program the user traces. An annotation on a computed
// tensor is a `custom_sharding` op in the graph (identity on its operand); on device data (a
// parameter) it is recorded with the tensor, whose device-data leaf then carries it from step to
// step. The compiler's propagation pass (graph/passes/sharding_propagation.cpp) gives every
// instruction a sharding from these, and under use_spmd() the SPMD runtime
// (actors/host/spmd_runtime.h) runs the partitioned program on every device of the mesh; elsewhere
// annotations change nothing.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "axle/graph/sharding.h"
#include "axle/graph/tensor.h"

namespace axle::spmd {

using axle::Mesh;
using axle::PartitionDim;
using axle::PartitionSpec;
using axle::ShardingSpec;

/// A mesh over hosts, as torch_xla's HybridMesh: `ici_mesh_shape` is the mesh of one process's
/// devices, `dcn_mesh_shape` the mesh of processes; the mesh's shape is their elementwise
/// product, and along each axis the process (dcn) index is the outer one. Global ordinals are
/// process-major (process p's devices are p * L .. p * L + L - 1 with L local devices).
class HybridMesh : public Mesh {
 public:
  /// Throws std::invalid_argument when the two shapes differ in length or hold a size below 1.
  HybridMesh(std::vector<int64_t> ici_mesh_shape, std::vector<int64_t> dcn_mesh_shape,
             std::vector<std::string> axis_names = {});
};

/// Annotates `tensor` with the sharding `partition_spec` gives it on `mesh`
/// (Mesh.get_op_sharding) and returns it. A tensor computed in the pending graph gets a
/// `custom_sharding` op, in place (every handle sees it); device data keeps the sharding with
/// the tensor, and under use_spmd() its shards move to their devices now. Throws ShapeError naming
/// the op, the tensor, the spec and the caller's line for a spec of the wrong length, an unknown or
/// repeated mesh axis, or a dimension the tiles do not divide evenly.
const Tensor& mark_sharding(const Tensor& tensor, const Mesh& mesh,
                            const PartitionSpec& partition_spec,
                            std::source_location where = std::source_location::current());

/// A tensor on `device` holding `host`'s values, laid out over `mesh` by `partition_spec` from
/// the start: under use_spmd() each device receives only its shard (what the parallel loader's
/// input_sharding does with each batch). Errors as mark_sharding's.
Tensor tensor_from_host_sharded(const CpuTensor& host, const Mesh& mesh,
                                const PartitionSpec& partition_spec, Device device = {},
                                std::source_location where = std::source_location::current());

/// Removes `tensor`'s sharding annotation (torch_xla's clear_sharding): its value is replicated
/// again as far as annotations go.
void clear_sharding(const Tensor& tensor);

/// The tensor's sharding in XLA's text ("{devices=[2,1]0,1}"), or "" when it has none, as
/// torch_xla's _get_xla_sharding_spec.
[[nodiscard]] std::string get_sharding_spec(const Tensor& tensor);

/// The tensor's sharding, or nullopt when it has none.
[[nodiscard]] std::optional<ShardingSpec> sharding(const Tensor& tensor);

}  // namespace axle::spmd
