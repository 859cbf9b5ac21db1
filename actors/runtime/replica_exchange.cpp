// actors: the replicas' side of a rendezvous.
#include "axle/actors/runtime/replica_exchange.h"
#include "axle/actors/runtime/collective_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace axle {

const ReplicaIdentity* process_replica() {
  static const std::optional<ReplicaIdentity> identity = []() -> std::optional<ReplicaIdentity> {
    if (!ProcessTransport::get()) return std::nullopt;
    const ProcessPlacement placement = ProcessTransport::placement();
    return ReplicaIdentity{.group = kProcessGroup,
                           .ordinal = placement.index,
                           .world_size = placement.count,
                           .device = 0,
                           .first_local = placement.index,
                           .local_count = 1};
  }();
  return identity ? &*identity : nullptr;
}

std::chrono::nanoseconds collective_timeout() { return config::read_collective_settings().timeout; }

Gathered exchange_with_replicas(const ActorRef<RendezvousActor>& rendezvous,
                                const ReplicaIdentity& me, std::string_view op,
                                std::string_view tag, std::shared_ptr<const void> value,
                                const std::type_info& type, std::vector<int> replicas,
                                const ValueCodec* codec) {
  std::ranges::sort(replicas);
  const bool repeated = std::ranges::adjacent_find(replicas) != replicas.end();
  const bool outside =
      !replicas.empty() && (replicas.front() < 0 || replicas.back() >= me.world_size);
  if (repeated || outside ||
      (!replicas.empty() && !std::ranges::binary_search(replicas, me.ordinal))) {
    throw std::invalid_argument(fmt::format(
        "{} '{}': replicas {{{}}} must be distinct ordinals below {} that include the caller, "
        "replica {}",
        op, tag, fmt::join(replicas, ", "), me.world_size, me.ordinal));
  }
  if (replicas.empty()) {
    replicas.resize(me.world_size);
    std::iota(replicas.begin(), replicas.end(), 0);
  }
  if (replicas.size() == 1) {
    return std::make_shared<const std::vector<std::shared_ptr<const void>>>(1, std::move(value));
  }
  Arrive arrive{op,
                me.group,
                me.ordinal,
                std::string(tag),
                std::move(replicas),
                std::move(value),
                &type,
                collective_timeout(),
                Channel::kHost,
                codec};
  // Waiting without polling: the transport's thread watches for the other processes' values.
  ProcessTransport* transport = ProcessTransport::get();
  if (transport) transport->begin_waiting();
  struct EndWaiting {
    ProcessTransport* transport;
    ~EndWaiting() {
      if (transport) transport->end_waiting();
    }
  } end_waiting{transport};
  // The reply's error is rethrown as an exception of this thread's own (with its own copy of the
  // message: std::runtime_error copies share it), and the reply outlives the copying: the actor
  // may release the original last, and libstdc++'s uninstrumented reference counts would make
  // ThreadSanitizer report that release as a race with the reads here.
  Future<Gathered> reply = rendezvous.ask(std::move(arrive));
  try {
    return reply.get();
  } catch (const ReplicaCancelled& e) {
    throw ReplicaCancelled(e.failed_replica(), std::string(e.what()));
  } catch (const CollectiveTimeout& e) {
    throw CollectiveTimeout(std::string(e.what()));
  } catch (const CollectiveError& e) {
    throw CollectiveError(std::string(e.what()));
  }
}

}  // namespace axle
