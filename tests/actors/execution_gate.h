// Test helper: holds every device execution until released, to observe what happens meanwhile.
#pragma once

#include <condition_variable>
#include <mutex>

#include "actors/device_actor.h"

namespace axle {

class ExecutionGate {
 public:
  ExecutionGate() {
    DeviceActor::set_execution_gate([this] {
      std::unique_lock lock(mutex_);
      ++entered_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
    });
  }
  ~ExecutionGate() {
    release();
    DeviceActor::set_execution_gate(nullptr);
  }
  void wait_entered(int n) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return entered_ >= n; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
};

}  // namespace axle
