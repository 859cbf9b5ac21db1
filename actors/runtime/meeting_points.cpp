// actors/runtime: the meeting points — who has arrived, the answers, and the shares sent to and
// received from the other processes (who never will arrive: meeting_failures.cpp).
#include "axle/actors/runtime/meeting_points.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <tuple>
#include <utility>

#include "axle/actors/runtime/meeting_wire.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/engine/actor.h"
#include "axle/engine/log.h"

namespace axle {

using meeting_wire::members_text;
using meeting_wire::WireKind;

namespace {

// From this size a value's block is sent from where it lies (MeetingPoints::send): below it, a
// message of its own costs more than copying the block.
constexpr std::size_t kBlockInPlaceBytes = std::size_t{64} << 10;
// From this size a message to a process sharing memory with this one goes through that memory.
constexpr std::size_t kSharedMessageBytes = std::size_t{16} << 10;

}  // namespace

std::exception_ptr MeetingPoints::Failure::make() const {
  switch (kind) {
    case Kind::kTimeout:
      return std::make_exception_ptr(CollectiveTimeout(what));
    case Kind::kCancelled:
      return std::make_exception_ptr(ReplicaCancelled(failed_replica, what));
    case Kind::kCollective:
      break;
  }
  return std::make_exception_ptr(CollectiveError(what));
}

namespace {

// What a stopped actor hands the next one (a job of several processes only).
struct Handover {
  std::mutex mutex;
  std::function<void(MeetingPoints&)> adopt;  // set by the last points, run by the next
};
Handover& handover() {
  static Handover h;
  return h;
}

}  // namespace

MeetingPoints::MeetingPoints(ProcessTransport* transport) : transport_(transport) {
  if (!transport_) return;
  std::function<void(MeetingPoints&)> adopt;
  {
    std::lock_guard lock(handover().mutex);
    adopt = std::exchange(handover().adopt, nullptr);
  }
  if (adopt) adopt(*this);
}

MeetingPoints::~MeetingPoints() {
  if (!transport_) return;
  std::lock_guard lock(mutex_);
  // Points keep their counts and values; their waiters are gone (the system stopped).
  for (auto& [id, group] : groups_) {
    for (auto& [key, set] : group.sets) {
      for (auto& [index, point] : set.points) {
        point.waiting.clear();
        point.timed = false;
      }
    }
  }
  auto state = std::make_shared<std::tuple<decltype(groups_), decltype(early_), decltype(closed_)>>(
      std::move(groups_), std::move(early_), std::move(closed_));
  std::lock_guard handing(handover().mutex);
  handover().adopt = [state](MeetingPoints& next) {
    std::tie(next.groups_, next.early_, next.closed_) = std::move(*state);
  };
}

void MeetingPoints::Answers::give() {
  for (auto& [promise, all] : values) promise.set_value(all);
  for (auto& [promise, failure] : errors) promise.set_error(failure.make());
}

void MeetingPoints::open(const OpenGroup& m) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    Group& group = groups_[m.group];
    group.world_size = m.world_size;
    group.first_local = m.first_local;
    group.local_count = m.local_count;
    group.departed.assign(m.world_size, false);
    closed_.erase(m.group);
    if (auto early = early_.extract(m.group)) {
      for (FromProcess& message : early.mapped()) receive_locked(message, answers);
    }
  }
  answers.give();
}

bool MeetingPoints::any_open() const {
  std::lock_guard lock(mutex_);
  return !groups_.empty();
}

Future<Gathered> MeetingPoints::arrive(Arrive m) {
  auto [reply, answer] = make_promise<Gathered>();
  arrive(m, std::move(reply));
  return std::move(answer);
}

void MeetingPoints::arrive(Arrive& m, Promise<Gathered>&& reply) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    arrive_locked(m, std::move(reply), answers);
  }
  answers.give();
}

