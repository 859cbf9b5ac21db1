// actors: step closures.
#include "axle/actors/runtime/closure_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "axle/engine/this_thread.h"

namespace axle {

void ClosureFailures::add(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (!first_) first_ = std::move(error);
}

std::exception_ptr ClosureFailures::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(first_, nullptr);
}

ClosureBacklog::Entry ClosureBacklog::admit(std::size_t count, std::size_t limit, bool* waited) {
  std::unique_lock lock(mutex_);
  const auto fits = [&] { return limit == 0 || pending_ == 0 || pending_ + count <= limit; };
  if (waited) *waited = !fits();
  ran_.wait(lock, fits);
  pending_ += count;
  peak_ = std::max(peak_, pending_);
  return Entry(shared_from_this(), count);
}

void ClosureBacklog::ran(std::size_t count) noexcept {
  {
    std::lock_guard lock(mutex_);
    pending_ -= std::min(pending_, count);
  }
  ran_.notify_all();
}

std::size_t ClosureBacklog::pending() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

std::size_t ClosureBacklog::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

std::chrono::steady_clock::time_point step_done_at(
    const std::vector<IntrusivePtr<DeviceData>>& outputs) {
  std::chrono::steady_clock::time_point last{};
  for (const IntrusivePtr<DeviceData>& out : outputs) last = std::max(last, out->done_at());
  // A step with no outputs to wait for completed as far as anyone can tell now.
  return outputs.empty() ? std::chrono::steady_clock::now() : last;
}

void run_step_closure(const StepClosure& closure, const Observers& observers,
                      std::chrono::steady_clock::time_point step_done) {
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
  StepDone done{step_done};
  struct Bound {
    StepDone* previous;
    ~Bound() { ThisThread<StepDone>::bind(previous); }
  } bound{ThisThread<StepDone>::bind(&done)};
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
  Queue& queue = queues_[m.failures.get()];
  Work work;
  work.batch = std::move(m);
  queue.work.push_back(std::move(work));
  pump();
}

void ClosureRunner::handle(DrainClosures& m, Promise<void>&& reply) {
  const auto queue = queues_.find(m.replica);
  if (queue == queues_.end()) {
    reply.set_value();
    return;
  }
  Work work;
  work.is_drain = true;
  work.drained = std::move(reply);
  queue->second.work.push_back(std::move(work));
  pump();
}

void ClosureRunner::pump() {
  for (auto it = queues_.begin(); it != queues_.end();) {
    it = pump(it->second) ? std::next(it) : queues_.erase(it);
  }
}

bool ClosureRunner::pump(Queue& queue) {
  while (!queue.work.empty()) {
    Work& head = queue.work.front();
    if (head.is_drain) {
      head.drained.set_value();
      queue.work.pop_front();
      continue;
    }
    for (const IntrusivePtr<DeviceData>& out : head.batch.outputs) {
      if (!out->pending()) continue;
      if (queue.waiting_on != out.get()) {
        queue.waiting_on = out.get();
        out->when_done([self = self()] { self.tell(StepOutputDone{}); });
      }
      return true;
    }
    queue.waiting_on = nullptr;
    const auto step_done = step_done_at(head.batch.outputs);
    for (const StepClosure& closure : head.batch.closures) {
      try {
        run_step_closure(closure, observers_, step_done);
      } catch (...) {
        head.batch.failures->add(std::current_exception());
      }
    }
    // Counted out once the batch (and what its closures captured) is gone, so a host let in by
    // it finds that memory free.
    ClosureBacklog::Entry backlog = std::move(head.batch.backlog);
    queue.work.pop_front();
    backlog.release();
  }
  return false;
}

}  // namespace axle
