// engine: reference counting embedded in the object. Actor cells are handed to run queues as
// raw pointers many times a second; an embedded count keeps that to one atomic add.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace axle {

/// Base for objects whose lifetime is shared through IntrusivePtr.
class RefCounted {
 public:
  RefCounted() noexcept = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  virtual ~RefCounted() = default;

  void add_ref() const noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  /// Adds a reference unless the object is already being destroyed (count at zero).
  [[nodiscard]] bool try_add_ref() const noexcept {
    int64_t n = refs_.load(std::memory_order_relaxed);
    while (n > 0) {
      if (refs_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }
  void release() const noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  /// The current count. Exact only when no other thread can reach the object.
  [[nodiscard]] int64_t use_count() const noexcept { return refs_.load(std::memory_order_acquire); }

 protected:
  /// Starts with `refs` references already held (by the object's own bookkeeping).
  explicit RefCounted(int64_t refs) noexcept : refs_(refs) {}

 private:
  mutable std::atomic<int64_t> refs_{0};
};

/// Shared owner of a RefCounted object.
template <class T>
class IntrusivePtr {
 public:
  IntrusivePtr() noexcept = default;
  IntrusivePtr(std::nullptr_t) noexcept {}  // NOLINT: implicit, like a raw null
  explicit IntrusivePtr(T* p) noexcept : p_(p) {
    if (p_) p_->add_ref();
  }
  /// Adopts a reference the caller already holds.
  static IntrusivePtr adopt(T* p) noexcept {
    IntrusivePtr r;
    r.p_ = p;
    return r;
  }
  IntrusivePtr(const IntrusivePtr& o) noexcept : IntrusivePtr(o.p_) {}
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  template <class U>
  requires std::is_convertible_v<U*, T*> IntrusivePtr(IntrusivePtr<U> o)
  noexcept : p_(o.detach()) {}  // NOLINT: implicit upcast
  IntrusivePtr& operator=(IntrusivePtr o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~IntrusivePtr() {
    if (p_) p_->release();
  }

  /// Gives up ownership without releasing; the caller now holds the reference.
  [[nodiscard]] T* detach() noexcept { return std::exchange(p_, nullptr); }
  [[nodiscard]] T* get() const noexcept { return p_; }
  T* operator->() const noexcept { return p_; }
  T& operator*() const noexcept { return *p_; }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  friend bool operator==(const IntrusivePtr& a, const IntrusivePtr& b) noexcept {
    return a.p_ == b.p_;
  }

 private:
  T* p_ = nullptr;
};

template <class T, class... Args>
IntrusivePtr<T> make_intrusive(Args&&... args) {
  return IntrusivePtr<T>(new T(std::forward<Args>(args)...));
}

}  // namespace axle
