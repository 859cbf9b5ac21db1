// Meeting points across processes (under mpirun by CTest: 2 processes, one member each): a point
// waited on names what it waits for in the note mpirun's SIGTERM prints, anew whenever the point
// differs from the last one among the same members (its tag, who has come), and a member set's
// points, made again from the last one's memory, carry each meeting's own values.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "axle/actors/runtime/meeting_points.h"
#include "axle/actors/runtime/process_transport.h"
#include "axle/actors/runtime/stop_note.h"

namespace axle {
namespace {

constexpr ValueCodec kIntCodec{
    [](const void* value, WireWriter& out, int) {
      out.put<int32_t>(*static_cast<const int*>(value));
    },
    [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
      return std::make_shared<const int>(in.get<int32_t>("an int"));
    }};

TEST(MeetingPointsAcrossProcesses, AWaitingPointsNoteNamesItsOwnTagAndTheMembersItWaitsFor) {
  ProcessTransport* transport = ProcessTransport::get();
  ASSERT_NE(transport, nullptr) << "run this test under mpirun";
  const ProcessPlacement placement = ProcessTransport::placement();
  ASSERT_EQ(placement.count, 2) << "run this test under mpirun with 2 processes";
  const int me = placement.index;
  MeetingPoints points(transport);
  transport->set_receiver([&points](int from, ProcessMessage message) {
    FromProcess m{from, std::move(message)};
    points.receive(m);
  });
  points.open(OpenGroup{.group = 7, .world_size = 2, .first_local = me, .local_count = 1});
  // Process 1 comes to each point well after process 0, which waits there meanwhile: the same
  // tag twice, another, then the first again.
  const std::vector<std::string> tags = {"a", "a", "bb", "a"};
  for (std::size_t k = 0; k < tags.size(); ++k) {
    if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Future<Gathered> met =
        points.arrive(Arrive{.op = "rendezvous",
                             .group = 7,
                             .ordinal = me,
                             .tag = tags[k],
                             .members = {0, 1},
                             .value = std::make_shared<const int>(static_cast<int>(10 * k) + me),
                             .type = &typeid(int),
                             .timeout = std::chrono::seconds(60),
                             .codec = &kIntCodec});
    if (me == 0) {
      EXPECT_FALSE(met.ready()) << "point " << k;
      EXPECT_EQ(waiting_note(), "waiting in rendezvous '" + tags[k] +
                                    "' among replicas {0, 1} for replica {1} of process {1}")
          << "point " << k;
    }
    const Gathered all = met.get(std::chrono::seconds(60));
    ASSERT_EQ(all->size(), 2u);
    EXPECT_EQ(*static_cast<const int*>((*all)[0].get()), static_cast<int>(10 * k));
    EXPECT_EQ(*static_cast<const int*>((*all)[1].get()), static_cast<int>(10 * k) + 1);
    // Once met, the process waits for nothing.
    EXPECT_EQ(waiting_note(), "") << "point " << k;
  }
  // Both processes are done with the group before either closes it.
  Future<Gathered> last = points.arrive(Arrive{.op = "rendezvous",
                                               .group = 7,
                                               .ordinal = me,
                                               .tag = "end",
                                               .members = {0, 1},
                                               .value = std::make_shared<const int>(0),
                                               .type = &typeid(int),
                                               .timeout = std::chrono::seconds(60),
                                               .codec = &kIntCodec});
  (void)last.get(std::chrono::seconds(60));
  transport->set_receiver(nullptr);
  points.close(CloseGroup{7});
}

}  // namespace
}  // namespace axle
