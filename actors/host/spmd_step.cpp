// actors/host: the host's side of one SPMD step (spmd_step.h).
#include "axle/actors/host/spmd_step.h"

#include <utility>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/spmd_runtime.h"
#include "axle/graph/ir.h"
#include "axle/graph/tensor.h"

namespace axle::spmd_step {

std::vector<NodePtr> roots_keeping_layouts(const DeviceSync& sync) {
  std::vector<NodePtr> roots = sync.roots;
  for (std::size_t i = 0; i < sync.tensors.size(); ++i) {
    const int64_t sharding = sync.tensors[i]->sharding();
    NodePtr& root = roots[sync.root_of[i]];
    if (sharding < 0 || root->op() == Op::kCustomSharding) continue;
    root = make_intrusive<Node>(Op::kCustomSharding, root->dtype(), root->shape(), Operands{root},
                                IntAttrs{sharding}, RealAttrs{}, root->where());
  }
  return roots;
}

void lay_out_inputs(LazySystem& system, const Executable::Spmd& layout,
                    std::vector<ExecuteInput>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].data) continue;
    const int64_t wanted = i < layout.input_shardings.size() ? layout.input_shardings[i] : -1;
    const DeviceData& data = *inputs[i].data;
    if (!data.sharded() || data.sharding() != wanted) {
      inputs[i].data = lay_out_on_mesh(system, inputs[i].data, wanted);
    }
  }
  if (layout.partition_input >= 0) {
    inputs.insert(inputs.begin() + layout.partition_input, ExecuteInput{{}, DType::kInt64, 0});
  }
}

void fill_spmd_request(ExecuteRequest& request, const std::vector<ExecuteInput>& inputs,
                       const Executable::Spmd& layout, const DeviceSync& sync, int k, int position,
                       std::vector<std::vector<IntrusivePtr<DeviceData>>>& shards) {
  request.inputs.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ExecuteInput& input = inputs[i];
    if (static_cast<int32_t>(i) == layout.partition_input) {
      request.inputs.push_back({{}, DType::kInt64, static_cast<double>(position)});
    } else if (input.data) {
      request.inputs.push_back({input.data->shards()[k], input.dtype, 0});
    } else {
      request.inputs.push_back(input);
    }
  }
  request.outputs.reserve(sync.roots.size());
  for (std::size_t j = 0; j < sync.roots.size(); ++j) {
    auto shard = make_intrusive<DeviceData>(Device{k}, sync.roots[j]->dtype(),
                                            layout.output_shard_shapes.at(j));
    shards[j].push_back(shard);
    request.outputs.push_back(std::move(shard));
  }
}

std::vector<IntrusivePtr<DeviceData>> publish_spmd_results(
    const DeviceSync& sync, const Executable::Spmd& layout,
    std::vector<std::vector<IntrusivePtr<DeviceData>>> shards, int first) {
  std::vector<IntrusivePtr<DeviceData>> outputs;
  outputs.reserve(sync.roots.size());
  for (std::size_t j = 0; j < sync.roots.size(); ++j) {
    outputs.push_back(DeviceData::from_shards(Device{0}, sync.roots[j]->dtype(),
                                              sync.roots[j]->shape(), layout.output_shardings.at(j),
                                              std::move(shards[j]), first));
  }
  for (std::size_t i = 0; i < sync.tensors.size(); ++i) {
    TensorImpl& tensor = *sync.tensors[i];
    tensor.set_data(outputs[sync.root_of[i]]);
    const int64_t sharding = layout.output_shardings[sync.root_of[i]];
    if (!same_sharding(tensor.sharding(), sharding)) tensor.set_sharding(sharding);
  }
  return outputs;
}

}  // namespace axle::spmd_step
