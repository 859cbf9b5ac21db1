// actors: the device's side of collectives — a program paused at a collective brings its operand
// to the meeting of its group's members (actors/runtime/meeting_points.h), waits in line or parks,
// and goes on with its share of the result; across processes a member's contribution travels as
// bytes, and a large all-reduce among processes goes by stretches. Part of DeviceActor
// (device_actor.h), whose executions are device_actor.cpp.
#include "axle/actors/runtime/device_actor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "axle/actors/compiler/memory_plan.h"
#include "axle/actors/compiler/program_dump.h"
#include "axle/engine/element.h"
#include "axle/engine/exception_text.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"
#include "axle/engine/trace.h"

namespace axle {

// What a member brings to a meeting of a collective: its operand and, from the first member of
// an all-reduce, the buffer every member writes its stretch of the result into; or, from a member
// whose run failed before or at this collective, its error instead. A failed run still comes to
// every meeting its program has left, so that the members' meetings stay matched one to one and
// the others fail at once with its error, instead of waiting for it, or pairing its next step's
// collective with this one.
struct CollectiveContribution {
  IntrusivePtr<DeviceMemory> operand;
  std::size_t operand_bytes = 0;
  // An all-reduce by stretches: process stretch_owners[k] folds stretch k of the elements, so
  // each other process is sent only its stretch of the operand.
  std::vector<int> stretch_owners;
  std::size_t element_bytes = 0;
  IntrusivePtr<DeviceMemory> shared_result;
  std::exception_ptr failure;
  int from = 0;
};

namespace {

double elapsed_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

// Stretch k of n elements among `parts`: [first, last).
std::pair<int64_t, int64_t> stretch(int64_t n, int64_t k, int64_t parts) {
  return {n * k / parts, n * (k + 1) / parts};
}

// The processes holding `members` (each process holds `per_process` consecutive ordinals), in
// the order of their first member.
std::vector<int> member_processes(const std::vector<int>& members, int per_process) {
  std::vector<int> processes;
  for (int m : members) {
    if (std::ranges::find(processes, m / per_process) == processes.end()) {
      processes.push_back(m / per_process);
    }
  }
  return processes;
}

// Part of another buffer, kept alive with it.
class MemoryView final : public DeviceMemory {
 public:
  MemoryView(IntrusivePtr<DeviceMemory> whole, std::size_t offset, std::size_t bytes)
      : whole_(std::move(whole)), offset_(offset), bytes_(bytes) {}
  void* data() noexcept override { return static_cast<std::byte*>(whole_->data()) + offset_; }
  [[nodiscard]] std::size_t bytes() const noexcept override { return bytes_; }

 private:
  IntrusivePtr<DeviceMemory> whole_;
  std::size_t offset_;
  std::size_t bytes_;
};

// A member's operand from another process, read in place in the message that brought it.
class ReceivedOperand final : public DeviceMemory {
 public:
  ReceivedOperand(ProcessMessage message, std::span<const std::byte> bytes)
      : message_(std::move(message)), bytes_(bytes) {}
  void* data() noexcept override { return const_cast<std::byte*>(bytes_.data()); }
  [[nodiscard]] std::size_t bytes() const noexcept override { return bytes_.size(); }

