// actors: spawn's replica threads, the runtime queries, and the replicas' side of rendezvous.
#include "axle/actors/host/replicas.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <thread>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replica_host.h"
#include "axle/actors/runtime/replica_exchange.h"
#include "axle/engine/exception_text.h"
#include "axle/engine/log.h"

namespace axle {
namespace {

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
  void rethrow(int world_size, int first_local) {
    std::lock_guard lock(mutex_);
    if (!error_) return;
    throw ReplicaError(replica_,
                       fmt::format("replica {} of {} ({}) failed: {}", replica_, world_size,
                                   Device{replica_ - first_local}.to_string(), what_),
                       error_);
  }

 private:
  std::mutex mutex_;
  int replica_ = -1;
  std::exception_ptr error_;
  std::string what_;
};

// The calling replica's identity: its place in spawn, or this process's in a job of several
// processes; null outside both.
const ReplicaIdentity* current_replica() { return ReplicaHost::current().replica(); }

// How rendezvous payloads cross processes.
constexpr ValueCodec kBytesCodec{
    [](const void* value, WireWriter& out, int) {
      const auto& bytes = *static_cast<const std::vector<std::byte>*>(value);
      out.put_block(bytes.data(), bytes.size());
    },
    [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
      const std::span<const std::byte> block = in.get_block("a payload");
      return std::make_shared<const std::vector<std::byte>>(block.begin(), block.end());
    }};

void run_replica(const std::function<void(int)>& fn, const ReplicaIdentity slot,
                 FirstFailure& failure, const ActorRef<RendezvousActor>& rendezvous_actor) {
  ReplicaHost& host = ReplicaHost::current();
  host.join_replica(slot);
  const std::string label = fmt::format("replica-{}", slot.ordinal);
  const ScopedLogLabel log_label(label);
  try {
    fn(slot.ordinal);
    // The device may still have collectives to meet the others at: it leaves once it is done.
    host.wait_device_ops({Device{slot.device}});
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
  host.leave_replica();
}

}  // namespace

void spawn(std::function<void(int)> fn, std::optional<int> nprocs) {
  if (!fn) throw std::invalid_argument("spawn: the function is empty");
  if (const ReplicaIdentity* replica = current_replica();
      replica && replica->group != kProcessGroup) {
    throw std::invalid_argument(
        fmt::format("spawn: called from replica {} of {}; a replica "
                    "cannot spawn replicas",
                    replica->ordinal, replica->world_size));
  }
  LazySystem& system = LazySystem::get();
  const int devices = system.device_count();
  const int n = nprocs.value_or(devices);
  const ProcessPlacement process = ProcessTransport::placement();
  if (n == 1 && process.count == 1) {
    fn(0);
    return;
  }
  if (n != devices) {
    throw std::invalid_argument(fmt::format(
        "spawn: nprocs={} is not supported: it must be 1 or the number of devices (this process "
        "has {} {} device{}; CPU_NUM_DEVICES sets how many)",
        n, devices, system.backend().hardware(), devices == 1 ? "" : "s"));
  }
  // Every process of the job spawns as many replicas, the same number of times, so the groups'
  // numbers agree among them.
  const uint64_t group = g_next_group.fetch_add(1, std::memory_order_relaxed);
  const ActorRef<RendezvousActor> rendezvous_actor = system.rendezvous_actor();
  const int world = n * process.count;
  const int first_local = n * process.index;
  rendezvous_actor.ask(OpenGroup{group, world, first_local, n}).get();
  FirstFailure failure;
  if (n == 1) {
    // One replica per process: it runs on the calling thread, a replica of the job all the same
    // (its failure cancels the other processes' replicas).
    run_replica(fn,
                ReplicaIdentity{.group = group,
                                .ordinal = first_local,
                                .world_size = world,
                                .device = 0,
                                .first_local = first_local,
                                .local_count = 1},
                failure, rendezvous_actor);
    rendezvous_actor.tell(CloseGroup{group});
    failure.rethrow(world, first_local);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  try {
    for (int i = 0; i < n; ++i) {
      threads.emplace_back(run_replica, std::cref(fn),
                           ReplicaIdentity{.group = group,
                                           .ordinal = first_local + i,
                                           .world_size = world,
                                           .device = i,
                                           .first_local = first_local,
                                           .local_count = n},
                           std::ref(failure), std::cref(rendezvous_actor));
    }
  } catch (const std::exception& e) {
    // The replicas already running must not wait for the ones that never started.
    const int missing = first_local + static_cast<int>(threads.size());
    const std::string what = fmt::format("its thread could not start: {}", e.what());
    failure.record(missing, std::current_exception(), what);
    rendezvous_actor.ask(CancelGroup{group, missing, what}).get();
  }
  for (std::thread& thread : threads) thread.join();
  rendezvous_actor.tell(CloseGroup{group});
  failure.rethrow(world, first_local);
}

int world_size() {
  const ReplicaIdentity* replica = current_replica();
  return replica && !LazySystem::get().spmd() ? replica->world_size : 1;
}
int global_ordinal() {
  const ReplicaIdentity* replica = current_replica();
  return replica && !LazySystem::get().spmd() ? replica->ordinal : 0;
}
int local_ordinal() {
  const ReplicaIdentity* replica = current_replica();
  if (!replica) return 0;
  // The processes of a host hold consecutive ordinals, as many each.
  return ProcessTransport::placement().local_index * replica->local_count + replica->device;
}
int process_index() { return ProcessTransport::placement().index; }
int process_count() { return ProcessTransport::placement().count; }
int local_process_count() { return ProcessTransport::placement().local_count; }
int host_index() { return ProcessTransport::placement().host_index; }
int local_device_count() {
  return LazySystem::get().device_count() * ProcessTransport::placement().local_count;
}
int addressable_device_count() { return LazySystem::get().device_count(); }
int global_device_count() {
  return LazySystem::get().device_count() * ProcessTransport::placement().count;
}
int global_runtime_device_count() { return global_device_count(); }
int addressable_runtime_device_count() { return addressable_device_count(); }
bool is_master_ordinal(bool local) { return (local ? local_ordinal() : global_ordinal()) == 0; }
Device xla_device() { return Device{}; }

std::vector<std::vector<std::byte>> rendezvous(std::string_view tag,
                                               std::span<const std::byte> payload,
                                               std::vector<int> replicas) {
  using Bytes = std::vector<std::byte>;
  const ReplicaIdentity* replica = current_replica();
  const ReplicaIdentity alone{};  // outside spawn: replica 0 of 1
  const Gathered all = exchange_with_replicas(
      LazySystem::get().rendezvous_actor(), replica ? *replica : alone, "rendezvous", tag,
      std::make_shared<const Bytes>(payload.begin(), payload.end()), typeid(Bytes),
      std::move(replicas), &kBytesCodec);
  std::vector<Bytes> payloads;
  payloads.reserve(all->size());
  for (const std::shared_ptr<const void>& each : *all) {
    payloads.push_back(*static_cast<const Bytes*>(each.get()));
  }
  return payloads;
}

namespace detail {
std::vector<std::shared_ptr<const void>> gather(std::string_view op, std::string_view tag,
                                                std::shared_ptr<const void> value,
                                                const std::type_info& type,
                                                std::vector<int> replicas,
                                                const ValueBytes* bytes) {
  const ReplicaIdentity* replica = current_replica();
  const ReplicaIdentity alone{};  // outside spawn: replica 0 of 1
  // Each value carries its encoder, since the meeting points' codecs are plain functions, and
  // its bytes once encoded: the wire takes a large block by reference until the message is
  // taken, so they live as long as the value (which the meeting point holds while it sends).
  // Encoded under the meeting points' lock, once for every process it goes to.
  struct Outgoing {
    std::shared_ptr<const void> value;
    const ValueBytes* bytes;
    mutable std::optional<std::vector<std::byte>> encoded;
  };
  static constexpr ValueCodec kTravellingCodec{
      [](const void* v, WireWriter& out, int) {
        const auto& outgoing = *static_cast<const Outgoing*>(v);
        if (!outgoing.encoded) {
          outgoing.bytes->encode(outgoing.value.get(), outgoing.encoded.emplace());
        }
        out.put_block(outgoing.encoded->data(), outgoing.encoded->size());
      },
      [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
        const std::span<const std::byte> block = in.get_block("a value");
        return std::make_shared<const Outgoing>(Outgoing{
            std::make_shared<const std::vector<std::byte>>(block.begin(), block.end()), nullptr});
      }};
  if (bytes) value = std::make_shared<const Outgoing>(Outgoing{std::move(value), bytes});
  const Gathered all = exchange_with_replicas(
      LazySystem::get().rendezvous_actor(), replica ? *replica : alone, op, tag, std::move(value),
      type, std::move(replicas), bytes ? &kTravellingCodec : nullptr);
  std::vector<std::shared_ptr<const void>> values;
  values.reserve(all->size());
  for (const std::shared_ptr<const void>& each : *all) {
    if (!bytes) {
      values.push_back(each);
      continue;
    }
    const auto& arrived = *static_cast<const Outgoing*>(each.get());
    // From another process (no encoder): its bytes, decoded as this replica's type.
    values.push_back(arrived.bytes ? arrived.value
                                   : bytes->decode(*static_cast<const std::vector<std::byte>*>(
                                         arrived.value.get())));
  }
  return values;
}

}  // namespace detail
}  // namespace axle