void MeetingPoints::arrive_locked(Arrive& m, Promise<Gathered>&& reply, Answers& answers) {
  auto group_it = groups_.find(m.group);
  const auto position = std::ranges::find(m.members, m.ordinal);
  const auto outside = [&](int r) { return r < 0 || r >= group_it->second.world_size; };
  if (group_it == groups_.end() || position == m.members.end() ||
      std::ranges::any_of(m.members, outside) || !is_local(group_it->second, m.ordinal)) {
    reply.set_error(std::make_exception_ptr(CollectiveError(
        fmt::format("{} '{}': replica {} is not a member of a running spawn among {}", m.op, m.tag,
                    m.ordinal, members_text(m.members)))));
    return;
  }
  Group& group = group_it->second;
  if (group.failed_replica >= 0) {
    reply.set_error(cancelled(group, m.op, m.tag).make());
    return;
  }
  const std::size_t pos = position - m.members.begin();
  const std::size_t size = m.members.size();
  auto [set_it, new_set] = group.sets.try_emplace(std::pair(m.channel, m.members));
  MemberSet& set = set_it->second;
  if (new_set) set.reached.assign(size, 0);
  const uint64_t index = set.reached[pos]++;
  auto [point_it, new_point] = point_at(set, index, size);
  Point& point = point_it->second;
  if (new_point) {
    point.op = m.op;
    point.tag = m.tag;
    point.first_ordinal = m.ordinal;
    point.type = m.type->name();
  }
  if (!point.timed) {
    point.timed = true;
    point.timeout = m.timeout;
    point.deadline = std::chrono::steady_clock::now() + m.timeout;
  }
  if (!point.codec) point.codec = m.codec;
  std::vector<FromProcess> deferred = std::exchange(point.deferred, {});
  point.arrived[pos] = true;
  ++point.count;
  ++point.local_count;
  if (!point.error) {
    if (std::optional<Failure> mismatch =
            mismatch_at(point, m.members, m.ordinal, m.op, m.tag, m.type->name(), index)) {
      fail(point, *mismatch, answers);
    }
  }
  if (point.error) {
    answers.errors.emplace_back(std::move(reply), *point.error);
  } else {
    point.values[pos] = std::move(m.value);
    point.waiting.push_back(std::move(reply));
  }
  // The last member here sends this process's values on before the point completes (which
  // hands them to the members).
  const int local_members =
      static_cast<int>(std::ranges::count_if(m.members, [&](int r) { return is_local(group, r); }));
  if (point.local_count == local_members && local_members < static_cast<int>(size)) {
    share(group, m.group, m.channel, m.members, index, set, point, answers);
  }
  if (!point.error) {
    if (point.count == static_cast<int>(size)) {
      complete(point, answers);
    } else if (new_point) {
      fail_if_deserted(group, m.members, set, index, point, answers);
    }
  }
  close_if_done(set, point_it);
  for (FromProcess& message : deferred) receive_locked(message, answers);
}

void MeetingPoints::close_if_done(MemberSet& set, std::map<uint64_t, Point>::iterator point_it) {
  Point& point = point_it->second;
  if (point.count != static_cast<int>(point.arrived.size())) return;
  // What the point holds goes now (the members' values above all); its memory stays.
  std::ranges::fill(point.values, nullptr);
  point.deferred.clear();
  point.waiting.clear();
  point.error.reset();
  set.spare = set.points.extract(point_it);
}

std::pair<std::map<uint64_t, MeetingPoints::Point>::iterator, bool> MeetingPoints::point_at(
    MemberSet& set, uint64_t index, std::size_t size) {
  if (auto it = set.points.find(index); it != set.points.end()) return {it, false};
  std::map<uint64_t, Point>::iterator it;
  if (set.spare) {
    set.spare.key() = index;
    it = set.points.insert(std::move(set.spare)).position;
    // As made anew, with the spare's strings' and vectors' memory (close_if_done emptied them).
    Point& spare = it->second;
    Point fresh;
    fresh.op = std::move(spare.op);
    fresh.tag = std::move(spare.tag);
    fresh.type = std::move(spare.type);
    fresh.values = std::move(spare.values);
    fresh.arrived = std::move(spare.arrived);
    fresh.deferred = std::move(spare.deferred);
    fresh.waiting = std::move(spare.waiting);
    spare = std::move(fresh);
  } else {
    it = set.points.try_emplace(index).first;
  }
  it->second.values.assign(size, nullptr);
  it->second.arrived.assign(size, false);
  return {it, true};
}

