// engine: binding the calling thread to a reference-counted object made for it (a replica's trace
// state), held until the thread exits.
#pragma once

#include <memory>

#include "axle/engine/this_thread.h"

namespace axle {

/// Binds the calling thread to `object` (new, reference-counted as engine/intrusive_ptr.h's
/// RefCounted) through ThisThread<T>, the binding holding a reference of its own until the thread
/// exits. On the way out the binding goes first, so nothing finds an object being destroyed.
template <class T>
T& bind_until_thread_exit(T* object) {
  object->add_ref();
  ThisThread<T>::bind(object);
  keep_until_thread_exit(std::shared_ptr<void>(object, [](void* p) {
    auto* dying = static_cast<T*>(p);
    if (ThisThread<T>::get() == dying) ThisThread<T>::bind(nullptr);
    dying->release();
  }));
  return *object;
}

}  // namespace axle
