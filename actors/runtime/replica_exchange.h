// actors: host values exchanged among spawn's replicas outside the graph, through the
// RendezvousActor's host channel — the core of rendezvous and mesh_reduce (actors/host/replicas.h),
// and of the comparison of graphs before a graph with collectives first runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "axle/actors/runtime/rendezvous_actor.h"

namespace axle {

/// Who a replica of spawn is.
struct ReplicaIdentity {
  uint64_t group = 0;  ///< spawn's group at the RendezvousActor
  int ordinal = 0;     ///< among every replica of the job (global ordinal)
  int world_size = 1;
  int device = 0;       ///< its device: its ordinal among this process's replicas
  int first_local = 0;  ///< the global ordinal of this process's first replica
  int local_count = 1;  ///< this process's replicas
};

/// The group of a job's processes outside spawn, where each process is one replica.
inline constexpr uint64_t kProcessGroup = ~uint64_t{0};
/// The group an SPMD program's devices meet in (their positions 0..N-1 are its ordinals).
inline constexpr uint64_t kSpmdGroup = ~uint64_t{0} - 1;

/// In a job of several processes (launched by mpirun), this process as one replica of
/// kProcessGroup: what a thread outside spawn is. Null when the process is the whole job.
[[nodiscard]] const ReplicaIdentity* process_replica();

/// AXLE_COLLECTIVE_TIMEOUT (seconds, default 300), checked: how long a replica waits for the
/// others at a rendezvous or an in-graph collective.
[[nodiscard]] std::chrono::nanoseconds collective_timeout();

/// Every replica's `value` (of `type`) by ordinal, once each of `replicas` (all of the group's
/// when empty; it must include `me`) has brought its own. `op` and `tag` name the point in
/// errors; `codec` takes `value` to other processes (without one, a meeting that spans processes
/// fails). Throws std::invalid_argument for bad `replicas`, and what the RendezvousActor fails
/// the point with (CollectiveTimeout, CollectiveError, ReplicaCancelled), rethrown as this
/// thread's own exceptions.
[[nodiscard]] Gathered exchange_with_replicas(const ActorRef<RendezvousActor>& rendezvous,
                                              const ReplicaIdentity& me, std::string_view op,
                                              std::string_view tag,
                                              std::shared_ptr<const void> value,
                                              const std::type_info& type, std::vector<int> replicas,
                                              const ValueCodec* codec = nullptr);

}  // namespace axle
