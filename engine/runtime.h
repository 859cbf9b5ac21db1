// engine: the Runtime — owns the worker threads and every actor spawned on it, collects handler
// failures, and shuts down without losing a message that was already sent.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "axle/engine/actor.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/mailbox.h"
#include "axle/engine/scheduler.h"

namespace axle {

/// How and where a new actor runs.
struct SpawnOptions {
  /// Name prefix; the runtime appends "#N" to make it unique. Empty: the actor's type name.
  std::string name;
  /// Give the actor a thread of its own instead of a pool worker (devices).
  bool dedicated_thread = false;
  /// Messages handled per turn before the actor yields its worker to others.
  int max_batch = 64;
  MailboxKind mailbox = MailboxKind::kLockFree;
};

/// Settings of a Runtime; zero or negative fields take the environment or the default.
struct RuntimeOptions {
  /// Pool threads (AXLE_THREADS; default: the number of cores).
  int threads = 0;
  /// How long an idle worker spins before it parks (AXLE_SPIN_US; default 50 µs).
  std::chrono::microseconds spin{-1};
  /// Longest shutdown() waits for in-flight messages (AXLE_SHUTDOWN_TIMEOUT_MS; default 10 s).
  std::chrono::milliseconds shutdown_timeout{-1};
};

/// An actor system: worker threads, the actors on them, failure reports, orderly shutdown.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  /// Shuts down (see shutdown()).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Delivers every message already sent — and whatever those messages send in turn, until the
  /// actors fall quiet or the shutdown timeout passes — then stops the threads and destroys the
  /// actors. Timers stop firing at once. Asks still undelivered at the end fail with
  /// RuntimeStopped. Idempotent. Call it after other threads have stopped sending.
  void shutdown();

  [[nodiscard]] bool stopped() const noexcept { return core_->stopped(); }
  [[nodiscard]] int thread_count() const noexcept { return scheduler_->pool_size(); }
  [[nodiscard]] std::size_t actor_count() const;

  /// Called (on the failing actor's thread) for every exception a handler throws.
  void on_failure(std::function<void(const ActorFailure&)> handler) {
    core_->set_failure_handler(std::move(handler));
  }
  /// Every failure reported so far.
  [[nodiscard]] std::vector<ActorFailure> failures() const { return core_->failures(); }

  // For spawn():
  [[nodiscard]] Worker& place(const SpawnOptions& options, const std::string& name);
  [[nodiscard]] std::string unique_name(const std::string& prefix);
  void adopt(IntrusivePtr<detail::ActorCell> cell);
  [[nodiscard]] const IntrusivePtr<detail::RuntimeCore>& core() const noexcept { return core_; }

 private:
  [[nodiscard]] bool quiescent() const;

  RuntimeOptions options_;
  IntrusivePtr<detail::RuntimeCore> core_;
  std::unique_ptr<Scheduler> scheduler_;
  mutable std::mutex cells_mutex_;
  std::vector<IntrusivePtr<detail::ActorCell>> cells_;
  uint64_t spawned_ = 0;
  std::once_flag shutdown_once_;
};

}  // namespace axle
