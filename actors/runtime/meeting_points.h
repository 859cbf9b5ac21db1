// actors: MeetingPoints — where spawn's replicas meet for out-of-graph collectives (rendezvous,
// mesh_reduce) and their devices for in-graph ones. Each member brings a value to a point; every
// member is answered at once when the last arrives, or all fail: mismatched tags, a deadline
// (AXLE_COLLECTIVE_TIMEOUT), a member that returned without coming, or a replica that failed
// (ReplicaCancelled). Values stay in this process and travel as shared handles, never copied. A
// job of several processes meets across them: once every member in this process has reached a
// point, their values go, encoded, to the other processes holding members
// (actors/runtime/process_transport.h), and the point completes when theirs have come; failures and
// cancellations go too.
//
// Thread-safe, so devices meet without a round trip through an actor: a device arrives from its
// own thread, and the last member to arrive completes the point, answering the others' futures.
// The RendezvousActor (actors/runtime/rendezvous_actor.h) feeds it what comes as messages: groups
// opened, left, cancelled and closed, other processes' shares, and the clock that expires
// deadlines.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <vector>

#include "axle/actors/runtime/errors.h"
#include "axle/actors/runtime/process_transport.h"
#include "axle/actors/runtime/wire.h"
#include "axle/engine/future.h"

namespace axle {

/// Everything brought to one rendezvous point, one value per member in ascending ordinal order.
using Gathered = std::shared_ptr<const std::vector<std::shared_ptr<const void>>>;

/// A replica group of spawn starts: `world_size` replicas, ordinals 0 .. world_size - 1, of which
/// this process holds `local_count` from `first_local` on. Every process of the job holds as
/// many, in process order.
struct OpenGroup {
  uint64_t group;
  int world_size;
  int first_local = 0;
  int local_count = world_size;
};

/// How a value brought to a point crosses to another process: written into the message for
/// process `to` (a value may send each process only its part), and made again from it (the
/// value may point into the message, which `message` keeps alive).
struct ValueCodec {
  void (*encode)(const void* value, WireWriter& out, int to);
  std::shared_ptr<const void> (*decode)(WireReader& in, const ProcessMessage& message);
};
/// Who meets: replica threads (rendezvous, mesh_reduce) or the replicas' devices (in-graph
/// collectives). Each counts its points apart, since devices run behind their hosts.
enum class Channel : uint8_t { kHost, kDevice };

/// Replica `ordinal` reaches its next point among `members` (sorted) with `value` (of `type`).
/// Replies with every member's value once all are there.
struct Arrive {
  using Reply = Gathered;
  std::string_view op;  ///< "rendezvous" or "mesh_reduce" (static), for messages
  uint64_t group;
  int ordinal;
  std::string tag;
  std::vector<int> members;
  std::shared_ptr<const void> value;
  const std::type_info* type;
  std::chrono::nanoseconds timeout;  ///< from the first arrival at a point
  Channel channel = Channel::kHost;
  /// How `value` crosses processes; null when it cannot (a point among processes then fails).
  const ValueCodec* codec = nullptr;
};
/// Replica `ordinal`'s function returned: it reaches no further point.
struct LeaveGroup {
  uint64_t group;
  int ordinal;
};
/// Replica `ordinal` failed with `what`: every point of the group, now and later, fails with
/// ReplicaCancelled.
struct CancelGroup {
  uint64_t group;
  int ordinal;
  std::string what;
};
/// spawn is done with the group (every replica has joined): its state goes.
struct CloseGroup {
  uint64_t group;
};
/// What another process sent (its members' values at a point, or a cancellation).
struct FromProcess {
  int from;
  ProcessMessage message;
};
/// A group's points and their members' progress. One per LazySystem; every member is a
/// caller.
class MeetingPoints {
 public:
  /// `transport` joins the job's other processes; null when this process is the whole job. In a
  /// job of several processes, the points of a restarted system take over where the last one
  /// stopped (how many points each member reached, messages for later points), since the other
  /// processes restart theirs at other moments.
  explicit MeetingPoints(ProcessTransport* transport = nullptr);
  ~MeetingPoints();
  MeetingPoints(const MeetingPoints&) = delete;
  MeetingPoints& operator=(const MeetingPoints&) = delete;

  void open(const OpenGroup& m);
  /// Replica `m.ordinal` reaches its next point; the future completes once every member has.
  [[nodiscard]] Future<Gathered> arrive(Arrive m);
  void arrive(Arrive& m, Promise<Gathered>&& reply);
  void leave(const LeaveGroup& m);
  void cancel(const CancelGroup& m);
  void close(const CloseGroup& m);
  void receive(FromProcess& m);
  /// Fails every point waited on past its deadline at `now`.
  void expire(std::chrono::steady_clock::time_point now);
  /// The transport to the job's other processes, or null.
  [[nodiscard]] ProcessTransport* transport() const noexcept { return transport_; }
  /// True while some group is open (its deadlines need the clock).
  [[nodiscard]] bool any_open() const;

