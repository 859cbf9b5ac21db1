// actors: spawn's replica threads, the runtime queries, and the replicas' side of rendezvous.
#include "actors/replicas.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <thread>

#include "actors/api.h"
#include "actors/lazy_system.h"
#include "engine/config.h"
#include "engine/exception_text.h"
#include "engine/log.h"

namespace axle {
namespace {

// Who the calling thread is, while it runs as a replica of spawn.
using ReplicaSlot = detail::ReplicaIdentity;
thread_local constinit const ReplicaSlot* tls_replica = nullptr;

std::atomic<uint64_t> g_next_group{1};

// The first failure among a spawn's replicas: the one spawn reports. A replica that fails only
// because another one did (ReplicaCancelled) always comes later: its wait is cancelled after the
// failure that caused it was recorded.
class FirstFailure {
 public:
  void record(int replica, std::exception_ptr error, const std::string& what) {
    std::lock_guard lock(mutex_);
    if (error_) return;
    replica_ = replica;
    error_ = std::move(error);
    what_ = what;
  }
  void rethrow(int world_size) {
    std::lock_guard lock(mutex_);
    if (!error_) return;
    throw ReplicaError(replica_,
                       fmt::format("replica {} of {} ({}) failed: {}", replica_, world_size,
                                   Device{replica_}.to_string(), what_),
                       error_);
  }

 private:
  std::mutex mutex_;
  int replica_ = -1;
  std::exception_ptr error_;
  std::string what_;
};

void run_replica(const std::function<void(int)>& fn, const ReplicaSlot slot, FirstFailure& failure,
                 const ActorRef<RendezvousActor>& rendezvous_actor) {
  tls_replica = &slot;
  const ReplicaScope replica_scope(Device{slot.ordinal}, slot.world_size);
  const std::string label = fmt::format("replica-{}", slot.ordinal);
  const ScopedLogLabel log_label(label);
  try {
    fn(slot.ordinal);
    // The device may still have collectives to meet the others at: it leaves once it is done.
    wait_device_ops({Device{slot.ordinal}});
    // Asked, not told: spawn closes the group after joining, and must find these handled.
    rendezvous_actor.ask(LeaveGroup{slot.group, slot.ordinal}).get();
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    const std::string what = exception_text(error);
    failure.record(slot.ordinal, error, what);
    try {
      rendezvous_actor.ask(CancelGroup{slot.group, slot.ordinal, what}).get();
    } catch (const std::exception& e) {
      AXLE_LOG(ERROR, "replica {} failed and could not cancel the others: {}", slot.ordinal,
               e.what());
    }
  }
  tls_replica = nullptr;
}

}  // namespace

namespace detail {

const ReplicaIdentity* current_replica() noexcept { return tls_replica; }

std::chrono::nanoseconds collective_timeout() {
  const double seconds = config::get_double("AXLE_COLLECTIVE_TIMEOUT", 300);
  // Over a year is as good as forever, and keeps the conversion in range.
  if (!(seconds > 0) || seconds > 3.2e7) {
    throw ConfigError(fmt::format(
        "AXLE_COLLECTIVE_TIMEOUT={} must be a number of seconds above 0 and below 3.2e7", seconds));
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(seconds));
}

}  // namespace detail

void spawn(std::function<void(int)> fn, std::optional<int> nprocs) {
  if (!fn) throw std::invalid_argument("spawn: the function is empty");
  if (tls_replica) {
    throw std::invalid_argument(
        fmt::format("spawn: called from replica {} of {}; a replica "
                    "cannot spawn replicas",
                    tls_replica->ordinal, tls_replica->world_size));
  }
  LazySystem& system = LazySystem::get();
  const int devices = system.device_count();
  const int n = nprocs.value_or(devices);
  if (n == 1) {
    fn(0);
    return;
  }
  if (n != devices) {
    throw std::invalid_argument(fmt::format(
        "spawn: nprocs={} is not supported: it must be 1 or the number of devices (this process "
        "has {} {} device{}; CPU_NUM_DEVICES sets how many)",
        n, devices, system.backend().hardware(), devices == 1 ? "" : "s"));
  }
  const uint64_t group = g_next_group.fetch_add(1, std::memory_order_relaxed);
  const ActorRef<RendezvousActor> rendezvous_actor = system.rendezvous_actor();
  rendezvous_actor.ask(OpenGroup{group, n}).get();
  FirstFailure failure;
  std::vector<std::thread> threads;
  threads.reserve(n);
  try {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(run_replica, std::cref(fn), ReplicaSlot{group, i, n}, std::ref(failure),
                           std::cref(rendezvous_actor));
    }
  } catch (const std::exception& e) {
    // The replicas already running must not wait for the ones that never started.
    const int missing = static_cast<int>(threads.size());
    const std::string what = fmt::format("its thread could not start: {}", e.what());
    failure.record(missing, std::current_exception(), what);
    rendezvous_actor.ask(CancelGroup{group, missing, what}).get();
  }
  for (std::thread& thread : threads) thread.join();
  rendezvous_actor.tell(CloseGroup{group});
  failure.rethrow(n);
}

