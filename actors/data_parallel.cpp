// actors: gradient averaging and parameter broadcast across replicas.
#include "actors/data_parallel.h"

#include <map>

#include "actors/api.h"
#include "graph/autograd.h"
#include "graph/device.h"
#include "graph/ops.h"

namespace axle {

void optimizer_step(optim::Optimizer& optimizer, bool barrier, const ReplicaGroups& groups,
                    std::source_location where) {
  if (replica_world_size() > 1) {
    std::vector<Tensor> with_grad;
    std::vector<Tensor> grads;
    for (const Tensor& param : optimizer.params()) {
      if (param.grad().defined()) {
        with_grad.push_back(param);
        grads.push_back(param.grad());
      }
    }
    if (!grads.empty()) {
      const auto members =
          groups.empty() ? replica_world_size() : static_cast<int>(groups.front().size());
      const NoGradGuard no_grad;
      std::vector<Tensor> averaged =
          all_reduce(ReduceType::kSum, grads, 1.0 / members, groups, where);
      for (std::size_t i = 0; i < with_grad.size(); ++i) {
        with_grad[i].set_grad(averaged[i], where);
      }
    }
  }
  optimizer.step();
  if (barrier) mark_step(false, where);
}

void broadcast_master_param(const nn::Module& module, std::source_location where) {
  if (replica_world_size() == 1) return;
  const std::vector<Tensor> params = module.parameters();
  const NoGradGuard no_grad;
  // Per dtype, the parameters as one flat row; gathering the rows and keeping replica 0's is
  // exact (an all-reduce of zeros would turn a NaN elsewhere into the master's value's ruin).
  std::map<DType, std::vector<std::size_t>> buckets;
  for (std::size_t i = 0; i < params.size(); ++i) buckets[params[i].dtype()].push_back(i);
  for (const auto& [dtype, members] : buckets) {
    std::vector<Tensor> flat;
    flat.reserve(members.size());
    for (std::size_t i : members) flat.push_back(reshape(params[i], {1, params[i].numel()}, where));
    const Tensor rows =
        all_gather(members.size() == 1 ? flat[0] : cat(flat, 1, where), 0, {}, where);
    int64_t offset = 0;
    for (std::size_t i : members) {
      const Tensor& param = params[i];
      const auto dims = param.shape().dims();
      const Tensor master =
          slice(slice(rows, 0, 0, 1, 1, where), 1, offset, offset + param.numel(), 1, where);
      param.copy_(reshape(master, std::vector<int64_t>(dims.begin(), dims.end()), where), where);
      offset += param.numel();
    }
  }
}

}  // namespace axle
