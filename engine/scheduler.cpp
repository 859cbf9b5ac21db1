// engine: worker threads. A worker drains its run queue of ready actors; out of work it spins
// for a few microseconds (a message in flight usually lands within that, and waking a parked
// thread costs far more), then parks in its asio io_context until a timer fires or a sender
// wakes it.
#include "axle/engine/scheduler.h"

#include <concurrentqueue/concurrentqueue.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <thread>

#include "axle/engine/fence.h"
#include "axle/engine/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AXLE_CPU_RELAX() _mm_pause()
#else
#define AXLE_CPU_RELAX() std::this_thread::yield()
#endif

namespace axle {
namespace {

constexpr std::size_t kRunBulk = 16;
// Timers are polled every this many busy rounds, so a saturated worker still fires them.
constexpr int kTimerPollEvery = 8;

}  // namespace

struct Worker::Impl {
  Impl(std::string worker_name, std::chrono::microseconds spin_budget,
       const std::atomic<bool>& timers)
      : name(std::move(worker_name)),
        spin(spin_budget),
        timers_enabled(timers),
        io(1),
        ready_consumer(ready) {}

  void loop();
  void park();
  void bump_activity() { activity.store(activity.load(std::memory_order_relaxed) + 1); }

  std::string name;
  std::chrono::microseconds spin;
  const std::atomic<bool>& timers_enabled;
  asio::io_context io;
  moodycamel::ConcurrentQueue<detail::Runnable*> ready;
  moodycamel::ConsumerToken ready_consumer;
  std::thread thread;
  alignas(64) std::atomic<bool> parked{false};
  std::atomic<bool> stop_requested{false};
  alignas(64) std::atomic<uint64_t> activity{0};
};

void Worker::Impl::loop() {
  set_thread_name(name);
  auto work = asio::make_work_guard(io);
  detail::Runnable* batch[kRunBulk];
  int rounds = 0;
  int spins = 0;
  auto spin_start = std::chrono::steady_clock::now();
  while (true) {
    const std::size_t n = ready.try_dequeue_bulk(ready_consumer, batch, kRunBulk);
    if (n > 0) {
      bump_activity();
      for (std::size_t i = 0; i < n; ++i) batch[i]->run();
      bump_activity();
      spins = 0;
      if (++rounds % kTimerPollEvery == 0) io.poll();
      continue;
    }
    if (stop_requested.load(std::memory_order_acquire)) break;
    // Timer callbacks only send messages, and are off once shutdown starts, so polling needs no
    // activity bump: the quiescence check only has to see actor runs.
    if ((spins & 15) == 0 && io.poll() > 0) {
      spins = 0;
      continue;
    }
    if (spins++ == 0) {
      spin_start = std::chrono::steady_clock::now();
    } else if ((spins & 15) == 0 && std::chrono::steady_clock::now() - spin_start > spin) {
      park();
      spins = 0;
      continue;
    }
    AXLE_CPU_RELAX();
  }
}

void Worker::Impl::park() {
  parked.store(true, std::memory_order_relaxed);
  // Pairs with the fence in Worker::schedule: either the sender sees `parked` and wakes us, or
  // we see its actor in the run queue here.
  detail::store_load_fence();
  if (ready.size_approx() == 0 && !stop_requested.load(std::memory_order_acquire)) {
    io.run_one();
  }
  parked.store(false, std::memory_order_relaxed);
}

Worker::Worker(std::string name, std::chrono::microseconds spin,
               const std::atomic<bool>& timers_enabled)
    : impl_(std::make_unique<Impl>(std::move(name), spin, timers_enabled)) {}

Worker::~Worker() {
  request_stop();
  join();
}

void Worker::schedule(detail::Runnable* actor) {
  impl_->ready.enqueue(actor);
  detail::store_load_fence();
  if (impl_->parked.load(std::memory_order_relaxed)) asio::post(impl_->io, [] {});
}

TimerHandle Worker::start_timer(std::chrono::nanoseconds delay, std::chrono::nanoseconds period,
                                std::function<void()> fire) {
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  struct Tick {
    Impl* worker;
    std::shared_ptr<asio::steady_timer> timer;
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::chrono::nanoseconds period;
    std::shared_ptr<std::function<void()>> fire;

    void arm(std::chrono::nanoseconds delay) {
      timer->expires_after(delay);
      timer->async_wait([tick = *this](const std::error_code& ec) mutable {
        if (ec || tick.cancelled->load(std::memory_order_acquire) ||
            !tick.worker->timers_enabled.load(std::memory_order_seq_cst)) {
          return;
        }
        (*tick.fire)();
        if (tick.period.count() > 0) tick.arm(tick.period);
      });
    }
  };
  Tick tick{impl_.get(), std::make_shared<asio::steady_timer>(impl_->io), cancelled, period,
            std::make_shared<std::function<void()>>(std::move(fire))};
  // Timers belong to the worker's thread; arm it there.
  asio::post(impl_->io, [tick, delay]() mutable { tick.arm(delay); });
  return TimerHandle(std::move(cancelled));
}

uint64_t Worker::activity() const noexcept { return impl_->activity.load(); }
const std::string& Worker::name() const noexcept { return impl_->name; }

void Worker::start() {
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

void Worker::request_stop() {
  impl_->stop_requested.store(true, std::memory_order_seq_cst);
  asio::post(impl_->io, [] {});
}

void Worker::join() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

Scheduler::Scheduler(int pool_threads, std::chrono::microseconds spin)
    : spin_(spin), pool_size_(pool_threads) {
  for (int i = 0; i < pool_threads; ++i) {
    workers_.push_back(
        std::make_unique<Worker>("worker-" + std::to_string(i), spin_, timers_enabled_));
    workers_.back()->start();
  }
}

Scheduler::~Scheduler() { stop(); }

Worker& Scheduler::next_pool_worker() {
  uint64_t i = next_.fetch_add(1, std::memory_order_relaxed) % pool_size_;
  std::lock_guard lock(workers_mutex_);
  return *workers_[i];
}

Worker& Scheduler::add_dedicated_worker(std::string name) {
  auto worker = std::make_unique<Worker>(std::move(name), spin_, timers_enabled_);
  Worker& ref = *worker;
  std::lock_guard lock(workers_mutex_);
  workers_.push_back(std::move(worker));
  ref.start();
  return ref;
}

std::vector<uint64_t> Scheduler::activity() const {
  std::lock_guard lock(workers_mutex_);
  std::vector<uint64_t> counts;
  counts.reserve(workers_.size());
  for (const auto& w : workers_) counts.push_back(w->activity());
  return counts;
}

void Scheduler::stop() {
  std::lock_guard lock(workers_mutex_);
  if (stopped_) return;
  stopped_ = true;
  for (auto& w : workers_) w->request_stop();
  for (auto& w : workers_) w->join();
}

}  // namespace axle
