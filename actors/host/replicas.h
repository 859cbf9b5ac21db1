// actors: replication, as torch_xla's xmp.spawn and torch_xla.runtime — spawn runs a function once
// per device, each replica on a thread of its own with its own host (actors/host/replica_host.h)
// and its device as the thread's default; the runtime queries say which replica the caller is; and
// rendezvous / mesh_reduce exchange host values between replicas outside the graph, through the
// RendezvousActor. Outside spawn the caller is the only replica: ordinal 0 of 1, on device 0.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "axle/actors/runtime/errors.h"
#include "axle/graph/device.h"

namespace axle {

/// Runs `fn(ordinal)` once per replica of this process and returns when every one has returned,
/// as torch_xla's xmp.spawn. `nprocs` is 1 — `fn` runs on the calling thread (in a job of several
/// processes as the process's replica of the job, failing and cancelling as below) — or every
/// device of the process (CPU_NUM_DEVICES; the default): local replica `i` then runs on a thread
/// of its own, with its own trace context (its tensors, pending graph, step closures and random
/// state) and device `i` as its default (`Device{}`, `device()`, `xla_device()`). `ordinal` is
/// the replica's global ordinal: in a job of several processes (mpirun), process `p` running `n`
/// replicas holds ordinals p·n .. p·n + n - 1, and every process must spawn as many. Before
/// returning, a replica waits for its device's work and its asynchronous step closures. When a
/// replica throws, the others' waits on replicas (rendezvous, mesh_reduce) fail with
/// ReplicaCancelled, and spawn throws a ReplicaError naming the first replica that failed, once
/// every replica has returned. Any other `nprocs`, or a call from inside a replica, throws
/// std::invalid_argument.
void spawn(std::function<void(int)> fn, std::optional<int> nprocs = std::nullopt);

/// A replica of spawn threw: the message names the replica and what it threw.
class ReplicaError : public std::runtime_error {
 public:
  /// `what` is the message; `original` the exception replica `replica` threw.
  ReplicaError(int replica, const std::string& what, std::exception_ptr original)
      : std::runtime_error(what), replica_(replica), original_(std::move(original)) {}
  /// The ordinal of the replica that failed.
  [[nodiscard]] int replica() const noexcept { return replica_; }
  /// The exception the replica threw (std::rethrow_exception it to catch it by type).
  [[nodiscard]] std::exception_ptr original() const noexcept { return original_; }

