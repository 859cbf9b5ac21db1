// engine: Runtime, actor turns and failure reports.
#include "axle/engine/runtime.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <cstdlib>
#include <thread>
#include <unordered_map>
#include <utility>

#include "axle/engine/config.h"
#include "axle/engine/cores.h"
#include "axle/engine/log.h"

namespace axle {
namespace detail {
namespace {

thread_local ContinuationTarget* tls_running_actor = nullptr;
thread_local bool tls_on_senders_thread = false;
// How many times run_here, awaiting the worker, looks again (yielding the core between looks):
// after the step a host waited for, the device's worker still has to let go of its actor, and
// should the host have taken that worker's core, it needs the core back.
constexpr int kRunHereLooks = 64;

}  // namespace

ContinuationTarget* running_actor() noexcept { return tls_running_actor; }

ContinuationTarget* exchange_running_actor(ContinuationTarget* actor) noexcept {
  return std::exchange(tls_running_actor, actor);
}

void throw_blocking_in_actor(const char* what) {
  auto* cell = static_cast<ActorCell*>(tls_running_actor);
  throw BlockingInActor(fmt::format(
      "{} would block inside actor {}'s handler and stall its worker; use Future::then()", what,
      cell->name()));
}

std::string type_name_of(const std::string& mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return name;
}

std::string type_name(const std::type_info& type) { return type_name_of(type.name()); }

void RuntimeCore::report_failure(ActorFailure failure) {
  AXLE_LOG(ERROR, "actor {} failed handling {}: {}", failure.actor, failure.message_type,
           failure.what);
  std::function<void(const ActorFailure&)> handler;
  {
    std::lock_guard lock(mutex_);
    failures_.push_back(failure);
    handler = handler_;
  }
  if (handler) handler(failure);
}

void RuntimeCore::set_failure_handler(std::function<void(const ActorFailure&)> handler) {
  std::lock_guard lock(mutex_);
  handler_ = std::move(handler);
}

std::vector<ActorFailure> RuntimeCore::failures() const {
  std::lock_guard lock(mutex_);
  return failures_;
}

bool ActorCell::run_here(Here here) {
  if (tls_running_actor) return false;  // an actor's worker runs its own actor only
  // Pairs with the fence in run(), as notify_mail's: either the worker letting go sees the
  // message and keeps the actor, or this thread sees it let go.
  store_load_fence();
  const int looks = here == Here::kAwaitingWorker ? kRunHereLooks : 1;
  for (int look = 0; look < looks; ++look) {
    if (mailbox_empty()) return false;  // the worker kept the actor and took the message
    if (!scheduled_.load(std::memory_order_relaxed)) {
      // Acquire: pairs with run()'s release of the actor.
      if (scheduled_.exchange(true, std::memory_order_acq_rel)) return false;  // another took it
      add_ref();  // what run() releases, as the run queue's reference
      tls_on_senders_thread = true;
      run();
      tls_on_senders_thread = false;
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

void ActorCell::run() {
  tls_running_actor = this;
  bool more;
  {
    ScopedLogLabel label(name_);
    more = run_batch(max_batch_);
  }
  tls_running_actor = nullptr;
  if (more) {
    home_.schedule(this);  // keeps the run queue's reference
    return;
  }
  // Release: a thread that takes the actor over next (run_here) reads its mailbox's consumer
  // state as this run left it.
  scheduled_.store(false, std::memory_order_release);
  // Pairs with the fence in notify_mail: a sender that saw `scheduled` still true left its
  // message for us to find here.
  detail::store_load_fence();
  if (!mailbox_empty() && !scheduled_.exchange(true, std::memory_order_acq_rel)) {
    home_.schedule(this);
    return;
  }
  release();
}

}  // namespace detail

bool ActorBase::on_senders_thread() noexcept { return detail::tls_on_senders_thread; }

Runtime::Runtime(RuntimeOptions options)
    : options_(options), core_(make_intrusive<detail::RuntimeCore>()) {
  // The settings are read only when an option is left to them.
  if (options_.threads <= 0 || options_.spin.count() < 0 || options_.shutdown_timeout.count() < 0) {
    const config::RuntimeSettings settings = config::read_runtime_settings();
    if (options_.threads <= 0) {
      options_.threads = static_cast<int>(settings.threads > 0 ? settings.threads : usable_cores());
    }
    if (options_.spin.count() < 0) options_.spin = settings.spin;
    if (options_.shutdown_timeout.count() < 0)
      options_.shutdown_timeout = settings.shutdown_timeout;
  }
  scheduler_ = std::make_unique<Scheduler>(options_.threads, options_.spin);
}

Runtime::~Runtime() { shutdown(); }

std::size_t Runtime::actor_count() const {
  std::lock_guard lock(cells_mutex_);
  return cells_.size();
}

Worker& Runtime::place(const SpawnOptions& options, const std::string& name) {
  if (options.dedicated_thread) return scheduler_->add_dedicated_worker(name);
  return scheduler_->next_pool_worker();
}

std::string Runtime::unique_name(const std::string& prefix) {
  std::lock_guard lock(cells_mutex_);
  return fmt::format("{}#{}", prefix, ++spawned_);
}

void Runtime::adopt(IntrusivePtr<detail::ActorCell> cell) {
  std::lock_guard lock(cells_mutex_);
  cells_.push_back(std::move(cell));
}

bool Runtime::quiescent() const {
  std::vector<uint64_t> before = scheduler_->activity();
  for (uint64_t a : before) {
    if (a % 2 != 0) return false;  // a worker is running actors right now
  }
  {
    std::lock_guard lock(cells_mutex_);
    for (const auto& cell : cells_) {
      if (!cell->idle()) return false;
    }
  }
  detail::store_load_fence();
  return scheduler_->activity() == before;
}

void Runtime::shutdown() {
  std::call_once(shutdown_once_, [this] {
    core_->set_phase(detail::RuntimeCore::kDraining);
    scheduler_->disable_timers();
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
    // Two quiet scans in a row: the second catches a send racing the first.
    int quiet_scans = 0;
    while (quiet_scans < 2) {
      if (quiescent()) {
        ++quiet_scans;
      } else {
        quiet_scans = 0;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        AXLE_LOG(WARNING,
                 "shutdown: actors still busy after {} ms; undelivered asks fail with "
                 "RuntimeStopped",
                 options_.shutdown_timeout.count());
        break;
      }
      if (quiet_scans < 2) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    core_->set_phase(detail::RuntimeCore::kStopped);
    scheduler_->stop();
    std::vector<IntrusivePtr<detail::ActorCell>> cells;
    {
      std::lock_guard lock(cells_mutex_);
      cells.swap(cells_);
    }
    auto reason = std::make_exception_ptr(
        RuntimeStopped("the runtime shut down before this message was delivered"));
    for (auto& cell : cells) cell->close(reason);
  });
}

}  // namespace axle
