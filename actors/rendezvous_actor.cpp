// actors: the RendezvousActor's points — who has arrived, who never will, and the answers.
#include "actors/rendezvous_actor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace axle {
namespace {

std::string members_text(const std::vector<int>& members) {
  return fmt::format("{{{}}}", fmt::join(members, ", "));
}

}  // namespace

std::exception_ptr RendezvousActor::Failure::make() const {
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

void RendezvousActor::handle(OpenGroup& m) {
  Group& group = groups_[m.group];
  group.world_size = m.world_size;
  group.departed.assign(m.world_size, false);
}

void RendezvousActor::handle(Arrive& m, Promise<Gathered>&& reply) {
  auto group_it = groups_.find(m.group);
  const auto position = std::ranges::find(m.members, m.ordinal);
  const auto outside = [&](int r) { return r < 0 || r >= group_it->second.world_size; };
  if (group_it == groups_.end() || position == m.members.end() ||
      std::ranges::any_of(m.members, outside)) {
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
  auto [point_it, new_point] = set.points.try_emplace(index);
  Point& point = point_it->second;
  if (new_point) {
    point.op = m.op;
    point.tag = m.tag;
    point.first_ordinal = m.ordinal;
    point.type = m.type;
    point.values.resize(size);
    point.arrived.assign(size, false);
    point.timeout = m.timeout;
    point.deadline = send_after(m.timeout, ExpirePoint{m.group, m.channel, m.members, index});
  }
  point.arrived[pos] = true;
  ++point.count;
  if (!point.error) {
    if (std::optional<Failure> mismatch = mismatch_at(point, m, index)) fail(point, *mismatch);
  }
  if (point.error) {
    reply.set_error(point.error->make());
  } else {
    point.values[pos] = std::move(m.value);
    point.waiting.push_back(std::move(reply));
    if (point.count == static_cast<int>(size)) {
      complete(point);
    } else if (new_point) {
      fail_if_deserted(group, m.members, set, index, point);
    }
  }
  if (point.count == static_cast<int>(size)) {
    point.deadline.cancel();
    set.points.erase(point_it);
  }
}

void RendezvousActor::handle(LeaveGroup& m) {
  auto group_it = groups_.find(m.group);
  if (group_it == groups_.end()) return;
  Group& group = group_it->second;
  group.departed.at(m.ordinal) = true;
  for (auto& [key, set] : group.sets) {
    const std::vector<int>& members = key.second;
    if (std::ranges::find(members, m.ordinal) == members.end()) continue;
    for (auto& [index, point] : set.points) fail_if_deserted(group, members, set, index, point);
  }
}

void RendezvousActor::handle(CancelGroup& m) {
  auto group_it = groups_.find(m.group);
  if (group_it == groups_.end() || group_it->second.failed_replica >= 0) return;
  Group& group = group_it->second;
  group.failed_replica = m.ordinal;
  group.failure = m.what;
  for (auto& [key, set] : group.sets) {
    for (auto& [index, point] : set.points) {
      if (!point.waiting.empty()) fail(point, cancelled(group, point.op, point.tag));
    }
  }
}

void RendezvousActor::handle(CloseGroup& m) { groups_.erase(m.group); }

void RendezvousActor::handle(ExpirePoint& m) {
  auto group_it = groups_.find(m.group);
  if (group_it == groups_.end()) return;
  auto set_it = group_it->second.sets.find(std::pair(m.channel, m.members));
  if (set_it == group_it->second.sets.end()) return;
  auto point_it = set_it->second.points.find(m.index);
  if (point_it == set_it->second.points.end()) return;
  Point& point = point_it->second;
  if (point.error || point.waiting.empty()) return;
  std::vector<int> missing;
  for (std::size_t i = 0; i < m.members.size(); ++i) {
    if (!point.arrived[i]) missing.push_back(m.members[i]);
  }
  fail(point, Failure{Failure::Kind::kTimeout,
                      fmt::format("{} '{}' among replicas {} timed out after {:g} s "
                                  "(AXLE_COLLECTIVE_TIMEOUT): replica{} {} never arrived",
                                  point.op, point.tag, members_text(m.members),
                                  std::chrono::duration<double>(point.timeout).count(),
                                  missing.size() == 1 ? "" : "s", members_text(missing))});
}

std::optional<RendezvousActor::Failure> RendezvousActor::mismatch_at(const Point& point,
                                                                     const Arrive& m,
                                                                     uint64_t index) {
  if (m.tag != point.tag) {
    return Failure{
        Failure::Kind::kCollective,
        fmt::format(
            "collective tags differ among replicas {}: replica {} reached {} '{}' where replica {} "
            "reached {} '{}' (collective #{} among these replicas)",
            members_text(m.members), point.first_ordinal, point.op, point.tag, m.ordinal, m.op,
            m.tag, index + 1)};
  }
  if (*m.type != *point.type) {
    return Failure{
        Failure::Kind::kCollective,
        fmt::format(
            "{} '{}' among replicas {}: replica {} brought a value of type {} where replica {} "
            "brought one of type {}",
            point.op, m.tag, members_text(m.members), point.first_ordinal,
            detail::type_name(*point.type), m.ordinal, detail::type_name(*m.type))};
  }
  return std::nullopt;
}

void RendezvousActor::complete(Point& point) {
  const Gathered all =
      std::make_shared<const std::vector<std::shared_ptr<const void>>>(std::move(point.values));
  for (Promise<Gathered>& waiting : point.waiting) waiting.set_value(all);
  point.waiting.clear();
}

void RendezvousActor::fail(Point& point, Failure failure) {
  for (Promise<Gathered>& waiting : point.waiting) waiting.set_error(failure.make());
  point.error = std::move(failure);
  point.waiting.clear();
  point.deadline.cancel();
}

void RendezvousActor::fail_if_deserted(const Group& group, const std::vector<int>& members,
                                       const MemberSet& set, uint64_t index, Point& point) {
  if (point.error) return;
  for (std::size_t i = 0; i < members.size(); ++i) {
    // A member that left before reaching this point never will.
    if (group.departed[members[i]] && set.reached[i] <= index) {
      fail(point,
           Failure{Failure::Kind::kCollective,
                   fmt::format("{} '{}' among replicas {}: replica {} returned from its function "
                               "without reaching it",
                               point.op, point.tag, members_text(members), members[i])});
      return;
    }
  }
}

RendezvousActor::Failure RendezvousActor::cancelled(const Group& group, std::string_view op,
                                                    const std::string& tag) {
  return Failure{Failure::Kind::kCancelled,
                 fmt::format("{} '{}' cancelled: replica {} failed: {}", op, tag,
                             group.failed_replica, group.failure),
                 group.failed_replica};
}

}  // namespace axle
