// actors: data-parallel training across spawn's replicas, as torch_xla's xm.optimizer_step and
// xm.broadcast_master_param. Both trace collectives into the step, like any op.
// DistributedDataParallel (actors/parallel/distributed_data_parallel.h) averages in backward
// instead.
#pragma once

#include <cstddef>
#include <source_location>
#include <vector>

#include "axle/graph/collectives.h"
#include "axle/graph/nn/module.h"
#include "axle/graph/optim/optimizer.h"

namespace axle {

/// The gradient bucket size optimizer_step uses, as torch_xla's reduce_gradients and torch's
/// DistributedDataParallel default bucket_cap_mb (MiB).
inline constexpr double kDefaultBucketCapMb = 25;

/// Averages every parameter's gradient over the replicas of the caller's group (summed, then
/// scaled by 1 / the group's size), then steps `optimizer`; with `barrier`, marks the step too.
/// The gradients go in buckets of at most kDefaultBucketCapMb filled in reverse parameter order
/// (gradient_buckets), one all_reduce per bucket and dtype, not one per tensor. Gradients that a
/// DistributedDataParallel already averaged in this backward are not averaged again. With one
/// replica the gradients stay as they are.
void optimizer_step(optim::Optimizer& optimizer, bool barrier = false,
                    const ReplicaGroups& groups = {},
                    std::source_location where = std::source_location::current());

/// Gives every replica the master replica's (ordinal 0's) parameters, bit for bit, so replicas
/// that initialised their models apart start the same. Traced: the copies run with the next
/// mark_step.
void broadcast_master_param(const nn::Module& module,
                            std::source_location where = std::source_location::current());

/// Gives each tensor of `tensors` (in place) the value it has on the first replica of the
/// caller's group (ordinal 0 with no groups), bit for bit, as torch.distributed's broadcast from
/// the group's rank 0. Traced: all_reduces (in buckets of kDefaultBucketCapMb) of the first
/// member's values and every other member's -0.0.
void broadcast_from_master(const std::vector<Tensor>& tensors, const ReplicaGroups& groups = {},
                           std::source_location where = std::source_location::current());

/// Splits `tensors` into buckets for gradient all-reduces, as torch's DDP
/// (compute_bucket_assignment_by_size): tensors are taken in reverse order (the order backward
/// produces the gradients of parameters in registration order); each bucket holds one dtype and
/// at most `cap_bytes`, except that a tensor larger than the cap has a bucket of its own. Returns
/// each bucket's indices into `tensors`, buckets ordered by their first tensor in reverse order.
[[nodiscard]] std::vector<std::vector<std::size_t>> gradient_buckets(
    const std::vector<Tensor>& tensors, std::size_t cap_bytes);

namespace detail {
/// Marks `grad` as the gradient a DistributedDataParallel averaged for `param`, so optimizer_step
/// does not average it again (while `param`'s grad() is that tensor).
void note_averaged_grad(const Tensor& param, const Tensor& grad);
/// Forgets `param`'s averaged gradient (its DistributedDataParallel is going away).
void forget_averaged_grad(const Tensor& param) noexcept;
/// Whether `param`'s grad() is the gradient a DistributedDataParallel averaged.
[[nodiscard]] bool grad_is_averaged(const Tensor& param);
}  // namespace detail

}  // namespace axle
