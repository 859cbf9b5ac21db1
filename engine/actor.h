// engine: actors. An actor owns its state and is driven only by messages; its handlers run one
// message at a time, never concurrently with themselves. Each actor type lists the messages it
// accepts, so sending it anything else does not compile.
//
//   struct Add { int n; };
//   struct Get { using Reply = int; };
//   class Counter : public axle::Actor<Counter, Add, Get> {
//    public:
//     void handle(Add& m) { total_ += m.n; }
//     int handle(Get&) { return total_; }
//    private:
//     int total_ = 0;
//   };
//   auto counter = axle::spawn<Counter>(runtime);
//   counter.tell(Add{2});
//   int total = counter.ask(Get{}).get();  // blocking is for code outside actors only
//
// Order: messages from one sender (a thread, or an actor) are handled in the order it sent them;
// messages from different senders are not ordered with respect to each other, even when one send
// happened before the other. An actor that a thread runs on itself (tell_here) sends, meanwhile,
// as that thread: in order with the thread's messages, not with its own sent from its worker.
//
// A handler may also reply later: `void handle(Get&, axle::Promise<int>&& reply)` keeps or moves
// the promise and fulfils it when ready (dropping it unfulfilled fails the ask).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "axle/engine/fence.h"
#include "axle/engine/future.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/mailbox.h"
#include "axle/engine/scheduler.h"
#include "axle/engine/unique_function.h"

namespace axle {

/// What the runtime learns when a handler throws.
struct ActorFailure {
  std::string actor;         ///< the actor's name, e.g. "compiler#2"
  std::string message_type;  ///< the message whose handler threw
  std::string what;          ///< the exception's message
  std::exception_ptr error;
};

namespace detail {

/// Demangled name of a type, for failure reports.
[[nodiscard]] std::string type_name(const std::type_info& type);
/// Demangled form of a mangled name, as std::type_info::name() gives it.
[[nodiscard]] std::string type_name_of(const std::string& mangled);

/// State the runtime shares with every actor cell; outlives the Runtime while refs exist.
class RuntimeCore : public RefCounted {
 public:
  enum Phase : int { kRunning, kDraining, kStopped };

  [[nodiscard]] bool stopped() const noexcept {
    return phase_.load(std::memory_order_acquire) == kStopped;
  }
  void set_phase(Phase phase) noexcept { phase_.store(phase, std::memory_order_seq_cst); }
  /// Records a handler failure and hands it to the failure callback.
  void report_failure(ActorFailure failure);
  void set_failure_handler(std::function<void(const ActorFailure&)> handler);
  [[nodiscard]] std::vector<ActorFailure> failures() const;

 private:
  std::atomic<int> phase_{kRunning};
  mutable std::mutex mutex_;
  std::vector<ActorFailure> failures_;
  std::function<void(const ActorFailure&)> handler_;
};

/// Whether a send runs the actor on the sender's thread (ActorRef::tell_here).
enum class Here { kNo, kIfIdle, kAwaitingWorker };

/// The runtime's view of one actor: its scheduling state, its home worker, its name.
class ActorCell : public ContinuationTarget, public Runnable {
 public:
  ActorCell(std::string name, Worker& home, IntrusivePtr<RuntimeCore> core, int max_batch)
      : name_(std::move(name)), home_(home), core_(std::move(core)), max_batch_(max_batch) {}

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] Worker& home() const noexcept { return home_; }
  [[nodiscard]] RuntimeCore& core() const noexcept { return *core_; }

  /// Called after a message was pushed: schedules the actor unless it already is. Pairs with
  /// the check in run() so that mail arriving as the actor goes idle is never stranded.
  void notify_mail() {
    store_load_fence();
    if (!scheduled_.load(std::memory_order_relaxed) &&
        !scheduled_.exchange(true, std::memory_order_acq_rel)) {
      add_ref();  // the run queue's reference
      home_.schedule(this);
    }
  }

