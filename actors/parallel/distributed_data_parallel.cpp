// actors: DistributedDataParallel — parameter and buffer broadcast, and the reducer that
// averages gradients bucket by bucket from post-accumulate-grad hooks, as torch's Reducer.
#include "axle/actors/parallel/distributed_data_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <utility>

#include "axle/actors/host/api.h"
#include "axle/actors/parallel/data_parallel.h"
#include "axle/graph/autograd.h"
#include "axle/graph/ops.h"

namespace axle {

// The per-backward state: which parameters' gradients are in, and which buckets went out.
// Buckets are reduced strictly in order, as torch's Reducer launches them, so every replica
// traces the same all_reduces in the same order even when backward reaches parameters in an
// order other than the buckets'.
struct DistributedDataParallel::Reducer {
  std::vector<Tensor> params;  // those that require grad, in registration order
  std::vector<std::string> names;
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<std::size_t> hooks;
  ReplicaGroups groups;
  int members = 1;
  bool find_unused_parameters = false;
  std::source_location where;

  // False inside no_sync(): gradients accumulate locally. `accumulated` marks the parameters
  // that got a gradient in such a backward, so the next synchronised one averages it even if
  // that backward gives the parameter none.
  bool require_backward_grad_sync = true;
  std::vector<bool> accumulated;

  bool in_backward = false;
  std::vector<bool> ready;
  std::vector<std::size_t> missing;  // per bucket: gradients not in yet
  std::size_t next_bucket = 0;

  void start_backward(const std::shared_ptr<Reducer>& self) {
    in_backward = true;
    ready.assign(params.size(), false);
    missing.clear();
    for (const auto& bucket : buckets) missing.push_back(bucket.size());
    next_bucket = 0;
    autograd::queue_callback([self] { self->finish_backward(); }, where);
  }

  void on_grad(const std::shared_ptr<Reducer>& self, std::size_t index) {
    if (!require_backward_grad_sync) {
      accumulated[index] = true;
      return;
    }
    if (!in_backward) start_backward(self);
    if (ready[index]) return;
    ready[index] = true;
    --missing[bucket_of[index]];
    while (next_bucket < buckets.size() && missing[next_bucket] == 0) reduce(next_bucket++);
  }

  // One all_reduce of the bucket's gradients (zeros for a parameter that got none).
  void reduce(std::size_t b) {
    const std::vector<std::size_t>& bucket = buckets[b];
    std::vector<Tensor> grads;
    grads.reserve(bucket.size());
    for (std::size_t i : bucket) {
      const bool has_grad = ready[i] || (accumulated[i] && params[i].grad().defined());
      grads.push_back(has_grad ? params[i].grad() : zeros_like(params[i], where));
      accumulated[i] = false;
    }
    if (members > 1) grads = all_reduce(ReduceType::kSum, grads, 1.0 / members, groups, where);
    for (std::size_t k = 0; k < bucket.size(); ++k) {
      const Tensor& param = params[bucket[k]];
      param.set_grad(grads[k], where);
      detail::note_averaged_grad(param, grads[k]);
    }
  }