int world_size() { return tls_replica ? tls_replica->world_size : 1; }
int global_ordinal() { return tls_replica ? tls_replica->ordinal : 0; }
int local_ordinal() { return global_ordinal(); }
int local_process_count() { return 1; }
int local_device_count() { return LazySystem::get().device_count(); }
int addressable_device_count() { return LazySystem::get().device_count(); }
int global_device_count() { return LazySystem::get().device_count(); }
bool is_master_ordinal(bool local) { return (local ? local_ordinal() : global_ordinal()) == 0; }
Device xla_device() { return Device{}; }

std::vector<std::vector<std::byte>> rendezvous(std::string_view tag,
                                               std::span<const std::byte> payload,
                                               std::vector<int> replicas) {
  using Bytes = std::vector<std::byte>;
  const Gathered all = detail::gather("rendezvous", tag,
                                      std::make_shared<const Bytes>(payload.begin(), payload.end()),
                                      typeid(Bytes), std::move(replicas));
  std::vector<Bytes> payloads;
  payloads.reserve(all->size());
  for (const std::shared_ptr<const void>& each : *all) {
    payloads.push_back(*static_cast<const Bytes*>(each.get()));
  }
  return payloads;
}

namespace detail {

Gathered gather(std::string_view op, std::string_view tag, std::shared_ptr<const void> value,
                const std::type_info& type, std::vector<int> replicas) {
  const int size = world_size();
  const int me = global_ordinal();
  std::ranges::sort(replicas);
  const bool repeated = std::ranges::adjacent_find(replicas) != replicas.end();
  const bool outside = !replicas.empty() && (replicas.front() < 0 || replicas.back() >= size);
  if (repeated || outside || (!replicas.empty() && !std::ranges::binary_search(replicas, me))) {
    throw std::invalid_argument(fmt::format(
        "{} '{}': replicas {{{}}} must be distinct ordinals below {} that include the caller, "
        "replica {}",
        op, tag, fmt::join(replicas, ", "), size, me));
  }
  if (replicas.empty()) {
    replicas.resize(size);
    std::iota(replicas.begin(), replicas.end(), 0);
  }
  if (replicas.size() == 1) {
    return std::make_shared<const std::vector<std::shared_ptr<const void>>>(1, std::move(value));
  }
  Arrive arrive{
      op,    tls_replica->group,  me, std::string(tag), std::move(replicas), std::move(value),
      &type, collective_timeout()};
  // The reply's error is rethrown as an exception of this thread's own (with its own copy of the
  // message: std::runtime_error copies share it), and the reply outlives the copying: the actor
  // may release the original last, and libstdc++'s uninstrumented reference counts would make
  // ThreadSanitizer report that release as a race with the reads here.
  Future<Gathered> reply = LazySystem::get().rendezvous_actor().ask(std::move(arrive));
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

}  // namespace detail
}  // namespace axle
