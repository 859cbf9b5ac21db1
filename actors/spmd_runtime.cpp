// actors: the SPMD runtime — data on the mesh (see spmd_runtime.h).
#include "actors/spmd_runtime.h"

#include <fmt/format.h>

#include <mutex>
#include <set>
#include <utility>

#include "actors/lazy_system.h"
#include "graph/sharding.h"

namespace axle {
namespace {

// A key naming a replicated sharding is replicated (-1).
int64_t normalized(int64_t sharding) {
  if (sharding < 0) return -1;
  return interned_sharding(sharding).is_replicated() ? -1 : sharding;
}

// The devices whose shards, together, hold every tile once.
std::vector<int64_t> one_device_per_tile(const ShardingSpec& sharding, int64_t devices) {
  std::vector<int64_t> readers;
  std::set<std::vector<int64_t>> tiles;
  for (int64_t d = 0; d < devices; ++d) {
    if (tiles.insert(sharding.tile_of(d)).second) readers.push_back(d);
  }
  return readers;
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
  return DeviceData::from_shards(Device{0}, dtype, shape, -1, std::move(shards));
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
  const std::vector<int64_t> readers =
      one_device_per_tile(sharding, static_cast<int64_t>(shards.size()));
  auto assembly = std::make_shared<Assembly>();
  assembly->value.resize(data->bytes());
  assembly->pending = readers.size();
  auto [promise, future] = make_promise<std::vector<std::byte>>();
  assembly->promise = std::move(promise);
  const std::size_t element_size = dtype_size(data->dtype());
  for (int64_t d : readers) {
    Future<std::vector<std::byte>> shard =
        system.device_actor(Device{static_cast<int>(d)}).ask(ReadToHost{DataHold(shards[d])});
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
      static_cast<int>(data->shards().size()) == system.device_count()) {
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
  if (static_cast<int64_t>(spec.devices.size()) != system.device_count()) {
    throw std::invalid_argument(fmt::format(
        "sharding {} places {} devices, but SPMD runs every program on all {} devices of the "
        "process: make the mesh over all of them",
        to_string(spec), spec.devices.size(), system.device_count()));
  }
  const Shape local = shard_shape(shape, spec);
  std::vector<IntrusivePtr<DeviceData>> shards;
  shards.reserve(static_cast<std::size_t>(system.device_count()));
  for (int d = 0; d < system.device_count(); ++d) {
    auto shard = make_intrusive<DeviceData>(Device{d}, dtype, local);
    system.device_actor(Device{d}).tell(
        TransferToDevice{std::make_shared<const std::vector<std::byte>>(
                             shard_bytes(value, dtype_size(dtype), shape, spec, d)),
                         shard});
    shards.push_back(std::move(shard));
  }
  return DeviceData::from_shards(Device{0}, dtype, shape, sharding, std::move(shards));
}

}  // namespace axle