  /// Runs a bounded batch of messages on the home worker, then goes idle or reschedules
  /// itself (behind other ready actors, so none starves). Releases the run queue's reference.
  void run() final;

  /// From a thread that runs no actor: when the actor is idle (or, awaiting its worker, is let
  /// go of soon), takes it over and runs a batch of its mail here, as its worker would (true).
  /// The caller pushed its message first. Otherwise (false) it is left to notify_mail.
  bool run_here(Here here);

  /// True when the actor neither runs nor has mail (for shutdown's quiescence check).
  [[nodiscard]] bool idle() const {
    return !scheduled_.load(std::memory_order_seq_cst) && mailbox_empty();
  }

  /// After the workers stopped: fails the asks of messages never delivered, destroys the actor.
  virtual void close(std::exception_ptr reason) = 0;

 protected:
  /// Handles up to `max` messages; true when it stopped at the limit with mail possibly left.
  virtual bool run_batch(int max) = 0;
  [[nodiscard]] virtual bool mailbox_empty() const = 0;

 private:
  std::string name_;
  Worker& home_;
  IntrusivePtr<RuntimeCore> core_;
  int max_batch_;
  alignas(64) std::atomic<bool> scheduled_{false};
};

/// A callback queued to an actor: `Future::then` continuations, start-up.
struct Continuation {
  UniqueFunction fn;
};

template <class... Msgs>
struct EnvelopeOf {
  std::variant<Continuation, Msgs...> message;
  IntrusivePtr<FutureStateBase> reply;  // null for tell
};

template <class M, class... Msgs>
inline constexpr bool kOneOf = (std::is_same_v<M, Msgs> || ...);

template <class M>
concept HasReplyType = requires {
  typename M::Reply;
};

template <class A, class M>
struct ReplyOf {
  using type = decltype(std::declval<A&>().handle(std::declval<M&>()));
};
template <class A, class M>
requires HasReplyType<M>
struct ReplyOf<A, M> {
  using type = typename M::Reply;
};

template <class A>
class TypedCell;

}  // namespace detail

/// The reply type of asking an `A` with an `M`: `M::Reply` if declared, else the handler's
/// return type.
template <class A, class M>
using reply_t = typename detail::ReplyOf<A, M>::type;

/// True when actor type A declares message type M.
template <class A, class M>
concept Accepts = A::template kAccepts<M>;

/// A typed address of an actor; cheap to copy, safe to use from any thread.
template <class A>
class ActorRef {
 public:
  ActorRef() = default;
  explicit ActorRef(IntrusivePtr<detail::ActorCell> cell) noexcept : cell_(std::move(cell)) {}

  /// Sends `message`; never blocks. After shutdown the message is dropped.
  template <class M>
  requires Accepts<A, std::decay_t<M>>
  void tell(M&& message) const { typed().send(std::forward<M>(message), nullptr); }

  /// Sends `message` and returns the future reply. A handler that throws fails the future
  /// with its exception; after shutdown the future fails with RuntimeStopped.
  template <class M>
  requires Accepts<A, std::decay_t<M>> Future<reply_t<A, std::decay_t<M>>> ask(M&& message)
  const {
    auto state = make_intrusive<detail::FutureState<reply_t<A, std::decay_t<M>>>>();
    typed().send(std::forward<M>(message), state);
    return Future<reply_t<A, std::decay_t<M>>>(std::move(state));
  }

  /// As tell, but when the actor is idle and the caller is not an actor, it handles the message
  /// (and whatever else it has) on the calling thread before this returns: true when it did.
  /// For a short piece of work whose sender would only wait for it, this spares the hand-off
  /// (waking the actor's worker, then being woken by it). With `await_worker`, a worker that
  /// holds the actor is given a moment to let go of it (the sender has just seen its last work
  /// done); without, a busy actor is left to its worker at once.
  template <class M>
  requires Accepts<A, std::decay_t<M>>
  bool tell_here(M&& message, bool await_worker = false) const {
    return typed().send(std::forward<M>(message), nullptr,
                        await_worker ? detail::Here::kAwaitingWorker : detail::Here::kIfIdle);
  }