// A share: kind, group, channel, index, members, op, tag, type, the sender's world size and
// local count, an error (empty when none), then each local member's ordinal and value.
void MeetingPoints::share(const Group& group, uint64_t group_id, Channel channel,
                          const std::vector<int>& members, uint64_t index, MemberSet& set,
                          Point& point, Answers& answers) {
  std::string error;
  if (point.error) {
    error = point.error->what;
  } else if (!point.codec) {
    error = fmt::format("{} '{}': values of type {} cannot go to other processes", point.op,
                        point.tag, detail::type_name_of(point.type));
    fail(point, Failure{Failure::Kind::kCollective, error}, answers);
  }
  std::vector<std::size_t> local;
  std::vector<int> processes;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (is_local(group, members[i])) {
      local.push_back(i);
    } else if (const int process = members[i] / group.local_count;
               std::ranges::find(processes, process) == processes.end()) {
      processes.push_back(process);
    }
  }
  // One message per process: a value may send each only its part.
  for (int process : processes) {
    WireWriter out;
    out.put(WireKind::kShare);
    out.put(group_id);
    out.put(channel);
    out.put(index);
    out.put<uint64_t>(members.size());
    for (int r : members) out.put<int32_t>(r);
    out.put_string(point.op);
    out.put_string(point.tag);
    out.put_string(point.type);
    out.put<int32_t>(group.world_size);
    out.put<int32_t>(group.local_count);
    out.put_string(error);
    out.put<uint64_t>(error.empty() ? local.size() : 0);
    if (error.empty()) {
      for (std::size_t i : local) {
        out.put<int32_t>(members[i]);
        point.codec->encode(point.values[i].get(), out, process);
      }
    }
    send(process, out, local, point);
  }
  if (point.error || point.count == static_cast<int>(members.size())) return;
  WaitingNote& note = set.note;
  if (note.text.empty() || note.arrived != point.arrived || note.op != point.op ||
      note.tag != point.tag) {
    std::vector<int> missing;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (!point.arrived[i]) missing.push_back(members[i]);
    }
    note.op = point.op;
    note.tag = point.tag;
    note.arrived = point.arrived;
    note.text = fmt::format("waiting in {} '{}' among replicas {} for replica{} {} of process{} {}",
                            point.op, point.tag, members_text(members),
                            missing.size() == 1 ? "" : "s", members_text(missing),
                            processes.size() == 1 ? "" : "es", members_text(processes));
  }
  point.note = noted_ = ++notes_;
  note_waiting(note.text);
}

void MeetingPoints::send(int process, const WireWriter& out, const std::vector<std::size_t>& local,
                         const Point& point) {
  // A large value is sent from where it lies, not copied into the message: the point's values
  // keep it alive until the send completes, and a device never writes over memory another holds.
  // To a process sharing memory with this one, every value put by reference goes so: the
  // transport copies the message, whole, once, where that process reads it.
  const std::size_t in_place =
      out.size() >= kSharedMessageBytes && transport_->shares_memory_with(process)
          ? 0
          : kBlockInPlaceBytes;
  std::vector<MessageBlock> blocks;
  std::size_t offset = 0;
  out.for_each_piece([&](const std::byte* data, std::size_t size, bool by_reference) {
    if (by_reference && size >= in_place) blocks.push_back({offset, {data, size}});
    offset += size;
  });
  if (blocks.empty()) {
    // Into a pooled buffer, so an operand is copied once and faults in no fresh pages.
    std::shared_ptr<MessageBytes> message = MessageBytes::make(out.size());
    out.copy_to(message->data());
    return transport_->send(process, std::move(message));
  }
  std::vector<std::byte> rest;
  out.for_each_piece([&](const std::byte* data, std::size_t size, bool by_reference) {
    if (!(by_reference && size >= in_place)) rest.insert(rest.end(), data, data + size);
  });
  auto keep = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (std::size_t i : local) keep->push_back(point.values[i]);
  transport_->send(process, out.size(), rest, std::move(blocks), std::move(keep));
}

void MeetingPoints::receive(FromProcess& m) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    receive_locked(m, answers);
  }
  answers.give();
}

