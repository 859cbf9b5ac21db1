// actors/host: the host's side of one SPMD step (ReplicaHost::sync_spmd) — roots keeping their
// layouts, inputs laid out on the mesh, what each local device runs, and the results made of
// the devices' shards.
#pragma once

#include <vector>

#include "axle/actors/runtime/device_actor.h"
#include "axle/backends/executable.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/graph/tensor_runtime.h"

namespace axle {
class LazySystem;
}  // namespace axle

namespace axle::spmd_step {

/// The sync's roots, each whose tensor has a layout annotated with it. A tensor keeps its layout
/// from step to step (as torch_xla's sharding spec on a tensor), so that propagation does not lay
/// out, say, an optimizer state updated in place otherwise than the last step did (which would
/// compile again).
[[nodiscard]] std::vector<NodePtr> roots_keeping_layouts(const DeviceSync& sync);

/// `inputs` laid out on the mesh as the SPMD program takes them, with a slot for the partition
/// index where it takes one.
void lay_out_inputs(LazySystem& system, const Executable::Spmd& layout,
                    std::vector<ExecuteInput>& inputs);

/// What local device k (mesh position `position`) runs of an SPMD step: its shard of each input,
/// its position as the partition index, and a new shard for each result (also put in `shards`).
void fill_spmd_request(ExecuteRequest& request, const std::vector<ExecuteInput>& inputs,
                       const Executable::Spmd& layout, const DeviceSync& sync, int k, int position,
                       std::vector<std::vector<IntrusivePtr<DeviceData>>>& shards);

/// The step's results, each made of its devices' shards, given to the synced tensors: they keep
/// the layout they came in, and their leaves carry it into the next step.
[[nodiscard]] std::vector<IntrusivePtr<DeviceData>> publish_spmd_results(
    const DeviceSync& sync, const Executable::Spmd& layout,
    std::vector<std::vector<IntrusivePtr<DeviceData>>> shards, int first);

}  // namespace axle::spmd_step
