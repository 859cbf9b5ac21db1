// engine: the calling thread's per-thread objects. State that belongs to a replica (its trace
// state, its host) lives in objects with one owner each; the thread is bound to them here. These
// bindings and the runtime's own bookkeeping are the only thread_locals in axle, so no
// per-replica state hides in a file of its own.
#pragma once

#include <memory>

namespace axle {

/// The calling thread's object of type T, or null when it has none. A layer above engine binds
/// the thread to an object it owns; reading the binding is one thread-local load.
template <class T>
class ThisThread {
 public:
  [[nodiscard]] static T* get() noexcept { return current_; }
  /// Binds the calling thread to `object` (null unbinds); returns the previous binding.
  static T* bind(T* object) noexcept {
    T* previous = current_;
    current_ = object;
    return previous;
  }

 private:
  // constinit and trivially destructible: no initialisation guard, and still readable while
  // the thread's other thread_locals are being destroyed.
  static inline thread_local constinit T* current_ = nullptr;
};

/// Keeps `object` until the calling thread exits; a thread's objects are dropped in the reverse
/// order of keeping. An object kept after the thread's keeper is gone (during its exit) is
/// never dropped.
void keep_until_thread_exit(std::shared_ptr<void> object);

/// The calling thread's own T (say, a kernel's scratch), value-initialised on first use, bound
/// through ThisThread<T> and kept until the thread exits.
template <class T>
T& this_thread_object() {
  T* object = ThisThread<T>::get();
  if (!object) [[unlikely]] {
    auto made = std::make_shared<T>();
    object = made.get();
    keep_until_thread_exit(std::move(made));
    ThisThread<T>::bind(object);
  }
  return *object;
}

}  // namespace axle
