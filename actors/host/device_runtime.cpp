// actors: the device runtime.
#include "axle/actors/host/device_runtime.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replica_host.h"
#include "axle/actors/host/spmd_runtime.h"
#include "axle/graph/tensor.h"
#include "axle/graph/tensor_runtime.h"

namespace axle {
namespace {

class DeviceRuntime final : public TensorRuntime {
 public:
  void after_op(const Tensor& result, const SourceLocation& where) override {
    ReplicaHost::current().after_op(result, where);
  }

  void sync(std::span<const Tensor> tensors, SyncReason reason,
            const std::source_location& where) override {
    ReplicaHost::current().sync(tensors, reason, where);
  }

  Future<std::vector<std::byte>> read(IntrusivePtr<DeviceData> data) override {
    return read_device_data(LazySystem::get(), std::move(data));
  }

  std::vector<std::byte> read_blocking(IntrusivePtr<DeviceData> data) override {
    const Observers& observers = LazySystem::get().observers();
    // The replica's wait, failed reads included.
    struct TellWait {
      const Observers& observers;
      std::chrono::steady_clock::time_point asked = observer_now();
      ~TellWait() {
        if (observers.empty()) return;
        const Span waited{asked, observer_now()};
        StepBreakdown& account = *ReplicaHost::current().account();
        observers.tell([&](ActorObserver& o) { o.value_waited(account, waited); });
      }
    } tell{observers};
    return read(std::move(data)).get();
  }

  // Uploads up to this size are copied on the uploading thread when the device is idle.
  static constexpr std::size_t kUploadOnHostBytes = std::size_t{64} << 10;

  IntrusivePtr<DeviceData> upload(std::vector<std::byte> bytes, DType dtype, const Shape& shape,
                                  Device device) override {
    LazySystem& system = LazySystem::get();
    if (system.spmd()) {
      check_device(device);
      return upload_to_mesh(
          system, std::make_shared<const std::vector<std::byte>>(std::move(bytes)), dtype, shape);
    }
    const ActorRef<DeviceActor>& actor = system.device_actor(device);
    auto data = make_intrusive<DeviceData>(device, dtype, shape);
    const bool small = bytes.size() <= kUploadOnHostBytes;
    TransferToDevice transfer{std::make_shared<const std::vector<std::byte>>(std::move(bytes)),
                              data};
    // A small copy costs less than handing it to the device's thread, and leaves the device
    // idle for a short step to run on this thread too (ReplicaHost::runs_on_host).
    if (small && system.run_on_host_below_ns() > 0) {
      actor.tell_here(std::move(transfer));
    } else {
      actor.tell(std::move(transfer));
    }
    return data;
  }

  void check_device(Device device) override {
    LazySystem& system = LazySystem::get();
    if (system.spmd() && device.ordinal != 0) {
      throw std::out_of_range(fmt::format(
          "device {} does not exist under SPMD: use_spmd() makes one virtual device, xla:0, over "
          "the job's {} devices",
          device.to_string(), system.spmd_device_count()));
    }
    (void)system.device_actor(device);
  }

  IntrusivePtr<DeviceData> upload_sharded(std::vector<std::byte> bytes, DType dtype,
                                          const Shape& shape, Device device,
                                          int64_t sharding) override {
    LazySystem& system = LazySystem::get();
    if (!system.spmd()) return upload(std::move(bytes), dtype, shape, device);
    check_device(device);
    return upload_tiles_to_mesh(system, bytes, dtype, shape, sharding);
  }

  IntrusivePtr<DeviceData> reshard(IntrusivePtr<DeviceData> data, int64_t sharding) override {
    LazySystem& system = LazySystem::get();
    if (!system.spmd()) return data;
    return lay_out_on_mesh(system, std::move(data), sharding);
  }
};

TensorRuntime* device_runtime() {
  static DeviceRuntime runtime;
  return &runtime;
}

}  // namespace

bool use_devices_by_default() noexcept {
  set_default_tensor_runtime(&device_runtime);
  return true;
}

}  // namespace axle
