// actors: the SPMD runtime, as torch_xla's under use_spmd(). The user sees one virtual device,
// Device{0}; behind it every device of the job is a position 0..N-1 of the mesh: the process's
// devices, or under mpirun every process's, by global ordinal (process-major: process p of L
// devices holds positions p*L .. p*L+L-1). A tensor's data there is a global value held in
// shards, one per device (graph/device_data.h), each process holding only its own devices'
// (from DeviceData::first_shard on): data made from host values (which every process holds
// whole) is replicated (each device holds all of it), mark_sharding lays it out by its sharding,
// and a step's results come back laid out as the compiler's propagation decided. A step is traced
// once as the global program (by every process, the same), compiled once into the program every
// device runs on its shards (actors/compiler/lowering.h), and sent to each of the process's devices
// with its shards and its position (ReplicaHost); the devices meet in its collectives as the
// replicas of one group, kSpmdGroup, which spans the job's processes. Reading a value assembles it
// from one shard per tile; when some tiles are only on other processes the read is a collective:
// each process reads the tiles it is the first holder of and the processes exchange them (every
// process must read the same values in the same order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/future.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/shape.h"
#include "axle/graph/device_data.h"

namespace axle {

/// Turns SPMD on for the rest of the process's system, as torch_xla.runtime.use_spmd(): one
/// virtual device over every device of the job (XLA_USE_SPMD=1 does the same at start). Call it
/// before creating tensors; in a job of several processes every process calls it, and it throws
/// std::logic_error when they hold different device counts.
void use_spmd();
/// Whether SPMD is on (torch_xla.runtime.is_spmd()).
[[nodiscard]] bool is_spmd();

class LazySystem;

/// New data on the virtual device holding `bytes` on every device of the mesh (replicated);
/// the copies may still be under way.
[[nodiscard]] IntrusivePtr<DeviceData> upload_to_mesh(
    LazySystem& system, std::shared_ptr<const std::vector<std::byte>> bytes, DType dtype,
    const Shape& shape);
/// New data on the virtual device holding `value` laid out by `sharding` (a key of
/// intern_sharding, -1 replicated): each of the process's devices receives its tile. Throws for a
/// sharding that does not fit the shape or does not place every device of the job.
[[nodiscard]] IntrusivePtr<DeviceData> upload_tiles_to_mesh(LazySystem& system,
                                                            const std::vector<std::byte>& value,
                                                            DType dtype, const Shape& shape,
                                                            int64_t sharding);
/// `data`'s value on the host: a plain buffer's bytes, or a sharded value assembled from one
/// shard of each tile. Never blocks, but for a value some of whose tiles are on other processes:
/// then every process of the job must read it (a collective), and the call waits for them.
[[nodiscard]] Future<std::vector<std::byte>> read_device_data(LazySystem& system,
                                                              IntrusivePtr<DeviceData> data);
/// Whether two sharding keys (intern_sharding, -1 replicated) lay data out alike.
[[nodiscard]] bool same_sharding(int64_t a, int64_t b);
/// `data` laid out over the mesh by `sharding` (a key of intern_sharding, -1 replicated): `data`
/// itself when it is laid out so already, else new data made from its value (waits for it).
[[nodiscard]] IntrusivePtr<DeviceData> lay_out_on_mesh(LazySystem& system,
                                                       IntrusivePtr<DeviceData> data,
                                                       int64_t sharding);

}  // namespace axle