  [[nodiscard]] const std::string& name() const noexcept { return cell_->name(); }
  [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(cell_); }
  /// The actor as a continuation target, for Future::then_on.
  [[nodiscard]] IntrusivePtr<detail::ContinuationTarget> target() const { return cell_; }
  friend bool operator==(const ActorRef& a, const ActorRef& b) noexcept {
    return a.cell_ == b.cell_;
  }

 private:
  detail::TypedCell<A>& typed() const { return static_cast<detail::TypedCell<A>&>(*cell_); }
  IntrusivePtr<detail::ActorCell> cell_;
};

/// Untyped part of every actor.
class ActorBase {
 public:
  ActorBase() = default;
  ActorBase(const ActorBase&) = delete;
  ActorBase& operator=(const ActorBase&) = delete;
  virtual ~ActorBase() = default;

  /// The actor's name, unique in its runtime ("counter#3").
  [[nodiscard]] const std::string& name() const noexcept { return cell_->name(); }

  /// Runs on the actor's thread before its first message.
  virtual void on_start() {}

 protected:
  [[nodiscard]] detail::ActorCell& cell() const noexcept { return *cell_; }
  /// True while the handler runs on the thread of a sender (ActorRef::tell_here), not on the
  /// actor's worker: waiting there holds up the sender, not the actor's own thread.
  [[nodiscard]] static bool on_senders_thread() noexcept;

 private:
  template <class A>
  friend class detail::TypedCell;
  detail::ActorCell* cell_ = nullptr;
};

/// Base class of an actor type `Self` accepting the messages `Msgs`.
template <class Self, class... Msgs>
class Actor : public ActorBase {
 public:
  using Envelope = detail::EnvelopeOf<Msgs...>;
  template <class M>
  static constexpr bool kAccepts = detail::kOneOf<M, Msgs...>;

  /// This actor's own address.
  [[nodiscard]] ActorRef<Self> self() const {
    return ActorRef<Self>(IntrusivePtr<detail::ActorCell>(&cell()));
  }

  /// Sends `message` to this actor after `delay`.
  template <class M>
  requires(kAccepts<M>&& std::is_copy_constructible_v<M>) TimerHandle
      send_after(std::chrono::nanoseconds delay, M message) {
    return cell().home().start_timer(delay, std::chrono::nanoseconds::zero(),
                                     [ref = self(), message] { ref.tell(M(message)); });
  }

  /// Fails `future` with TimeoutError (message `what`) unless it completes within `timeout`;
  /// pairs with Future::then for an ask that must not wait forever.
  template <class T>
  TimerHandle fail_after(const Future<T>& future, std::chrono::nanoseconds timeout,
                         std::string what) {
    return cell().home().start_timer(
        timeout, std::chrono::nanoseconds::zero(),
        [state = future.state(), what = std::move(what)] {
          state->set_error(std::make_exception_ptr(TimeoutError(what)));
        });
  }

  /// Sends `message` to this actor every `period` until the handle is cancelled.
  template <class M>
  requires(kAccepts<M>&& std::is_copy_constructible_v<M>) TimerHandle
      send_every(std::chrono::nanoseconds period, M message) {
    return cell().home().start_timer(period, period,
                                     [ref = self(), message] { ref.tell(M(message)); });
  }
};

namespace detail {

template <class A>
class TypedCell final : public ActorCell {
 public:
  using Envelope = typename A::Envelope;
  static constexpr int kPopBulk = 16;

  TypedCell(std::string name, Worker& home, IntrusivePtr<RuntimeCore> core, int max_batch,
            std::unique_ptr<Mailbox<Envelope>> mailbox)
      : ActorCell(std::move(name), home, std::move(core), max_batch),
        mailbox_(std::move(mailbox)),
        buffer_(kPopBulk) {}