 private:
  int replica_;
  std::exception_ptr original_;
};

/// Replicas taking part in the job: spawn's replica count times the job's processes; outside
/// spawn, the job's processes (each process is one replica). Under use_spmd() 1, as torch_xla's
/// (the program is written for one device, however many processes run it).
[[nodiscard]] int world_size();
/// This replica's ordinal among all replicas of the job, in process order (outside spawn, the
/// process's index). Under use_spmd() 0 in every process (process_index() tells them apart).
[[nodiscard]] int global_ordinal();
/// This replica's ordinal among the replicas of its host, as torch_xla's: with one process per
/// host, its device (0 outside spawn).
[[nodiscard]] int local_ordinal();
/// This process's index among the job's processes (its MPI rank; 0 without mpirun).
[[nodiscard]] int process_index();
/// The job's processes (1 without mpirun).
[[nodiscard]] int process_count();
/// Processes of the job on this host.
[[nodiscard]] int local_process_count();
/// This process's host, hosts numbered in the order of their lowest process index.
[[nodiscard]] int host_index();
/// Devices on this host: every device of each of its processes.
[[nodiscard]] int local_device_count();
/// Devices this process can address: every device of the process (a replica may place tensors
/// on any of them, though its own is its default).
[[nodiscard]] int addressable_device_count();
/// Devices across the job: every device of every process.
[[nodiscard]] int global_device_count();
/// The runtime devices across the job, as torch_xla.runtime.global_runtime_device_count: every
/// device of every process, under SPMD too (where the mesh is built from them).
[[nodiscard]] int global_runtime_device_count();
/// The runtime devices of this process (torch_xla's addressable_runtime_device_count).
[[nodiscard]] int addressable_runtime_device_count();
/// True on the replica of local (or, with `local = false`, global) ordinal 0: the one of each
/// host (or of the job) that logs, checkpoints and prints.
[[nodiscard]] bool is_master_ordinal(bool local = true);
/// This thread's default device, as torch_xla's xm.xla_device(): the replica's own inside spawn,
/// else xla:0. The same as `Device{}` and `device()`.
[[nodiscard]] Device xla_device();

/// Exchanges `payload` between the replicas in `replicas` (all of them when empty; it must
/// include the caller), as torch_xla's xm.rendezvous: blocks until every one of them has reached
/// the rendezvous, then returns their payloads in ascending ordinal order (so, with every replica,
/// entry `i` is replica `i`'s). Replicas meet at their n-th rendezvous over the same replicas,
/// which must have the same `tag`; different tags there throw CollectiveError naming both. Throws
/// CollectiveTimeout naming the missing replicas when they do not all arrive within
/// AXLE_COLLECTIVE_TIMEOUT seconds (default 300), CollectiveError when one of them has returned
/// from its function without arriving, and ReplicaCancelled when another replica failed.
std::vector<std::vector<std::byte>> rendezvous(std::string_view tag,
                                               std::span<const std::byte> payload = {},
                                               std::vector<int> replicas = {});

namespace detail {
/// How a mesh_reduce value of one type crosses processes: its bytes, and the value again.
struct ValueBytes {
  void (*encode)(const void* value, std::vector<std::byte>& out);
  std::shared_ptr<const void> (*decode)(std::span<const std::byte> bytes);
};

/// The core of mesh_reduce: every replica's `value` (of `type`), by ordinal; `bytes` takes
/// values across processes (null: the value meets only the replicas of this process).
[[nodiscard]] std::vector<std::shared_ptr<const void>> gather(
    std::string_view op, std::string_view tag, std::shared_ptr<const void> value,
    const std::type_info& type, std::vector<int> replicas, const ValueBytes* bytes);

template <class T>
struct is_vector : std::false_type {};
template <class E>
struct is_vector<std::vector<E>> : std::true_type {};

/// A value whose bytes are the whole of it (std::pair of such values too).
template <class T>
inline constexpr bool kPlainValue = std::is_trivially_copyable_v<T> ||
                                    (std::is_trivially_copy_constructible_v<T> &&
                                     std::is_trivially_destructible_v<T>);

inline void append_bytes(std::vector<std::byte>& out, const void* data, std::size_t size) {
  const auto* first = static_cast<const std::byte*>(data);
  out.insert(out.end(), first, first + size);
}

/// How mesh_reduce's values of type T cross processes: plain values (kPlainValue), and
/// std::string and std::vector of plain values; null for any other type, which then meets only
/// among the replicas of one process.
template <class T>
const ValueBytes* bytes_for() {
  if constexpr (kPlainValue<T> || std::is_same_v<T, std::string>) {
    static constexpr ValueBytes kBytes{
        [](const void* value, std::vector<std::byte>& out) {
          const T& v = *static_cast<const T*>(value);
          if constexpr (std::is_same_v<T, std::string>)
            append_bytes(out, v.data(), v.size());
          else
            append_bytes(out, &v, sizeof(T));
        },
        [](std::span<const std::byte> block) -> std::shared_ptr<const void> {
          if constexpr (std::is_same_v<T, std::string>) {
            return std::make_shared<const T>(reinterpret_cast<const char*>(block.data()),
                                             block.size());
          } else {
            if (block.size() != sizeof(T)) throw std::runtime_error("a value of the wrong size");
            alignas(T) std::byte storage[sizeof(T)];
            std::memcpy(storage, block.data(), sizeof(T));
            return std::make_shared<const T>(*std::launder(reinterpret_cast<const T*>(storage)));
          }
        }};
    return &kBytes;
  } else if constexpr (is_vector<T>::value) {
    using E = typename T::value_type;
    if constexpr (kPlainValue<E> && !std::is_same_v<E, bool>) {
      static constexpr ValueBytes kBytes{
          [](const void* value, std::vector<std::byte>& out) {
            const T& v = *static_cast<const T*>(value);
            append_bytes(out, v.data(), v.size() * sizeof(E));
          },
          [](std::span<const std::byte> block) -> std::shared_ptr<const void> {
            if (block.size() % sizeof(E) != 0) throw std::runtime_error("a cut vector");
            auto v = std::make_shared<T>(block.size() / sizeof(E));
            if (!block.empty()) std::memcpy(v->data(), block.data(), block.size());
            return v;
          }};
      return &kBytes;
    } else {
      return nullptr;
    }
  } else {
    return nullptr;
  }
}
}  // namespace detail

/// Gathers `data` from every replica and returns `reduce_fn(values)`, with `values` ordered by
/// ordinal, as torch_xla's xm.mesh_reduce: every replica reduces the same values, so a
/// deterministic `reduce_fn` gives every replica the same result. For host values (a loss, an
/// accuracy count, a config); tensors stay in the graph. Waits, and fails, as rendezvous does; the
/// replicas must bring values of the same type T. Across processes T must be a plain type
/// (trivially copyable, or a std::pair of such), std::string, or a std::vector of a plain type.
template <class T, class F>
requires std::is_invocable_v < F&, const std::vector<T>
& > auto mesh_reduce(std::string_view tag, T data, F reduce_fn) {
  const std::vector<std::shared_ptr<const void>> all =
      detail::gather("mesh_reduce", tag, std::make_shared<const T>(std::move(data)), typeid(T), {},
                     detail::bytes_for<T>());
  std::vector<T> values;
  values.reserve(all.size());
  for (const std::shared_ptr<const void>& value : all) {
    values.push_back(*static_cast<const T*>(value.get()));
  }
  return reduce_fn(std::as_const(values));
}

}  // namespace axle
