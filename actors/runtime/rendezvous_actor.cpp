// actors: the RendezvousActor's handlers, and the deadline clock that runs while a group is open.
#include "axle/actors/runtime/rendezvous_actor.h"

namespace axle {

void RendezvousActor::handle(OpenGroup& m) {
  points_->open(m);
  if (!ticks_) {
    ticks_ = true;
    ticking_ = send_every(kDeadlineTick, ExpirePoints{});
  }
}

void RendezvousActor::handle(CloseGroup& m) {
  points_->close(m);
  if (ticks_ && !points_->any_open()) {
    ticks_ = false;
    ticking_.cancel();
  }
}

void RendezvousActor::handle(ExpirePoints&) { points_->expire(std::chrono::steady_clock::now()); }

}  // namespace axle
