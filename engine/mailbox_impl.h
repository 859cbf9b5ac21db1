// engine: the mailbox implementations. Included where actors are spawned, not by actor headers.
#pragma once

#include <concurrentqueue/concurrentqueue.h>

#include <deque>
#include <mutex>

#include "axle/engine/mailbox.h"

namespace axle {
namespace detail {

struct MailboxQueueTraits : moodycamel::ConcurrentQueueDefaultTraits {
  // Most actors see a handful of messages at a time; small blocks keep 10,000 idle actors cheap.
  static constexpr std::size_t BLOCK_SIZE = 32;
  static constexpr std::size_t IMPLICIT_INITIAL_INDEX_SIZE = 4;
};

template <class T>
class LockFreeMailbox final : public Mailbox<T> {
 public:
  // One block up front instead of moodycamel's default 32: most actors never need more.
  LockFreeMailbox() : queue_(MailboxQueueTraits::BLOCK_SIZE), consumer_(queue_) {}
  void push(T&& message) override { queue_.enqueue(std::move(message)); }
  std::size_t pop_bulk(T* out, std::size_t max) override {
    return queue_.try_dequeue_bulk(consumer_, out, max);
  }
  bool empty() const override { return queue_.size_approx() == 0; }

 private:
  moodycamel::ConcurrentQueue<T, MailboxQueueTraits> queue_;
  moodycamel::ConsumerToken consumer_;
};

template <class T>
class LockedMailbox final : public Mailbox<T> {
 public:
  void push(T&& message) override {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(message));
  }
  std::size_t pop_bulk(T* out, std::size_t max) override {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (; n < max && !queue_.empty(); ++n) {
      out[n] = std::move(queue_.front());
      queue_.pop_front();
    }
    return n;
  }
  bool empty() const override {
    std::lock_guard lock(mutex_);
    return queue_.empty();
  }

 private:
  mutable std::mutex mutex_;
  std::deque<T> queue_;
};

}  // namespace detail

template <class T>
std::unique_ptr<Mailbox<T>> make_mailbox(MailboxKind kind) {
  if (kind == MailboxKind::kLocked) return std::make_unique<detail::LockedMailbox<T>>();
  return std::make_unique<detail::LockFreeMailbox<T>>();
}

}  // namespace axle
