// actors: the device runtime.
#include "actors/device_runtime.h"

#include <chrono>
#include <memory>

#include "actors/lazy_system.h"
#include "actors/replica_host.h"
#include "graph/tensor.h"
#include "graph/tensor_runtime.h"

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
    const ActorRef<DeviceActor>& device = LazySystem::get().device_actor(data->device());
    return device.ask(ReadToHost{DataHold(std::move(data))});
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

  IntrusivePtr<DeviceData> upload(std::vector<std::byte> bytes, DType dtype, const Shape& shape,
                                  Device device) override {
    const ActorRef<DeviceActor>& actor = LazySystem::get().device_actor(device);
    auto data = make_intrusive<DeviceData>(device, dtype, shape);
    actor.tell(
        TransferToDevice{std::make_shared<const std::vector<std::byte>>(std::move(bytes)), data});
    return data;
  }

  void check_device(Device device) override { (void)LazySystem::get().device_actor(device); }
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
