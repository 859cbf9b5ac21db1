// engine: replies to `ask`. A Future is completed once, by value or by error; the asking actor
// gets the outcome as a message (`then`), code outside actors may block on it (`get`).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/unique_function.h"

namespace axle {

/// A reply promise was dropped without a value: the replying actor forgot, or stopped.
class BrokenPromise : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A message could not be delivered because the runtime has shut down.
class RuntimeStopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A wait or an ask ran past its deadline.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Blocking was attempted where it would stall the runtime (inside an actor's handler).
class BlockingInActor : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// The value type stored for a reply of type T (`void` replies store nothing).
struct Unit {};
template <class T>
using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

/// The outcome of an ask: a value or the exception that prevented it.
template <class T>
class Result {
 public:
  explicit Result(Stored<T> value) : outcome_(std::move(value)) {}
  explicit Result(std::exception_ptr error) : outcome_(std::move(error)) {}

  [[nodiscard]] bool ok() const noexcept { return outcome_.index() == 0; }
  /// The value; rethrows the error when there is none.
  Stored<T>& value() {
    if (!ok()) std::rethrow_exception(std::get<1>(outcome_));
    return std::get<0>(outcome_);
  }
  [[nodiscard]] std::exception_ptr error() const noexcept {
    return ok() ? nullptr : std::get<1>(outcome_);
  }

 private:
  std::variant<Stored<T>, std::exception_ptr> outcome_;
};

namespace detail {

/// Where a continuation runs: an actor's mailbox (implemented by the actor cell).
class ContinuationTarget : public RefCounted {
 public:
  virtual void post_continuation(UniqueFunction fn) = 0;
};

/// The actor whose handler runs on this thread, or null outside actors.
[[nodiscard]] ContinuationTarget* running_actor() noexcept;
/// Sets running_actor() for this thread; returns the previous one.
ContinuationTarget* exchange_running_actor(ContinuationTarget* actor) noexcept;
[[noreturn]] void throw_blocking_in_actor(const char* what);

/// Type-independent part of a future's shared state, so mailboxes can fail asks they drop.
class FutureStateBase : public RefCounted {
 public:
  /// Completes with an error; false when already completed (the first outcome wins).
  virtual bool set_error(std::exception_ptr error) = 0;
};

template <class T>
class FutureState final : public FutureStateBase {
 public:
  bool set_value(Stored<T> value) {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return false;
    outcome_.emplace(std::move(value));
    publish();
    return true;
  }
  bool set_error(std::exception_ptr error) override {
    if (claimed_.exchange(true, std::memory_order_acq_rel)) return false;
    outcome_.emplace(std::move(error));
    publish();
    return true;
  }

  [[nodiscard]] bool ready() const noexcept {
    return state_.load(std::memory_order_acquire) == kReady;
  }

  /// Runs `fn` once the outcome is known: now if it is, else on the completing thread.
  void on_ready(UniqueFunction fn) {
    callback_ = std::move(fn);
    int expected = kPending;
    if (!state_.compare_exchange_strong(expected, kCallbackSet, std::memory_order_acq_rel)) {
      callback_();
    }
  }

  bool wait_until(std::chrono::steady_clock::time_point deadline) {
    if (ready()) return true;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    std::unique_lock lock(mutex_);
    bool done = cv_.wait_until(lock, deadline, [&] { return ready(); });
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    return done;
  }
  void wait() {
    if (ready()) return;
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return ready(); });
    waiters_.fetch_sub(1, std::memory_order_relaxed);
  }

  /// Moves the outcome out; call once, after ready(). An error moves out too: the state keeps
  /// no share of it, so the promise's thread, which may drop the state last, never destroys an
  /// exception the taking thread still reads.
  Result<T> take() {
    auto& o = *outcome_;
    if (o.index() == 0) return Result<T>(std::move(std::get<0>(o)));
    return Result<T>(std::move(std::get<1>(o)));
  }

 private:
  enum : int { kPending, kCallbackSet, kReady };

  void publish() {
    int previous = state_.exchange(kReady, std::memory_order_seq_cst);
    if (previous == kCallbackSet) callback_();
    if (waiters_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      cv_.notify_all();
    }
  }

  std::atomic<bool> claimed_{false};
  std::atomic<int> state_{kPending};
  std::atomic<int> waiters_{0};
  std::optional<std::variant<Stored<T>, std::exception_ptr>> outcome_;
  UniqueFunction callback_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace detail

/// The replying side of an ask. Dropping an unfulfilled promise fails the future with
/// BrokenPromise, so a forgotten reply is an error instead of a hang.
template <class T>
class Promise {
 public:
  /// A promise nobody waits for (a `tell` of a message that has a reply).
  Promise() noexcept = default;
  explicit Promise(IntrusivePtr<detail::FutureState<T>> state) noexcept
      : state_(std::move(state)) {}
  Promise(Promise&&) noexcept = default;
  Promise& operator=(Promise&& other) noexcept {
    abandon();
    state_ = std::move(other.state_);
    return *this;
  }
  ~Promise() { abandon(); }

  /// Completes the future with `value`.
  template <class U = Stored<T>>
  void set_value(U&& value = U{}) {
    if (state_) std::exchange(state_, {})->set_value(Stored<T>(std::forward<U>(value)));
  }
  /// Completes the future with an error.
  void set_error(std::exception_ptr error) {
    if (state_) std::exchange(state_, {})->set_error(std::move(error));
  }
  /// True while the promise can still complete a waiting future.
  [[nodiscard]] bool pending() const noexcept { return static_cast<bool>(state_); }

 private:
  void abandon() {
    if (state_) {
      std::exchange(state_, {})
          ->set_error(std::make_exception_ptr(
              BrokenPromise("the reply promise was dropped without a value")));
    }
  }
  IntrusivePtr<detail::FutureState<T>> state_;
};

/// The asking side of an ask: completes once with the reply or an error.
template <class T>
class Future {
 public:
  Future() = default;
  explicit Future(IntrusivePtr<detail::FutureState<T>> state) noexcept : state_(std::move(state)) {}

  [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(state_); }
  [[nodiscard]] bool ready() const noexcept { return state_->ready(); }

  /// Blocks until the reply arrives and returns it (or throws its error). Only outside actors:
  /// inside a handler it throws BlockingInActor, because blocking there stalls the runtime.
  Stored<T> get() {
    if (detail::running_actor()) detail::throw_blocking_in_actor("Future::get()");
    state_->wait();
    return std::move(state_->take().value());
  }

  /// As get(), but throws TimeoutError when no reply arrives within `timeout`.
  Stored<T> get(std::chrono::nanoseconds timeout) {
    if (detail::running_actor()) detail::throw_blocking_in_actor("Future::get(timeout)");
    if (!state_->wait_until(std::chrono::steady_clock::now() + timeout)) {
      throw TimeoutError("no reply within the timeout");
    }
    return std::move(state_->take().value());
  }

  /// Waits up to `timeout`; true when the reply is there.
  bool wait_for(std::chrono::nanoseconds timeout) {
    if (detail::running_actor()) detail::throw_blocking_in_actor("Future::wait_for()");
    return state_->wait_until(std::chrono::steady_clock::now() + timeout);
  }

  /// Runs `fn(Result<T>)` inside the running actor once the reply is there, as a message to
  /// that actor, so `fn` may touch the actor's state. Call it from inside a handler.
  template <class F>
  requires std::is_invocable_v<F&, Result<T>>
  void then(F fn) {
    detail::ContinuationTarget* self = detail::running_actor();
    if (!self) throw std::logic_error("Future::then() must be called inside an actor's handler");
    then_on(IntrusivePtr<detail::ContinuationTarget>(self), std::move(fn));
  }

  /// As then(), with the actor named explicitly (`actor` is an ActorRef's target).
  template <class F>
  void then_on(IntrusivePtr<detail::ContinuationTarget> actor, F fn) {
    auto state = state_;
    state_->on_ready([state, actor = std::move(actor), fn = std::move(fn)]() mutable {
      actor->post_continuation(
          [state = std::move(state), fn = std::move(fn)]() mutable { fn(state->take()); });
    });
  }

  /// The shared state, for the runtime (timeouts, failing undelivered asks).
  [[nodiscard]] const IntrusivePtr<detail::FutureState<T>>& state() const noexcept {
    return state_;
  }

 private:
  IntrusivePtr<detail::FutureState<T>> state_;
};

/// Runs user code inside the handler of an actor that has a thread of its own (the step-closure
/// runner): blocking there stalls that actor alone, which is what its thread is for, so
/// Future::get() and the value reads built on it are allowed within the scope.
class UserCodeScope {
 public:
  UserCodeScope() noexcept : actor_(detail::exchange_running_actor(nullptr)) {}
  ~UserCodeScope() { detail::exchange_running_actor(actor_); }
  UserCodeScope(const UserCodeScope&) = delete;
  UserCodeScope& operator=(const UserCodeScope&) = delete;

 private:
  detail::ContinuationTarget* actor_;
};

/// A connected promise/future pair.
template <class T>
std::pair<Promise<T>, Future<T>> make_promise() {
  auto state = make_intrusive<detail::FutureState<T>>();
  return {Promise<T>(state), Future<T>(state)};
}

}  // namespace axle
