// actors: data-parallel training across spawn's replicas, as torch_xla's xm.optimizer_step and
// xm.broadcast_master_param. Both trace collectives into the step, like any op.
#pragma once

#include <source_location>

#include "graph/collectives.h"
#include "graph/nn/module.h"
#include "graph/optim/optimizer.h"

namespace axle {

/// Averages every parameter's gradient over the replicas of the caller's group (summed, then
/// scaled by 1 / the group's size; one all_reduce per dtype, not one per tensor), then steps
/// `optimizer`; with `barrier`, marks the step too. With one replica the gradients stay as they
/// are.
void optimizer_step(optim::Optimizer& optimizer, bool barrier = false,
                    const ReplicaGroups& groups = {},
                    std::source_location where = std::source_location::current());

/// Gives every replica the master replica's (ordinal 0's) parameters, bit for bit, so replicas
/// that initialised their models apart start the same. Traced: the copies run with the next
/// mark_step.
void broadcast_master_param(const nn::Module& module,
                            std::source_location where = std::source_location::current());

}  // namespace axle
