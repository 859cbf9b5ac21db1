// actors: the SPMD runtime — data on the mesh (see spmd_runtime.h).
#include "axle/actors/host/spmd_runtime.h"

#include <fmt/format.h>

#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/replica_exchange.h"
#include "axle/graph/sharding.h"

namespace axle {
namespace {

// A key naming a replicated sharding is replicated (-1).
int64_t normalized(int64_t sharding) {
  if (sharding < 0) return -1;
  return interned_sharding(sharding).is_replicated() ? -1 : sharding;
}

// The devices among `first` .. `first + count - 1` whose shards, together, hold every tile they
// hold once (the lowest device holding each).
std::vector<int64_t> one_device_per_tile(const ShardingSpec& sharding, int64_t first,
                                         int64_t count) {
  std::vector<int64_t> readers;
  std::set<std::vector<int64_t>> tiles;
  for (int64_t d = first; d < first + count; ++d) {
    if (tiles.insert(sharding.tile_of(d)).second) readers.push_back(d);
  }
  return readers;
}

// Whether some process of the job lacks a tile of `sharding`: reading the value is then a
// collective among the processes. Every process decides alike (the same spec, the same layout).
bool tiles_span_processes(const ShardingSpec& sharding, int64_t devices, int64_t local) {
  const std::size_t tiles = one_device_per_tile(sharding, 0, devices).size();
  for (int64_t first = 0; first < devices; first += local) {
    if (one_device_per_tile(sharding, first, local).size() != tiles) return true;
  }
  return false;
}

// The tiles one process brings to a collective read: (device, shard bytes) for each tile whose
// lowest holder is its device; or, when it could not read them (a failed step), why.
struct Tiles {
  std::vector<std::pair<int64_t, std::vector<std::byte>>> pieces;
  std::string error;
};

constexpr ValueCodec kTilesCodec{
    [](const void* value, WireWriter& out, int) {
      const auto& tiles = *static_cast<const Tiles*>(value);
      out.put_string(tiles.error);
      out.put<uint64_t>(tiles.pieces.size());
      for (const auto& [device, bytes] : tiles.pieces) {
        out.put(device);
        out.put_block(bytes.data(), bytes.size());
      }
    },
    [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
      auto tiles = std::make_shared<Tiles>();
      tiles->error = in.get_string("a read's error");
      const auto count = in.get<uint64_t>("a read's tile count");
      for (uint64_t i = 0; i < count; ++i) {
        const auto device = in.get<int64_t>("a tile's device");
        const std::span<const std::byte> bytes = in.get_block("a tile");
        tiles->pieces.emplace_back(device, std::vector<std::byte>(bytes.begin(), bytes.end()));
      }
      return tiles;
    }};

// A sharded value some of whose tiles only other processes hold: this process reads the tiles it
// is the first holder of, and the processes exchange them (the host channel of kProcessGroup, as
// rendezvous does), each assembling the whole value.
std::vector<std::byte> read_across_processes(LazySystem& system, const DeviceData& data,
                                             const ShardingSpec& sharding) {
  const int64_t devices = system.spmd_device_count();
  const int64_t first = data.first_shard();
  const int64_t local = static_cast<int64_t>(data.shards().size());
  const std::vector<int64_t> owned = one_device_per_tile(sharding, 0, devices);
  std::vector<std::pair<int64_t, Future<std::vector<std::byte>>>> reads;
  for (int64_t d : owned) {
    if (d < first || d >= first + local) continue;
    reads.emplace_back(d, system.device_actor(Device{static_cast<int>(d - first)})
                              .ask(ReadToHost{DataHold(data.shards()[d - first])}));
  }
  // A tile this process cannot read still comes to the exchange, as its error: the others fail
  // at once instead of waiting for it.
  auto mine = std::make_shared<Tiles>();
  std::exception_ptr failed;
  try {
    for (auto& [d, bytes] : reads) mine->pieces.emplace_back(d, bytes.get());
  } catch (const std::exception& e) {
    failed = std::current_exception();
    mine->pieces.clear();
    mine->error = e.what();
  }
  const std::string tag = fmt::format("read a sharded value {}{} {}", dtype_name(data.dtype()),
                                      data.shape().to_string(), to_string(sharding));
  const Gathered all =
      exchange_with_replicas(system.rendezvous_actor(), *process_replica(), "read", tag,
                             std::move(mine), typeid(Tiles), {}, &kTilesCodec);
  if (failed) std::rethrow_exception(failed);
  for (std::size_t p = 0; p < all->size(); ++p) {
    const auto& theirs = *static_cast<const Tiles*>((*all)[p].get());
    if (!theirs.error.empty()) {
      throw std::runtime_error(
          fmt::format("{}: process {} could not read its tiles: {}", tag, p, theirs.error));
    }
  }
  std::vector<std::byte> value(data.bytes());
  const std::size_t element_size = dtype_size(data.dtype());
  for (const auto& theirs : *all) {
    for (const auto& [d, bytes] : static_cast<const Tiles*>(theirs.get())->pieces) {
      place_shard(value, bytes, element_size, data.shape(), sharding, d);
    }
  }
  return value;
}

// A value assembled from shards as their reads complete.
struct Assembly {
  std::mutex mutex;
  std::vector<std::byte> value;
  std::size_t pending = 0;
  bool failed = false;
  Promise<std::vector<std::byte>> promise;
};

}  // namespace

bool same_sharding(int64_t a, int64_t b) { return a == b || normalized(a) == normalized(b); }

void use_spmd() { LazySystem::get().enable_spmd(); }

bool is_spmd() { return LazySystem::get().spmd(); }

IntrusivePtr<DeviceData> upload_to_mesh(LazySystem& system,
                                        std::shared_ptr<const std::vector<std::byte>> bytes,
                                        DType dtype, const Shape& shape) {
  std::vector<IntrusivePtr<DeviceData>> shards;
  shards.reserve(static_cast<std::size_t>(system.device_count()));
  for (int d = 0; d < system.device_count(); ++d) {
    auto shard = make_intrusive<DeviceData>(Device{d}, dtype, shape);
    system.device_actor(Device{d}).tell(TransferToDevice{bytes, shard});
    shards.push_back(std::move(shard));
  }
  return DeviceData::from_shards(Device{0}, dtype, shape, -1, std::move(shards),
                                 system.first_spmd_device());
}

Future<std::vector<std::byte>> read_device_data(LazySystem& system, IntrusivePtr<DeviceData> data) {
  if (!data->sharded()) {
    const ActorRef<DeviceActor>& device = system.device_actor(data->device());
    return device.ask(ReadToHost{DataHold(std::move(data))});
  }
  const std::vector<IntrusivePtr<DeviceData>>& shards = data->shards();
  if (data->sharding() < 0) {
    return system.device_actor(Device{0}).ask(ReadToHost{DataHold(shards[0])});
  }
  const ShardingSpec sharding = interned_sharding(data->sharding());
  const int64_t first = data->first_shard();
  if (static_cast<int64_t>(shards.size()) < system.spmd_device_count() &&
      tiles_span_processes(sharding, system.spmd_device_count(),
                           static_cast<int64_t>(shards.size()))) {
    auto [promise, future] = make_promise<std::vector<std::byte>>();
    try {
      promise.set_value(read_across_processes(system, *data, sharding));
    } catch (...) {
      promise.set_error(std::current_exception());
    }
    return std::move(future);
  }
  const std::vector<int64_t> readers =
      one_device_per_tile(sharding, first, static_cast<int64_t>(shards.size()));
  auto assembly = std::make_shared<Assembly>();
  assembly->value.resize(data->bytes());
  assembly->pending = readers.size();
  auto [promise, future] = make_promise<std::vector<std::byte>>();
  assembly->promise = std::move(promise);
  const std::size_t element_size = dtype_size(data->dtype());
  for (int64_t d : readers) {
    Future<std::vector<std::byte>> shard = system.device_actor(Device{static_cast<int>(d - first)})
                                               .ask(ReadToHost{DataHold(shards[d - first])});
    auto state = shard.state();
    // As tensor reads do: the callback lets go of the state it is kept by as it runs.
    state->on_ready([state, assembly, d, sharding, element_size, shape = data->shape()]() mutable {
      const auto outcome = std::move(state);
      Result<std::vector<std::byte>> bytes = outcome->take();
      std::unique_lock lock(assembly->mutex);
      if (assembly->failed) return;
      if (!bytes.ok()) {
        assembly->failed = true;
        lock.unlock();
        assembly->promise.set_error(bytes.error());
        return;
      }
      try {
        place_shard(assembly->value, bytes.value(), element_size, shape, sharding, d);
      } catch (...) {
        assembly->failed = true;
        lock.unlock();
        assembly->promise.set_error(std::current_exception());
        return;
      }
      if (--assembly->pending > 0) return;
      std::vector<std::byte> value = std::move(assembly->value);
      lock.unlock();
      assembly->promise.set_value(std::move(value));
    });
  }
  return std::move(future);
}

IntrusivePtr<DeviceData> lay_out_on_mesh(LazySystem& system, IntrusivePtr<DeviceData> data,
                                         int64_t sharding) {
  sharding = normalized(sharding);
  if (data->sharded() && normalized(data->sharding()) == sharding &&
      static_cast<int>(data->shards().size()) == system.device_count() &&
      data->first_shard() == system.first_spmd_device()) {
    return data;
  }
  auto value = std::make_shared<const std::vector<std::byte>>(read_device_data(system, data).get());
  if (sharding < 0) return upload_to_mesh(system, std::move(value), data->dtype(), data->shape());
  return upload_tiles_to_mesh(system, *value, data->dtype(), data->shape(), sharding);
}

IntrusivePtr<DeviceData> upload_tiles_to_mesh(LazySystem& system,
                                              const std::vector<std::byte>& value, DType dtype,
                                              const Shape& shape, int64_t sharding) {
  sharding = normalized(sharding);
  if (sharding < 0) {
    return upload_to_mesh(system, std::make_shared<const std::vector<std::byte>>(value), dtype,
                          shape);
  }
  const ShardingSpec spec = interned_sharding(sharding);
  check_sharding(shape, spec, "mark_sharding");
  if (static_cast<int64_t>(spec.devices.size()) != system.spmd_device_count()) {
    const int processes = ProcessTransport::placement().count;
    throw std::invalid_argument(fmt::format(
        "sharding {} places {} devices, but SPMD runs every program on all {} devices of the {}: "
        "make the mesh over all of them",
        to_string(spec), spec.devices.size(), system.spmd_device_count(),
        processes == 1
            ? std::string("process")
            : fmt::format("job ({} processes of {})", processes, system.device_count())));
  }
  // Each process places its own devices' tiles (global ordinals from first_spmd_device).
  const Shape local = shard_shape(shape, spec);
  const int first = system.first_spmd_device();
  std::vector<IntrusivePtr<DeviceData>> shards;
  shards.reserve(static_cast<std::size_t>(system.device_count()));
  for (int d = 0; d < system.device_count(); ++d) {
    auto shard = make_intrusive<DeviceData>(Device{d}, dtype, local);
    system.device_actor(Device{d}).tell(
        TransferToDevice{std::make_shared<const std::vector<std::byte>>(
                             shard_bytes(value, dtype_size(dtype), shape, spec, first + d)),
                         shard});
    shards.push_back(std::move(shard));
  }
  return DeviceData::from_shards(Device{0}, dtype, shape, sharding, std::move(shards), first);
}

}  // namespace axle
