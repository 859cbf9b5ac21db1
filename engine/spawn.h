// engine: creating actors. Kept apart from actor.h because it instantiates the lock-free
// mailbox, whose header is large; only code that spawns actors includes it.
#pragma once

#include <memory>
#include <utility>

#include "axle/engine/actor.h"
#include "axle/engine/mailbox_impl.h"
#include "axle/engine/runtime.h"

namespace axle {

/// Creates an actor of type A (constructed from `args`) on `runtime` and returns its address.
template <class A, class... Args>
ActorRef<A> spawn(Runtime& runtime, SpawnOptions options, Args&&... args) {
  if (runtime.stopped()) throw RuntimeStopped("spawn() after the runtime has stopped");
  std::string name =
      runtime.unique_name(options.name.empty() ? detail::type_name(typeid(A)) : options.name);
  Worker& home = runtime.place(options, name);
  auto cell =
      make_intrusive<detail::TypedCell<A>>(name, home, runtime.core(), options.max_batch,
                                           make_mailbox<typename A::Envelope>(options.mailbox));
  cell->attach(std::make_unique<A>(std::forward<Args>(args)...));
  runtime.adopt(cell);
  ActorRef<A> ref{IntrusivePtr<detail::ActorCell>(cell)};
  // on_start runs as the actor's first message, on its own thread.
  cell->post_continuation([actor = cell.get()] { actor->start(); });
  return ref;
}

/// spawn() with default options.
template <class A, class... Args>
ActorRef<A> spawn(Runtime& runtime, Args&&... args) {
  return spawn<A>(runtime, SpawnOptions{}, std::forward<Args>(args)...);
}

}  // namespace axle
