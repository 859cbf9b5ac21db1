// actors/runtime: the meeting points when someone does not come — a replica that leaves or is
// cancelled (told to the other processes), a meeting past its deadline, arrivals that disagree
// on what they meet for — each failing the waiting members with an error naming who and where.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "axle/actors/runtime/meeting_points.h"
#include "axle/actors/runtime/meeting_wire.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/engine/actor.h"

namespace axle {

using meeting_wire::members_text;
using meeting_wire::WireKind;

void MeetingPoints::leave(const LeaveGroup& m) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    auto group_it = groups_.find(m.group);
    if (group_it == groups_.end()) return;
    Group& group = group_it->second;
    group.departed.at(m.ordinal) = true;
    for (auto& [key, set] : group.sets) {
      const std::vector<int>& members = key.second;
      if (std::ranges::find(members, m.ordinal) == members.end()) continue;
      for (auto& [index, point] : set.points) {
        fail_if_deserted(group, members, set, index, point, answers);
      }
    }
  }
  answers.give();
}

void MeetingPoints::cancel(const CancelGroup& m) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    auto group_it = groups_.find(m.group);
    if (group_it == groups_.end() || group_it->second.failed_replica >= 0) return;
    Group& group = group_it->second;
    if (transport_ && group.local_count < group.world_size) {
      WireWriter out;
      out.put(WireKind::kCancel);
      out.put(m.group);
      out.put<int32_t>(m.ordinal);
      out.put_string(m.what);
      const auto message = MessageBytes::of(std::move(out).take());
      const int processes = group.world_size / group.local_count;
      const int me = group.first_local / group.local_count;
      for (int p = 0; p < processes; ++p) {
        if (p != me) transport_->send(p, message);
      }
    }
    apply_cancel(group, m.ordinal, m.what, answers);
  }
  answers.give();
}

void MeetingPoints::apply_cancel(Group& group, int ordinal, const std::string& what,
                                 Answers& answers) {
  if (group.failed_replica >= 0) return;
  group.failed_replica = ordinal;
  group.failure = what;
  for (auto& [key, set] : group.sets) {
    for (auto& [index, point] : set.points) {
      if (!point.waiting.empty()) fail(point, cancelled(group, point.op, point.tag), answers);
    }
  }
}

void MeetingPoints::expire(std::chrono::steady_clock::time_point now) {
  Answers answers;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, group] : groups_) {
      for (auto& [key, set] : group.sets) {
        for (auto& [index, point] : set.points) {
          if (point.timed && !point.error && !point.waiting.empty() && point.deadline <= now) {
            expire_point(group, key.second, point, answers);
          }
        }
      }
    }
  }
  answers.give();
}

void MeetingPoints::expire_point(const Group& group, const std::vector<int>& members, Point& point,
                                 Answers& answers) {
  std::vector<int> missing;
  std::vector<int> processes;  // holding missing replicas, when not this one
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (point.arrived[i]) continue;
    missing.push_back(members[i]);
    if (!is_local(group, members[i])) {
      const int process = members[i] / group.local_count;
      if (std::ranges::find(processes, process) == processes.end()) processes.push_back(process);
    }
  }
  // A process that never sent its replicas' values may have died: name it.
  const std::string where =
      processes.empty() ? std::string()
                        : fmt::format(" (held by process{} {}, which may have died)",
                                      processes.size() == 1 ? "" : "es", members_text(processes));
  fail(point,
       Failure{Failure::Kind::kTimeout,
               fmt::format("{} '{}' among replicas {} timed out after {:g} s "
                           "(AXLE_COLLECTIVE_TIMEOUT): replica{} {} never arrived{}",
                           point.op, point.tag, members_text(members),
                           std::chrono::duration<double>(point.timeout).count(),
                           missing.size() == 1 ? "" : "s", members_text(missing), where)},
       answers);
}

std::optional<MeetingPoints::Failure> MeetingPoints::mismatch_at(
    const Point& point, const std::vector<int>& members, int ordinal, std::string_view op,
    std::string_view tag, std::string_view type, uint64_t index) {
  const auto first = [&] {
    return point.first_ordinal >= 0 ? fmt::format("replica {}", point.first_ordinal)
                                    : std::string("another process's replicas");
  };
  if (tag != point.tag) {
    return Failure{
        Failure::Kind::kCollective,
        fmt::format("collective tags differ among replicas {}: {} reached {} '{}' where replica {} "
                    "reached {} '{}' (collective #{} among these replicas)",
                    members_text(members), first(), point.op, point.tag, ordinal, op, tag,
                    index + 1)};
  }
  if (type != point.type) {
    return Failure{
        Failure::Kind::kCollective,
        fmt::format("{} '{}' among replicas {}: {} brought a value of type {} where replica {} "
                    "brought one of type {}",
                    point.op, tag, members_text(members), first(), detail::type_name_of(point.type),
                    ordinal, detail::type_name_of(std::string(type)))};
  }
  return std::nullopt;
}

void MeetingPoints::complete(Point& point, Answers& answers) {
  if (point.note != 0 && point.note == noted_) {
    noted_ = 0;
    note_waiting({});
  }
  const Gathered all =
      std::make_shared<const std::vector<std::shared_ptr<const void>>>(std::move(point.values));
  for (Promise<Gathered>& waiting : point.waiting)
    answers.values.emplace_back(std::move(waiting), all);
  point.waiting.clear();
}

void MeetingPoints::fail(Point& point, Failure failure, Answers& answers) {
  for (Promise<Gathered>& waiting : point.waiting)
    answers.errors.emplace_back(std::move(waiting), failure);
  point.error = std::move(failure);
  point.waiting.clear();
}

void MeetingPoints::fail_if_deserted(const Group& group, const std::vector<int>& members,
                                     const MemberSet& set, uint64_t index, Point& point,
                                     Answers& answers) {
  if (point.error) return;
  for (std::size_t i = 0; i < members.size(); ++i) {
    // A member that left before reaching this point never will.
    if (group.departed[members[i]] && set.reached[i] <= index) {
      fail(point,
           Failure{Failure::Kind::kCollective,
                   fmt::format("{} '{}' among replicas {}: replica {} returned from its function "
                               "without reaching it",
                               point.op, point.tag, members_text(members), members[i])},
           answers);
      return;
    }
  }
}

MeetingPoints::Failure MeetingPoints::cancelled(const Group& group, std::string_view op,
                                                const std::string& tag) {
  return Failure{Failure::Kind::kCancelled,
                 fmt::format("{} '{}' cancelled: replica {} failed: {}", op, tag,
                             group.failed_replica, group.failure),
                 group.failed_replica};
}

}  // namespace axle
