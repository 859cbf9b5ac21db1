// actors: the RendezvousActor — the meeting points' messages (actors/runtime/meeting_points.h).
// Replicas ask it to open, leave, cancel and close their group and to meet at a rendezvous or a
// mesh_reduce; other processes' shares come to it from the transport; it runs the clock that
// expires the points' deadlines. Devices meet at the points directly, from their own threads.
#pragma once

#include <chrono>
#include <memory>

#include "axle/actors/runtime/meeting_points.h"
#include "axle/engine/actor.h"

namespace axle {

/// The deadline clock's tick (sent by the actor to itself while a group is open).
struct ExpirePoints {};

class RendezvousActor : public Actor<RendezvousActor, OpenGroup, Arrive, LeaveGroup, CancelGroup,
                                     CloseGroup, FromProcess, ExpirePoints> {
 public:
  /// How often deadlines are checked: a collective fails at most this long after its timeout.
  static constexpr std::chrono::milliseconds kDeadlineTick{10};

  explicit RendezvousActor(
      std::shared_ptr<MeetingPoints> points = std::make_shared<MeetingPoints>())
      : points_(std::move(points)) {}
  ~RendezvousActor() override { ticking_.cancel(); }
  RendezvousActor(const RendezvousActor&) = delete;
  RendezvousActor& operator=(const RendezvousActor&) = delete;

  void handle(OpenGroup& m);
  void handle(Arrive& m, Promise<Gathered>&& reply) { points_->arrive(m, std::move(reply)); }
  void handle(LeaveGroup& m) { points_->leave(m); }
  void handle(CancelGroup& m) { points_->cancel(m); }
  void handle(CloseGroup& m);
  void handle(FromProcess& m) { points_->receive(m); }
  void handle(ExpirePoints&);

 private:
  std::shared_ptr<MeetingPoints> points_;
  TimerHandle ticking_;
  bool ticks_ = false;
};

}  // namespace axle