  /// Installs the actor object; called once by spawn before any message can arrive.
  void attach(std::unique_ptr<A> actor) {
    actor_ = std::move(actor);
    actor_->cell_ = this;
  }

  /// Runs the actor's on_start hook (its first message).
  void start() { actor_->on_start(); }

  /// Pushes `message`; with `here`, runs the actor on this thread when run_here can (true).
  template <class M>
  bool send(M&& message, IntrusivePtr<FutureStateBase> reply, Here here = Here::kNo) {
    if (core().stopped()) {
      if (reply) {
        reply->set_error(std::make_exception_ptr(
            RuntimeStopped("actor " + name() + " cannot take messages: the runtime has stopped")));
      }
      return false;
    }
    mailbox_->push(Envelope{std::forward<M>(message), std::move(reply)});
    if (here != Here::kNo && run_here(here)) return true;
    notify_mail();
    return false;
  }

  void post_continuation(UniqueFunction fn) override { send(Continuation{std::move(fn)}, nullptr); }

  void close(std::exception_ptr reason) override {
    Envelope left[kPopBulk];
    while (std::size_t n = mailbox_->pop_bulk(left, kPopBulk)) {
      for (std::size_t i = 0; i < n; ++i) {
        if (left[i].reply) left[i].reply->set_error(reason);
        left[i] = Envelope{};
      }
    }
    actor_.reset();
  }

 protected:
  bool run_batch(int max) override {
    int handled = 0;
    while (handled < max) {
      const std::size_t want = std::min<std::size_t>(kPopBulk, max - handled);
      const std::size_t n = mailbox_->pop_bulk(buffer_.data(), want);
      for (std::size_t i = 0; i < n; ++i) {
        Envelope& envelope = buffer_[i];
        std::visit([&](auto& message) { deliver(message, envelope.reply); }, envelope.message);
        // Release the payload now: messages carry handles whose lifetime users can observe.
        envelope.message.template emplace<0>();
        envelope.reply = {};
      }
      handled += static_cast<int>(n);
      if (n < want) return false;
    }
    return true;
  }

  bool mailbox_empty() const override { return mailbox_->empty(); }

 private:
  void deliver(Continuation& continuation, IntrusivePtr<FutureStateBase>&) {
    try {
      continuation.fn();
    } catch (...) {
      report(typeid(Continuation), std::current_exception());
    }
  }

  template <class M>
  void deliver(M& message, IntrusivePtr<FutureStateBase>& reply) {
    using R = reply_t<A, M>;
    using State = FutureState<R>;
    State* state = static_cast<State*>(reply.get());
    // The promise lives in this frame, not in the handler's, so that when the handler throws,
    // the catch below reports the real exception rather than a broken promise.
    Promise<R> promise{IntrusivePtr<State>(state)};
    try {
      if constexpr (requires { actor_->handle(message, std::move(promise)); }) {
        actor_->handle(message, std::move(promise));
      } else if constexpr (std::is_void_v<R>) {
        actor_->handle(message);
        promise.set_value();
      } else {
        promise.set_value(actor_->handle(message));
      }
    } catch (...) {
      std::exception_ptr error = std::current_exception();
      promise.set_error(error);
      if (reply) reply->set_error(error);  // the handler may have moved the promise away
      report(typeid(M), error);
    }
  }

  void report(const std::type_info& type, std::exception_ptr error) {
    ActorFailure failure{name(), type_name(type), {}, error};
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      failure.what = e.what();
    } catch (...) {
      failure.what = "unknown exception";
    }
    core().report_failure(std::move(failure));
  }

  std::unique_ptr<A> actor_;
  std::unique_ptr<Mailbox<Envelope>> mailbox_;
  std::vector<Envelope> buffer_;
};

}  // namespace detail
}  // namespace axle
