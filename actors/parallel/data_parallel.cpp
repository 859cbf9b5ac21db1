// actors: gradient averaging and parameter broadcast across replicas.
#include "axle/actors/parallel/data_parallel.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "axle/actors/host/api.h"
#include "axle/actors/host/replicas.h"
#include "axle/engine/dtype.h"
#include "axle/graph/autograd.h"
#include "axle/graph/device.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

// For each parameter a DistributedDataParallel averaged, the gradient it left in grad(). Keyed
// by TensorImpl: the DDP holds its parameters, and forgets them when it goes away.
struct AveragedGrads {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, const TensorImpl*> grad_of;
};

AveragedGrads& averaged_grads() {
  static AveragedGrads registry;
  return registry;
}

}  // namespace

namespace detail {

void note_averaged_grad(const Tensor& param, const Tensor& grad) {
  AveragedGrads& registry = averaged_grads();
  const std::scoped_lock lock(registry.mutex);
  registry.grad_of[param.impl()] = grad.impl();
}

void forget_averaged_grad(const Tensor& param) noexcept {
  AveragedGrads& registry = averaged_grads();
  const std::scoped_lock lock(registry.mutex);
  registry.grad_of.erase(param.impl());
}

bool grad_is_averaged(const Tensor& param) {
  const Tensor grad = param.grad();
  if (!grad.defined()) return false;
  AveragedGrads& registry = averaged_grads();
  const std::scoped_lock lock(registry.mutex);
  const auto it = registry.grad_of.find(param.impl());
  return it != registry.grad_of.end() && it->second == grad.impl();
}

}  // namespace detail

std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<Tensor>& tensors,
                                                       std::size_t cap_bytes) {
  std::vector<std::vector<std::size_t>> closed;
  std::map<DType, std::pair<std::vector<std::size_t>, std::size_t>> open;  // members, bytes
  for (std::size_t k = tensors.size(); k-- > 0;) {
    const std::size_t bytes =
        static_cast<std::size_t>(tensors[k].numel()) * dtype_size(tensors[k].dtype());
    auto& [members, filled] = open[tensors[k].dtype()];
    if (!members.empty() && filled + bytes > cap_bytes) {
      closed.push_back(std::move(members));
      members.clear();
      filled = 0;
    }
    members.push_back(k);
    filled += bytes;
  }
  for (auto& [dtype, bucket] : open) {
    if (!bucket.first.empty()) closed.push_back(std::move(bucket.first));
  }
  // In the order backward fills them: by their first member, last parameter first.
  std::ranges::sort(closed, [](const auto& a, const auto& b) { return a.front() > b.front(); });
  return closed;
}

void optimizer_step(optim::Optimizer& optimizer, bool barrier, const ReplicaGroups& groups,
                    std::source_location where) {
  if (replica_world_size() > 1) {
    std::vector<Tensor> with_grad;
    for (const Tensor& param : optimizer.params()) {
      if (param.grad().defined() && !detail::grad_is_averaged(param)) with_grad.push_back(param);
    }
    if (!with_grad.empty()) {
      const auto members =
          groups.empty() ? replica_world_size() : static_cast<int>(groups.front().size());
      const NoGradGuard no_grad;
      const auto cap = static_cast<std::size_t>(kDefaultBucketCapMb * 1024 * 1024);
      for (const std::vector<std::size_t>& bucket : gradient_buckets(with_grad, cap)) {
        std::vector<Tensor> grads;
        grads.reserve(bucket.size());
        for (std::size_t i : bucket) grads.push_back(with_grad[i].grad());
        std::vector<Tensor> averaged =
            all_reduce(ReduceType::kSum, grads, 1.0 / members, groups, where);
        for (std::size_t k = 0; k < bucket.size(); ++k) {
          with_grad[bucket[k]].set_grad(averaged[k], where);
        }
      }
    }
  }
  optimizer.step();
  if (barrier) mark_step(false, where);
}

void broadcast_from_master(const std::vector<Tensor>& tensors, const ReplicaGroups& groups,
                           std::source_location where) {
  if (replica_world_size() == 1 || tensors.empty()) return;
  const NoGradGuard no_grad;
  // The group's first member contributes its values, the others -0.0 (x + -0.0 is x, bit for
  // bit, -0.0 and NaN included), chosen by `where`, so that a NaN elsewhere cannot reach the
  // sum. Whether this replica is the first is data, not a constant: every replica traces one
  // graph. An all-reduce needs one copy of the values in flight; gathering every replica's
  // would need one per replica.
  const int me = global_ordinal();
  bool first = me == 0;
  if (!groups.empty()) {
    const auto group = std::ranges::find_if(
        groups, [me](const std::vector<int>& g) { return std::ranges::find(g, me) != g.end(); });
    first = group != groups.end() && !group->empty() && group->front() == me;
  }
  const Tensor is_first = gt(tensor(std::vector<float>{first ? 1.0f : 0.0f}, Shape{}), 0.5, where);
  std::vector<Tensor> summed;    // arithmetic dtypes: reduced
  std::vector<Tensor> gathered;  // bool: gathered, the first's row kept
  for (const Tensor& t : tensors) (t.dtype() == DType::kBool ? gathered : summed).push_back(t);
  const auto cap = static_cast<std::size_t>(kDefaultBucketCapMb * 1024 * 1024);
  for (const std::vector<std::size_t>& bucket : gradient_buckets(summed, cap)) {
    std::vector<Tensor> contributions;
    contributions.reserve(bucket.size());
    for (std::size_t i : bucket) {
      const Tensor& t = summed[i];
      const double nothing = is_floating(t.dtype()) ? -0.0 : 0.0;
      contributions.push_back(
          axle::where(is_first, t, full({}, nothing, t.dtype(), t.device(), where), where));
    }
    const std::vector<Tensor> masters =
        all_reduce(ReduceType::kSum, contributions, 1.0, groups, where);
    for (std::size_t k = 0; k < bucket.size(); ++k) summed[bucket[k]].copy_(masters[k], where);
  }
  for (const Tensor& t : gathered) {
    const Tensor rows = all_gather(reshape(t, {1, t.numel()}, where), 0, groups, where);
    const auto dims = t.shape().dims();
    t.copy_(reshape(slice(rows, 0, 0, 1, 1, where), std::vector<int64_t>(dims.begin(), dims.end()),
                    where),
            where);
  }
}

void broadcast_master_param(const nn::Module& module, std::source_location where) {
  broadcast_from_master(module.parameters(), {}, where);
}

}  // namespace axle