 private:
  ProcessMessage message_;
  std::span<const std::byte> bytes_;
};

// How a contribution crosses processes: its member, then its error's text or its operand.
constexpr ValueCodec kContributionCodec{
    [](const void* value, WireWriter& out, int to) {
      const auto& c = *static_cast<const CollectiveContribution*>(value);
      out.put<int32_t>(c.from);
      out.put<uint8_t>(c.failure ? 1 : 0);
      if (c.failure) {
        out.put_string(exception_text(c.failure));
        return;
      }
      const auto owner = std::ranges::find(c.stretch_owners, to);
      if (owner == c.stretch_owners.end()) {
        out.put_block(c.operand->data(), c.operand_bytes);
        return;
      }
      const auto [first, last] =
          stretch(static_cast<int64_t>(c.operand_bytes / c.element_bytes),
                  owner - c.stretch_owners.begin(), static_cast<int64_t>(c.stretch_owners.size()));
      out.put_block(static_cast<const std::byte*>(c.operand->data()) +
                        static_cast<std::size_t>(first) * c.element_bytes,
                    static_cast<std::size_t>(last - first) * c.element_bytes);
    },
    [](WireReader& in, const ProcessMessage& message) -> std::shared_ptr<const void> {
      auto c = std::make_shared<CollectiveContribution>();
      c->from = in.get<int32_t>("a contribution's replica");
      if (in.get<uint8_t>("whether it failed") != 0) {
        c->failure = std::make_exception_ptr(CollectiveError(in.get_string("its failure")));
      } else {
        const std::span<const std::byte> operand = in.get_block("its operand");
        c->operand = make_intrusive<ReceivedOperand>(message, operand);
        c->operand_bytes = operand.size();
      }
      return c;
    }};

// From this size an all-reduce among processes goes by stretches (see all_reduce_by_stretches):
// below it, the second meeting costs more than the bytes it saves.
constexpr std::size_t kStretchedAllReduceBytes = std::size_t{256} << 10;
constexpr std::size_t kStretchedBetweenTwoBytes = std::size_t{8} << 20;
// Below this size (of the result: what comes from the others) a device waiting for other
// processes receives their messages itself: a hand-off less matters most for small collectives,
// while large ones measured no faster so (a 1 MiB all-reduce between two processes,
// benchmarks/README.md).
constexpr std::size_t kPolledMeetingBytes = std::size_t{256} << 10;
// How long a device run on its host's thread waits at a meeting before it parks.
constexpr std::chrono::microseconds kMeetingWaitOnHost{1000};

// Whether every other process holding `members` shares memory with this one (`here`): their
// messages, of any size, then come as short notes, and a device polls for them as cheaply as for
// a small collective's.
bool shares_memory_with_all(const ProcessTransport* transport, const std::vector<int>& members,
                            int per_process, int here) {
  if (!transport) return false;
  return std::ranges::all_of(member_processes(members, per_process), [&](int process) {
    return process == here || transport->shares_memory_with(process);
  });
}

// A buffer for the result of the collective `run` stopped at: one the run released, as its
// memory plan counts on, or a new one.
IntrusivePtr<DeviceMemory> collective_result(Backend& backend, int device, ProgramRun& run,
                                             std::size_t bytes) {
  if (IntrusivePtr<DeviceMemory> pooled = run.collective_result_buffer()) return pooled;
  return backend.allocate(device, bytes);
}

std::string format_collective_tag(const Executable& program, const KernelCall& call) {
  const BufferDesc& in = program.slots[call.inputs.at(0)];
  const BufferDesc& out = program.slots[call.output];
  return fmt::format("{}{} -> {}{}", dtype_name(in.dtype), in.shape.to_string(),
                     dtype_name(out.dtype), out.shape.to_string());
}

constexpr std::string_view kReducedMeeting = " (reduced)";

// The error of the first member that came failed, or null.
std::exception_ptr failure_among(const Gathered& all, const KernelCall& call,
                                 const std::string& tag) {
  for (const std::shared_ptr<const void>& each : *all) {
    const auto& contribution = *static_cast<const CollectiveContribution*>(each.get());
    if (!contribution.failure) continue;
    return std::make_exception_ptr(CollectiveError(fmt::format(
        "{} ({}): replica {} failed before it could take part: {}", kernel_name(call.kernel), tag,
        contribution.from, exception_text(contribution.failure))));
  }
  return nullptr;
}

// Copies each other process's folded stretch of an all-reduce by stretches, as its first member
// in `done` sent it, into `result`; the error when one sent a stretch of the wrong length.
std::exception_ptr take_other_stretches(const std::vector<std::shared_ptr<const void>>& done,
                                        const KernelCall& call, const std::string& tag,
                                        const std::vector<int>& members,
                                        const std::vector<int>& owners, int me, int per_process,
                                        int64_t n, std::size_t element, DeviceMemory& result) {
  for (std::size_t k = 0; k < owners.size(); ++k) {
    if (owners[k] == me) continue;
    const auto from =
        std::ranges::find_if(members, [&](int m) { return m / per_process == owners[k]; });
    const auto& c = *static_cast<const CollectiveContribution*>(
        done[static_cast<std::size_t>(from - members.begin())].get());
    const auto [first, last] =
        stretch(n, static_cast<int64_t>(k), static_cast<int64_t>(owners.size()));
    const std::size_t length = static_cast<std::size_t>(last - first) * element;
    if (c.operand_bytes != length) {
      return std::make_exception_ptr(CollectiveError(
          fmt::format("{} ({}): replica {} sent {} bytes of its stretch where {} were due",
                      kernel_name(call.kernel), tag, c.from, c.operand_bytes, length)));
    }
    if (length > 0) {
      std::memcpy(
          static_cast<std::byte*>(result.data()) + static_cast<std::size_t>(first) * element,
          c.operand->data(), length);
    }
  }
  return nullptr;
}

}  // namespace

Arrive DeviceActor::arrival(const ExecuteRequest& request, const KernelCall& call,
                            std::vector<int> members, std::string tag,
                            std::shared_ptr<const CollectiveContribution> contribution) const {
  return Arrive{kernel_name(call.kernel),
                request.replica_group,
                request.replica,
                std::move(tag),
                std::move(members),
                std::move(contribution),
                &typeid(CollectiveContribution),
                request.collective_timeout,
                Channel::kDevice,
                &kContributionCodec};
}

template <class Then>
void DeviceActor::when_met(Future<Gathered> met, Awaits awaits, Then then) {
  // The other members are usually about to come: waiting for them here, giving the core away
  // meanwhile, costs less than parking the device and waking it again. Waiting for small
  // messages of other processes, the device receives them itself; for others, the transport's
  // thread keeps watching while the device waits (it rests while nothing here expects any).
  ProcessTransport* transport = awaits == Awaits::kLocal ? nullptr : points_->transport();
  // On its host's thread (a short step, ReplicaHost::sync_device), parking would hand the rest
  // of the step to the device's worker and leave the host to wait for it: between two processes
  // of a 4 KiB all_reduce, 20-40% of meetings outlasted the usual wait, and each took the next
  // steps off the host's thread too. So the host waits longer, and also where devices do not
  // spin (more processes than cores: yielding, it lets the others' hosts come; 4 processes on 2
  // cores, 30-37 -> 12-13 us; benchmarks/README.md).
  const std::chrono::microseconds spin =
      on_senders_thread() ? std::max(meeting_spin_, kMeetingWaitOnHost) : meeting_spin_;
  if (!met.ready() && spin.count() > 0) {
    const bool polls = transport && awaits == Awaits::kProcessesPolled;
    if (polls) {
      transport->begin_polling();
    } else if (transport) {
      transport->begin_waiting();
    }
    const auto start = std::chrono::steady_clock::now();
    while (!met.ready() && std::chrono::steady_clock::now() - start < spin) {
      if (!polls || !transport->progress()) std::this_thread::yield();
    }
    if (polls) {
      transport->end_polling(!met.ready());
    } else if (transport) {
      transport->end_waiting();
    }
  }
  if (met.ready()) return then(met.state()->take(), true);
  // Parked until the members come: the transport's thread receives for this device meanwhile,
  // until the continuation runs (or is dropped with a stopping system).
  std::shared_ptr<ProcessTransport> watching;
  if (transport) {
    transport->begin_waiting();
    watching =
        std::shared_ptr<ProcessTransport>(transport, [](ProcessTransport* t) { t->end_waiting(); });
  }
  met.then_on(self().target(), [then = std::move(then),
                                watching = std::move(watching)](Result<Gathered> all) mutable {
    watching.reset();
    then(std::move(all), false);
  });
}

const std::string& DeviceActor::collective_tag(const Execution& execution, const KernelCall& call) {
  const Executable& program = *execution.ready_program;
  if (tagged_program_.get() != &program) {
    tagged_program_ = execution.ready_program;
    collective_tags_.assign(program.calls.size(), std::string());
  }
  const KernelCall* first = program.calls.data();
  if (std::less<>()(&call, first) || !std::less<>()(&call, first + program.calls.size())) {
    untagged_call_ = format_collective_tag(program, call);  // a call from elsewhere
    return untagged_call_;
  }
  std::string& tag = collective_tags_[static_cast<std::size_t>(&call - first)];
  if (tag.empty()) tag = format_collective_tag(program, call);
  return tag;
}

void DeviceActor::collective(Execution& execution, const KernelCall& call) {
  const ExecuteRequest& request = *execution.request;
  const Executable& program = *execution.ready_program;
  const BufferDesc& operand_desc = program.slots[call.inputs.at(0)];
  const BufferDesc& result_desc = program.slots[call.output];
  const std::vector<int> members = collective_members(call, request.replica);
  const auto position = std::ranges::find(members, request.replica) - members.begin();
  if (position == static_cast<std::ptrdiff_t>(members.size())) {
    throw CollectiveError(fmt::format("{} ({}): replica {} is in none of its groups",
                                      kernel_name(call.kernel), collective_tag(execution, call),
                                      request.replica));
  }
  ++execution.collectives_reached;
  const IntrusivePtr<DeviceMemory>& operand = execution.run->collective_operand();
  if (members.size() == 1) {
    IntrusivePtr<DeviceMemory> result =
        collective_result(backend_, ordinal_, *execution.run, result_desc.bytes());
    DeviceMemory* operands[] = {operand.get()};
    backend_.collective(ordinal_, call, operand_desc, result_desc, operands, 0, *result);
    execution.run->finish_collective(std::move(result));
    return;
  }
  const bool all_local = std::ranges::all_of(members, [&](int m) {
    return m >= request.first_local_replica &&
           m - request.first_local_replica < request.local_replicas;
  });
  if (!all_local && call.kernel == Kernel::kAllReduce &&
      result_desc.bytes() >= kStretchedAllReduceBytes) {
    // Between two processes both ways move the same bytes, and stretches only halve the fold:
    // worth their second meeting only for large operands.
    std::vector<int> processes = member_processes(members, request.local_replicas);
    if (processes.size() > 2 || result_desc.bytes() >= kStretchedBetweenTwoBytes) {
      return all_reduce_by_stretches(execution, call, members, std::move(processes));
    }
  }
  auto contribution = std::make_shared<CollectiveContribution>();
  contribution->operand = operand;
  contribution->operand_bytes = operand_desc.bytes();
  contribution->from = request.replica;
  // A large all-reduce is split: its members share one result and each reduces a stretch of it,
  // then they meet again before reading it. Below kSharedAllReduceBytes, that second meeting
  // costs more than each member reducing the whole. Members in other processes share nothing.
  // Each member holds the result through a share of its own, counted on its device.
  const bool shares_result = all_local && call.kernel == Kernel::kAllReduce &&
                             result_desc.bytes() >= kSharedAllReduceBytes;
  if (shares_result && position == 0) {
    contribution->shared_result = backend_.allocate_shared(ordinal_, result_desc.bytes());
  }
  execution.at_collective = true;
  execution.waits_since = std::chrono::steady_clock::now();
  std::string tag = collective_tag(execution, call);  // the meeting's and the reply's
  Future<Gathered> met =
      points_->arrive(arrival(request, call, members, tag, std::move(contribution)));
  when_met(std::move(met),
           all_local ? Awaits::kLocal
           : result_desc.bytes() < kPolledMeetingBytes ||
                   shares_memory_with_all(points_->transport(), members, request.local_replicas,
                                          request.first_local_replica / request.local_replicas)
               ? Awaits::kProcessesPolled
               : Awaits::kProcesses,
           [this, held = IntrusivePtr<Execution>(&execution), &call, members,
            position = static_cast<int>(position), shares_result,
            tag = std::move(tag)](Result<Gathered> all, bool in_line) mutable {
             const Span waited{held->waits_since, std::chrono::steady_clock::now()};
             held->collective_ns += waited.ns();
             observers_.tell([&](ActorObserver& o) {
               o.collective_waited(*held->request, kernel_name(call.kernel), waited);
             });
             collect(std::move(held), call, members, position, shares_result, tag, std::move(all),
                     in_line);
           });
}

void DeviceActor::collect(IntrusivePtr<Execution> held, const KernelCall& call,
                          const std::vector<int>& members, int position, bool shares_result,
                          const std::string& tag, Result<Gathered> all, bool in_line) {
  Execution& execution = *held;
  const Executable& program = *execution.ready_program;
  if (!all.ok()) return resume_after_collective(execution, all.error(), nullptr, in_line);
  if (std::exception_ptr failed = failure_among(all.value(), call, tag)) {
    return resume_after_collective(execution, failed, nullptr, in_line);
  }
  // From here on the members meet again after reducing (a shared result): a failure on the way
  // must still come to that meeting.
  execution.reduced_meeting_due = shares_result;
  std::vector<DeviceMemory*> operands;
  for (const std::shared_ptr<const void>& each : *all.value()) {
    operands.push_back(static_cast<const CollectiveContribution*>(each.get())->operand.get());
  }
  IntrusivePtr<DeviceMemory> result;
  try {
    result = shares_result ? backend_.share(ordinal_, static_cast<const CollectiveContribution*>(
                                                          all.value()->front().get())
                                                          ->shared_result)
                           : collective_result(backend_, ordinal_, *execution.run,
                                               program.slots[call.output].bytes());
    const BufferDesc& operand_desc = program.slots[call.inputs.at(0)];
    const BufferDesc& result_desc = program.slots[call.output];
    if (call.kernel == Kernel::kAllReduce && !shares_result) {
      // Every stretch, as each member would compute it: the same bits on every member.
      for (int p = 0; p < static_cast<int>(members.size()); ++p) {
        backend_.collective(ordinal_, call, operand_desc, result_desc, operands, p, *result);
      }
    } else {
      backend_.collective(ordinal_, call, operand_desc, result_desc, operands, position, *result);
    }
  } catch (...) {
    return resume_after_collective(execution, std::current_exception(), nullptr, in_line);
  }
  // Done with the other members' operands (each goes once every member is done with it), before
  // the run goes on from here.
  operands.clear();
  all = Result<Gathered>(Gathered{});
  if (!shares_result)
    return resume_after_collective(execution, nullptr, std::move(result), in_line);
  // Every member has written its stretch of the shared result once all have met again.
  auto written = std::make_shared<CollectiveContribution>();
  written->from = execution.request->replica;
  execution.reduced_meeting_due = false;
  execution.waits_since = std::chrono::steady_clock::now();
  when_met(points_->arrive(arrival(*execution.request, call, members,
                                   tag + std::string(kReducedMeeting), std::move(written))),
           Awaits::kLocal,
           [this, held = std::move(held), &call, tag, result = std::move(result),
            first_in_line = in_line](Result<Gathered> done, bool in_line) mutable {
             Execution& execution = *held;
             execution.collective_ns += elapsed_ns(execution.waits_since);
             resume_after_collective(
                 execution, done.ok() ? failure_among(done.value(), call, tag) : done.error(),
                 std::move(result), first_in_line && in_line);
           });
}

// An all-reduce whose members span processes, as MPI's reduce-scatter then all-gather, with the
// bits of a fold in global ordinal order: the members' processes split the elements into
// stretches, one per process; at the first meeting each process gets every member's part of its
// own stretch and folds it over the members in group order (as the whole fold would, element by
// element), and at the second meeting the folded stretches go to every process. Each process
// moves about what MPI's ring moves, instead of every member's whole operand.
void DeviceActor::all_reduce_by_stretches(Execution& execution, const KernelCall& call,
                                          const std::vector<int>& members,
                                          std::vector<int> owners) {
  const ExecuteRequest& request = *execution.request;
  const Executable& program = *execution.ready_program;
  const BufferDesc& operand_desc = program.slots[call.inputs.at(0)];
  const int me = request.first_local_replica / request.local_replicas;
  auto contribution = std::make_shared<CollectiveContribution>();
  contribution->operand = execution.run->collective_operand();
  contribution->operand_bytes = operand_desc.bytes();
  contribution->from = request.replica;
  contribution->stretch_owners = owners;
  contribution->element_bytes = dtype_size(operand_desc.dtype);
  execution.at_collective = true;
  execution.waits_since = std::chrono::steady_clock::now();
  const std::string tag = collective_tag(execution, call);
  when_met(
      points_->arrive(arrival(request, call, members, tag, std::move(contribution))),
      Awaits::kProcesses,
      [this, held = IntrusivePtr<Execution>(&execution), &call, members, owners, me, tag](
          Result<Gathered> all, bool first_in_line) mutable {
        Execution& execution = *held;
        const ExecuteRequest& request = *execution.request;
        execution.collective_ns += elapsed_ns(execution.waits_since);
        std::exception_ptr failed = all.ok() ? failure_among(all.value(), call, tag) : all.error();
        if (failed) return resume_after_collective(execution, failed, nullptr, first_in_line);
        execution.reduced_meeting_due = true;
        const Executable& program = *execution.ready_program;
        const BufferDesc& operand_desc = program.slots[call.inputs.at(0)];
        const std::size_t element = dtype_size(operand_desc.dtype);
        const int64_t n = operand_desc.shape.numel();
        const auto mine = std::ranges::find(owners, me) - owners.begin();
        const auto [first, last] = stretch(n, mine, static_cast<int64_t>(owners.size()));
        const std::size_t offset = static_cast<std::size_t>(first) * element;
        const std::size_t length = static_cast<std::size_t>(last - first) * element;
        IntrusivePtr<DeviceMemory> result;
        try {
          result = fold_own_stretch(execution, call, *all.value(), first, last);
        } catch (...) {
          return resume_after_collective(execution, std::current_exception(), nullptr,
                                         first_in_line);
        }
        all = Result<Gathered>(Gathered{});  // done with the members' parts
        // The folded stretches, to every process.
        auto folded = std::make_shared<CollectiveContribution>();
        folded->operand = make_intrusive<MemoryView>(result, offset, length);
        folded->operand_bytes = length;
        folded->from = request.replica;
        execution.reduced_meeting_due = false;
        execution.waits_since = std::chrono::steady_clock::now();
        when_met(points_->arrive(arrival(request, call, members, tag + std::string(kReducedMeeting),
                                         std::move(folded))),
                 Awaits::kProcesses,
                 [this, held = std::move(held), &call, members, owners, me, tag, n, element,
                  result = std::move(result),
                  first_in_line](Result<Gathered> done, bool in_line) mutable {
                   Execution& execution = *held;
                   execution.collective_ns += elapsed_ns(execution.waits_since);
                   std::exception_ptr failed =
                       done.ok() ? failure_among(done.value(), call, tag) : done.error();
                   if (!failed) {
                     failed = take_other_stretches(*done.value(), call, tag, members, owners, me,
                                                   execution.request->local_replicas, n, element,
                                                   *result);
                   }
                   resume_after_collective(execution, failed, std::move(result),
                                           first_in_line && in_line);
                 });
      });
}

// This process's stretch of an all-reduce by stretches, elements [first, last): the members' parts
// of it (`all`, in group order) folded into a fresh result, which it returns.
IntrusivePtr<DeviceMemory> DeviceActor::fold_own_stretch(
    Execution& execution, const KernelCall& call,
    const std::vector<std::shared_ptr<const void>>& all, int64_t first, int64_t last) {
  const Executable& program = *execution.ready_program;
  const BufferDesc& operand_desc = program.slots[call.inputs.at(0)];
  const std::size_t element = dtype_size(operand_desc.dtype);
  const std::size_t offset = static_cast<std::size_t>(first) * element;
  const std::size_t length = static_cast<std::size_t>(last - first) * element;
  IntrusivePtr<DeviceMemory> result =
      collective_result(backend_, ordinal_, *execution.run, program.slots[call.output].bytes());
  std::vector<IntrusivePtr<DeviceMemory>> parts;
  std::vector<DeviceMemory*> operands;
  for (const std::shared_ptr<const void>& each : all) {
    const auto& c = *static_cast<const CollectiveContribution*>(each.get());
    // A local member's whole operand, or the part another process sent.
    parts.push_back(c.stretch_owners.empty()
                        ? c.operand
                        : make_intrusive<MemoryView>(c.operand, offset, length));
    operands.push_back(parts.back().get());
  }
  const BufferDesc part_desc{operand_desc.dtype, Shape{last - first}};
  MemoryView out(result, offset, length);
  for (int p = 0; p < static_cast<int>(all.size()); ++p) {
    backend_.collective(ordinal_, call, part_desc, part_desc, operands, p, out);
  }
  return result;
}

void DeviceActor::resume_after_collective(Execution& execution, std::exception_ptr failed,
                                          IntrusivePtr<DeviceMemory> result, bool in_line) {
  if (failed) {
    finish(execution, failed);
  } else {
    execution.run->finish_collective(std::move(result));
    execution.at_collective = false;
  }
  // In line, the run goes on in the loop that reached the collective.
  if (!in_line) pump();
}

void DeviceActor::come_failed_to_collectives(const Execution& execution, std::exception_ptr error) {
  const ExecuteRequest& request = *execution.request;
  if (!execution.ready_program || request.replica_group == 0) return;
  const Executable& program = *execution.ready_program;
  auto failed = std::make_shared<CollectiveContribution>();
  failed->failure = std::move(error);
  failed->from = request.replica;
  int reached = 0;
  for (const KernelCall& call : program.calls) {
    if (!is_collective(call.kernel)) continue;
    const bool met = ++reached <= execution.collectives_reached;
    if (met && !(reached == execution.collectives_reached && execution.reduced_meeting_due))
      continue;
    try {
      std::vector<int> members = collective_members(call, request.replica);
      if (members.size() <= 1 || std::ranges::find(members, request.replica) == members.end()) {
        continue;
      }
      std::string tag = format_collective_tag(program, call);
      if (met) tag += kReducedMeeting;  // the meeting after a shared all-reduce
      (void)points_->arrive(arrival(request, call, std::move(members), std::move(tag), failed));
    } catch (const std::exception& e) {
      AXLE_LOG(ERROR, "device {}: could not tell the other replicas of a failed step: {}", ordinal_,
               e.what());
    }
  }
}

}  // namespace axle