void MeetingPoints::receive_locked(FromProcess& m, Answers& answers) {
  try {
    WireReader in(m.message->bytes());
    const auto kind = in.get<WireKind>("the message's kind");
    const auto group_id = in.get<uint64_t>("the replica group");
    if (!groups_.contains(group_id)) {
      // A process that started the group first; one that closed it has no more use for it.
      if (!closed_.contains(group_id)) early_[group_id].push_back(std::move(m));
      return;
    }
    if (kind == WireKind::kCancel) {
      const auto ordinal = in.get<int32_t>("the failed replica");
      const std::string what = in.get_string("the failure");
      apply_cancel(groups_.at(group_id), ordinal, what, answers);
      return;
    }
    if (kind != WireKind::kShare) {
      throw std::runtime_error(fmt::format("unknown message kind {}", static_cast<int>(kind)));
    }
    receive_share(group_id, m.from, in, m.message, answers);
  } catch (const std::exception& e) {
    AXLE_LOG(ERROR, "a message from process {} could not be read: {}", m.from, e.what());
  }
}

void MeetingPoints::receive_share(uint64_t group_id, int from, WireReader& in,
                                  const ProcessMessage& message, Answers& answers) {
  Group& group = groups_.at(group_id);
  const auto channel = in.get<Channel>("the channel");
  const auto index = in.get<uint64_t>("the point's index");
  std::vector<int> members(in.get<uint64_t>("the member count"));
  for (int& r : members) r = in.get<int32_t>("a member");
  const std::string_view op = in.get_string_view("the operation");
  const std::string_view tag = in.get_string_view("the tag");
  const std::string_view type = in.get_string_view("the value type");
  const auto world_size = in.get<int32_t>("the world size");
  const auto local_count = in.get<int32_t>("the replicas per process");
  const std::string error = in.get_string("the error");
  auto [set_it, new_set] = group.sets.try_emplace(std::pair(channel, members));
  MemberSet& set = set_it->second;
  if (new_set) set.reached.assign(members.size(), 0);
  auto [point_it, new_point] = point_at(set, index, members.size());
  Point& point = point_it->second;
  if (new_point) {
    point.op = op;
    point.tag = tag;
    point.type = type;
    point.first_ordinal = -1;
  }
  if (!point.codec && point.local_count == 0) {
    point.deferred.push_back(FromProcess{from, message});
    return;
  }
  std::optional<Failure> failure;
  if (!error.empty()) {
    failure = Failure{Failure::Kind::kCollective, error};
  } else if (world_size != group.world_size || local_count != group.local_count) {
    failure = Failure{
        Failure::Kind::kCollective,
        fmt::format("{} '{}': process {} runs {} replicas of {} where this process "
                    "runs {} of {}; every process must run as many",
                    op, tag, from, local_count, world_size, group.local_count, group.world_size)};
  }
  const auto parts = in.get<uint64_t>("the value count");
  for (uint64_t p = 0; p < parts; ++p) {
    const auto ordinal = in.get<int32_t>("a member's ordinal");
    const auto at = std::ranges::find(members, ordinal);
    if (at == members.end()) {
      throw std::runtime_error(fmt::format("replica {} is not a member", ordinal));
    }
    const std::size_t pos = at - members.begin();
    if (point.arrived[pos]) continue;
    point.arrived[pos] = true;
    ++point.count;
    if (!failure && !point.error) {
      failure = mismatch_at(point, members, ordinal, op, tag, type, index);
    }
    if (!failure && !point.error) {
      if (!point.codec) {
        failure = Failure{Failure::Kind::kCollective,
                          fmt::format("{} '{}': values of type {} cannot come from other processes",
                                      op, tag, detail::type_name_of(std::string(type)))};
      } else {
        point.values[pos] = point.codec->decode(in, message);
      }
    }
  }
  if (!error.empty() || failure) {
    // Every member of the sender's process counts as come: they will not come again.
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (!is_local(group, members[i]) && members[i] / group.local_count == from &&
          !point.arrived[i]) {
        point.arrived[i] = true;
        ++point.count;
      }
    }
  }
  if (failure && !point.error) fail(point, *failure, answers);
  if (!point.error && point.count == static_cast<int>(members.size())) complete(point, answers);
  close_if_done(set, point_it);
}

void MeetingPoints::close(const CloseGroup& m) {
  std::lock_guard lock(mutex_);
  groups_.erase(m.group);
  early_.erase(m.group);
  closed_[m.group] = true;
}

}  // namespace axle