 private:
  // An error to answer replicas with, made afresh for each one so that no two threads share an
  // exception object (which the standard allows, but libstdc++'s uninstrumented reference count
  // makes ThreadSanitizer report the last release as a race).
  struct Failure {
    enum class Kind { kCollective, kTimeout, kCancelled };
    Kind kind = Kind::kCollective;
    std::string what;
    int failed_replica = -1;  // kCancelled
    [[nodiscard]] std::exception_ptr make() const;
  };
  // Answers decided under the lock and given after it, so that the waiters' continuations never
  // run while it is held.
  struct Answers {
    std::vector<std::pair<Promise<Gathered>, Gathered>> values;
    std::vector<std::pair<Promise<Gathered>, Failure>> errors;
    void give();
  };
  // One meeting of a member set: the `index`-th point the members reach together.
  struct Point {
    std::string op;
    std::string tag;
    int first_ordinal = 0;  // who set the tag
    std::string type;       // mangled name, as std::type_info::name() gives it
    std::vector<std::shared_ptr<const void>> values;  // by member position
    std::vector<bool> arrived;
    int count = 0;
    int local_count = 0;  // members of this process that arrived
    const ValueCodec* codec = nullptr;
    bool timed = false;  // the deadline runs (from the first local arrival)
    // Values from other processes that came before any member here, so before the codec that
    // reads them: read once the first member here comes.
    std::vector<FromProcess> deferred;
    uint64_t note = 0;  // the number of the note saying this process waits here, or 0
    std::vector<Promise<Gathered>> waiting;
    std::optional<Failure> error;  // a failed point answers late arrivals with it
    std::chrono::steady_clock::time_point deadline;
    std::chrono::nanoseconds timeout{0};
  };
  // The note of a point waiting for other processes (note_waiting), and what
  // it says: a member set's next point usually waits for the same replicas, in the same words.
  struct WaitingNote {
    std::string op;
    std::string tag;
    std::vector<bool> arrived;
    std::string text;
  };
  // The points of one member set, and how many each member has reached.
  struct MemberSet {
    std::vector<uint64_t> reached;  // by member position
    std::map<uint64_t, Point> points;
    WaitingNote note;  // the last one made
    // The last point done with, its strings and vectors kept for the next one, so that a step's
    // meeting allocates nothing once the set has met before.
    std::map<uint64_t, Point>::node_type spare;
  };
  struct Group {
    int world_size = 0;
    int first_local = 0;
    int local_count = 0;
    std::vector<bool> departed;  // by ordinal
    int failed_replica = -1;     // >= 0 once cancelled
    std::string failure;
    std::map<std::pair<Channel, std::vector<int>>, MemberSet> sets;
  };

  void arrive_locked(Arrive& m, Promise<Gathered>&& reply, Answers& answers);
  void receive_locked(FromProcess& m, Answers& answers);
  // An error when a member's tag or value type does not fit the point others reached, else null.
  [[nodiscard]] static std::optional<Failure> mismatch_at(const Point& point,
                                                          const std::vector<int>& members,
                                                          int ordinal, std::string_view op,
                                                          std::string_view tag,
                                                          std::string_view type, uint64_t index);
  [[nodiscard]] static bool is_local(const Group& group, int ordinal) {
    return ordinal >= group.first_local && ordinal < group.first_local + group.local_count;
  }
  // Once the last member of this process has arrived: their values to the other processes.
  void share(const Group& group, uint64_t group_id, Channel channel,
             const std::vector<int>& members, uint64_t index, MemberSet& set, Point& point,
             Answers& answers);
  // One process's message of a share.
  void send(int process, const WireWriter& out, const std::vector<std::size_t>& local,
            const Point& point);
  void receive_share(uint64_t group_id, int from, WireReader& in, const ProcessMessage& message,
                     Answers& answers);
  void apply_cancel(Group& group, int ordinal, const std::string& what, Answers& answers);
  static void close_if_done(MemberSet& set, std::map<uint64_t, Point>::iterator point_it);
  // The set's point `index`, made (with `size` members, reusing the spare) when new; true then.
  static std::pair<std::map<uint64_t, Point>::iterator, bool> point_at(MemberSet& set,
                                                                       uint64_t index,
                                                                       std::size_t size);
  void complete(Point& point, Answers& answers);
  static void fail(Point& point, Failure failure, Answers& answers);
  static void fail_if_deserted(const Group& group, const std::vector<int>& members,
                               const MemberSet& set, uint64_t index, Point& point,
                               Answers& answers);
  static void expire_point(const Group& group, const std::vector<int>& members, Point& point,
                           Answers& answers);
  [[nodiscard]] static Failure cancelled(const Group& group, std::string_view op,
                                         const std::string& tag);

  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Group> groups_;
  ProcessTransport* transport_ = nullptr;
  // Messages for groups this process has not opened yet, and groups it has closed.
  std::unordered_map<uint64_t, std::vector<FromProcess>> early_;
  std::unordered_map<uint64_t, bool> closed_;
  // The last point noted as waiting for other processes (note_waiting).
  uint64_t notes_ = 0;
  uint64_t noted_ = 0;
};

}  // namespace axle
