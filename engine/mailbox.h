// engine: an actor's mailbox. Abstract so the queue behind it can be swapped and measured; the
// runtime uses the lock-free one, benchmarks compare it with a locked deque.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace axle {

/// Which queue implementation backs a mailbox.
enum class MailboxKind {
  kLockFree,  ///< moodycamel::ConcurrentQueue (the default)
  kLocked,    ///< std::deque under a mutex: the baseline benchmarks compare against
};

/// Name of a mailbox kind, for benchmark output.
[[nodiscard]] constexpr std::string_view mailbox_kind_name(MailboxKind kind) noexcept {
  return kind == MailboxKind::kLockFree ? "lockfree" : "locked";
}

/// Multi-producer, single-consumer queue of messages. Messages pushed by one thread are popped
/// in the order that thread pushed them; the runtime keeps each actor on one thread so this
/// per-thread order is also per-sender order (but for an actor a sender runs on its own thread,
/// ActorRef::tell_here). One thread pops at a time, not always the same one.
template <class T>
class Mailbox {
 public:
  virtual ~Mailbox() = default;
  /// Appends a message; callable from any thread.
  virtual void push(T&& message) = 0;
  /// Moves up to `max` messages into `out`; only the thread running the actor calls this.
  virtual std::size_t pop_bulk(T* out, std::size_t max) = 0;
  /// True when no message is queued; exact when no push runs concurrently.
  [[nodiscard]] virtual bool empty() const = 0;
};

/// Creates a mailbox of the given kind (defined in engine/mailbox_impl.h, which only the code that
/// spawns actors includes: the lock-free queue's header is large).
template <class T>
std::unique_ptr<Mailbox<T>> make_mailbox(MailboxKind kind);

}  // namespace axle
