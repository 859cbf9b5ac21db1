// actors: step closures.
#include "actors/closure_runner.h"

#include <fmt/format.h>

#include <chrono>

namespace axle {

void ClosureFailures::add(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (!first_) first_ = std::move(error);
}

std::exception_ptr ClosureFailures::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(first_, nullptr);
}

void run_step_closure(const StepClosure& closure, const Observers& observers) {
  // Told when the closure is done, failed or not.
  struct Tell {
    const StepClosure& closure;
    const Observers& observers;
    std::chrono::steady_clock::time_point start = observer_now();
    ~Tell() {
      const Span run{start, observer_now()};
      observers.tell([&](ActorObserver& o) { o.closure_ran(closure, run); });
    }
  } tell{closure, observers};
  // An async closure runs on the closure runner's thread, yet `Device{}` in it is still the
  // adding replica's device.
  const DefaultDeviceScope device(closure.device);
  // User code: it may read values, which blocks (on its own thread, when asynchronous).
  const UserCodeScope user_code;
  try {
    closure.fn();
  } catch (const std::exception& e) {
    throw StepClosureError(fmt::format("the step closure added at {}:{} failed: {}",
                                       closure.where.file_name(), closure.where.line(), e.what()));
  } catch (...) {
    throw StepClosureError(fmt::format("the step closure added at {}:{} threw",
                                       closure.where.file_name(), closure.where.line()));
  }
}

void ClosureRunner::handle(RunAfterStep& m) {
  Work work;
  work.batch = std::move(m);
  queue_.push_back(std::move(work));
  pump();
}

void ClosureRunner::handle(DrainClosures&, Promise<void>&& reply) {
  Work work;
  work.is_drain = true;
  work.drained = std::move(reply);
  queue_.push_back(std::move(work));
  pump();
}

void ClosureRunner::pump() {
  while (!queue_.empty()) {
    Work& head = queue_.front();
    if (head.is_drain) {
      head.drained.set_value();
      queue_.pop_front();
      continue;
    }
    for (const IntrusivePtr<DeviceData>& out : head.batch.outputs) {
      if (!out->pending()) continue;
      if (waiting_on_ != out.get()) {
        waiting_on_ = out.get();
        out->when_done([self = self()] { self.tell(StepOutputDone{}); });
      }
      return;
    }
    waiting_on_ = nullptr;
    for (const StepClosure& closure : head.batch.closures) {
      try {
        run_step_closure(closure, observers_);
      } catch (...) {
        head.batch.failures->add(std::current_exception());
      }
    }
    queue_.pop_front();
  }
}

}  // namespace axle