  void finish_backward() {
    in_backward = false;
    std::vector<std::string> unused;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!ready[i] && !accumulated[i]) unused.push_back(names[i]);
    }
    if (!unused.empty() && !find_unused_parameters) {
      throw std::runtime_error(fmt::format(
          "DistributedDataParallel (constructed at {}:{}): backward() gave no gradient to {} {}, "
          "which {} grad; every parameter's gradient is averaged in every backward, so each must "
          "take part in the loss. Construct it with find_unused_parameters = true if some "
          "parameters sit out some steps (their gradient then counts as zero), or turn "
          "requires_grad off for those that never take part",
          where.file_name(), where.line(), unused.size() == 1 ? "parameter" : "parameters",
          fmt::join(unused, ", "), unused.size() == 1 ? "requires" : "require"));
    }
    while (next_bucket < buckets.size()) reduce(next_bucket++);
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 DistributedDataParallelOptions options,
                                                 std::source_location where)
    : module_(std::move(module)), options_(std::move(options)) {
  if (!module_) {
    throw std::invalid_argument(fmt::format("DistributedDataParallel at {}:{}: the module is null",
                                            where.file_name(), where.line()));
  }
  if (!(options_.bucket_cap_mb > 0)) {
    throw std::invalid_argument(
        fmt::format("DistributedDataParallel at {}:{}: bucket_cap_mb must be positive, not {}",
                    where.file_name(), where.line(), options_.bucket_cap_mb));
  }
  register_module("module", module_);
  auto reducer = std::make_shared<Reducer>();
  reducer->groups = options_.groups;
  reducer->members = options_.groups.empty() ? replica_world_size()
                                             : static_cast<int>(options_.groups.front().size());
  reducer->find_unused_parameters = options_.find_unused_parameters;
  reducer->where = where;

  // The master's parameters and buffers, so replicas initialised apart start the same.
  std::vector<Tensor> state;
  for (const auto& [name, param] : named_parameters()) {
    state.push_back(param);
    if (!param.requires_grad()) continue;
    reducer->params.push_back(param);
    reducer->names.push_back(name);
  }
  for (const auto& [name, buffer] : named_buffers()) state.push_back(buffer);
  if (reducer->members > 1) broadcast_from_master(state, options_.groups, where);

  reducer->accumulated.assign(reducer->params.size(), false);
  const auto cap = static_cast<std::size_t>(options_.bucket_cap_mb * 1024 * 1024);
  reducer->buckets = gradient_buckets(reducer->params, cap);
  reducer->bucket_of.resize(reducer->params.size());
  for (std::size_t b = 0; b < reducer->buckets.size(); ++b) {
    for (std::size_t i : reducer->buckets[b]) reducer->bucket_of[i] = b;
  }
  for (std::size_t i = 0; i < reducer->params.size(); ++i) {
    reducer->hooks.push_back(autograd::register_post_accumulate_grad_hook(
        reducer->params[i],
        [weak = std::weak_ptr<Reducer>(reducer), i](const Tensor&) {
          if (const std::shared_ptr<Reducer> self = weak.lock()) self->on_grad(self, i);
        },
        where));
  }
  reducer_ = std::move(reducer);
}

DistributedDataParallel::~DistributedDataParallel() {
  for (std::size_t i = 0; i < reducer_->params.size(); ++i) {
    autograd::remove_post_accumulate_grad_hook(reducer_->params[i], reducer_->hooks[i]);
    detail::forget_averaged_grad(reducer_->params[i]);
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  before_forward();
  return module_->forward(input);
}

Tensor DistributedDataParallel::forward(const Tensor& input, const Tensor& other) {
  before_forward();
  return module_->forward(input, other);
}

void DistributedDataParallel::before_forward() {
  Reducer& reducer = *reducer_;
  // A backward that threw half way through starts over with the next.
  reducer.in_backward = false;
  for (const Tensor& param : reducer.params) detail::forget_averaged_grad(param);
  if (options_.broadcast_buffers && reducer.members > 1 && GradMode::is_enabled()) {
    std::vector<Tensor> buffers;
    for (const auto& [name, buffer] : module_->named_buffers()) buffers.push_back(buffer);
    broadcast_from_master(buffers, options_.groups, reducer.where);
  }
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<void> reducer, bool was_syncing) noexcept
    : reducer_(std::move(reducer)), was_syncing_(was_syncing) {}

DistributedDataParallel::NoSync::NoSync(NoSync&& other) noexcept
    : reducer_(std::move(other.reducer_)), was_syncing_(other.was_syncing_) {}

DistributedDataParallel::NoSync::~NoSync() {
  if (reducer_) static_cast<Reducer*>(reducer_.get())->require_backward_grad_sync = was_syncing_;
}

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() {
  const bool was_syncing = reducer_->require_backward_grad_sync;
  reducer_->require_backward_grad_sync = false;
  return NoSync(reducer_, was_syncing);
}

bool DistributedDataParallel::require_backward_grad_sync() const noexcept {
  return reducer_->require_backward_grad_sync;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> layout;
  for (const auto& bucket : reducer_->buckets) {
    std::vector<std::string> names;
    for (std::size_t i : bucket) names.push_back(reducer_->names[i]);
    layout.push_back(std::move(names));
  }
  return layout;
}

}  // namespace axle
