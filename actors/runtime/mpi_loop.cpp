// actors/runtime: the MPI loop of ProcessTransport. Its thread starts MPI, matches whatever
// arrives (MPI_Improbe, MPI_Imrecv), tests sends and receives for completion and hands arrived
// messages to the receiver in the order they were matched. Idle while a thread here waits for
// another process (or sends and receives are on the way), it spins briefly and then sleeps in
// short steps, so a message is picked up within about 100 µs; while nothing is expected, it looks
// in once a millisecond, woken by a send or a waiter. With MPI_THREAD_MULTIPLE a sender posts its
// own MPI_Isend (under the transport's lock, so that sends to a process keep their order) when no
// other thread is in MPI: on a machine with fewer cores than runnable threads each hand-off
// between threads waits for the scheduler. Otherwise the transport's thread alone calls into MPI.
// Large blocks of a message can be sent from where they lie (send with blocks), as messages of
// their own after a head.
#include "axle/actors/runtime/mpi_loop.h"

#include <fmt/format.h>
#include <mpi.h>
#include <sys/statvfs.h>

#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "axle/actors/runtime/shared_window.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/actors/runtime/transport_settings.h"
#include "axle/engine/config.h"
#include "axle/engine/log.h"

namespace axle {
namespace {

constexpr int kTag = 7;  // every message of the transport; they say themselves what they are
// A message whose large blocks come apart (ProcessTransport::send with blocks): its head, on
// `comm` with the whole messages (so it keeps its place among them), holds the message's size,
// where its blocks go and its other bytes; the blocks follow on `block_comm`, in order.
constexpr int kHeadTag = 8;
// A message another process of this host wrote into the memory it shares with this one: the note
// says where (the offset of its header in the sender's part, and its size).
constexpr int kSharedTag = 9;
// While threads poll for themselves (a device at a meeting), how long the transport's thread
// rests between looks, and how long after a poller last got its message it keeps resting.
constexpr std::chrono::microseconds kRestWhilePolled{1000};
// While nothing here expects a message (no thread waits for another process, nothing is on the
// way), how long it rests between looks: watching at its busy pace meanwhile took a fifth of a
// training step's compute on a core it shares (benchmarks/README.md). What comes meanwhile waits
// in MPI until a thread here waits for it, which wakes this one (begin_waiting, a send).
constexpr std::chrono::microseconds kRestWhileIdle{1000};
// How long after it last moved something the thread keeps watching at its busy pace before it
// rests: collectives come in runs (a step's gradients), and a thread woken for each of them
// would come later than one still watching.
constexpr std::chrono::microseconds kWatchAfterWork{2000};

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("error {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) {
    throw std::runtime_error(fmt::format("MPI: {} failed: {}", what, mpi_error_text(code)));
  }
}

}  // namespace

void MpiLoop::start(std::promise<ProcessPlacement>& started) {
  try {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      // Only this thread calls into MPI; asking for more lets a program (a benchmark comparing
      // with raw MPI) call it from its own threads too, on communicators of its own.
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
    }
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    direct = provided == MPI_THREAD_MULTIPLE;
    // Errors come back as codes, to be reported with what was being done.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(comm, &block_comm), "MPI_Comm_dup");
    ProcessPlacement p;
    MPI_Comm_rank(comm, &p.index);
    MPI_Comm_size(comm, &p.count);
    MPI_Comm host_comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, p.index, MPI_INFO_NULL, &host_comm),
              "MPI_Comm_split_type");
    MPI_Comm_rank(host_comm, &p.local_index);
    MPI_Comm_size(host_comm, &p.local_count);
    placement.index = p.index;
    placement.count = p.count;
    if (p.local_count > 1) {
      open_shared_memory(host_comm, config::read_transport_settings().shared_memory_bytes);
    }
    // A host is known by its lowest rank; hosts are numbered in the order of those.
    int leader = p.index;
    check_mpi(MPI_Allreduce(&p.index, &leader, 1, MPI_INT, MPI_MIN, host_comm), "MPI_Allreduce");
    MPI_Comm_free(&host_comm);
    std::vector<int> leaders(static_cast<std::size_t>(p.count));
    check_mpi(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm),
              "MPI_Allgather");
    const std::set<int> hosts(leaders.begin(), leaders.end());
    p.host_count = static_cast<int>(hosts.size());
    p.host_index = static_cast<int>(std::distance(hosts.begin(), hosts.find(leader)));
    placement = p;
    say_waiting_note_on_sigterm(p.index);
    started.set_value(p);
  } catch (...) {
    started.set_exception(std::current_exception());
    return;
  }
  run();
}

void MpiLoop::open_shared_memory(MPI_Comm host_comm, std::size_t wanted) {
  int local_count = 1;
  MPI_Comm_size(host_comm, &local_count);
  // A window beyond what /dev/shm holds would fault (SIGBUS) once written past its room: each
  // process takes at most half its share of what is free.
  if (struct statvfs fs{}; ::statvfs("/dev/shm", &fs) == 0) {
    const auto free_bytes = static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize;
    wanted = std::min(wanted, free_bytes / (2 * static_cast<std::size_t>(local_count)));
  }
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each part on pages of its own
  void* base = nullptr;
  const int code =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(wanted), 1, info, host_comm, &base, &window);
  MPI_Info_free(&info);
  int made = code == MPI_SUCCESS ? 1 : 0;
  int all_made = 0;
  MPI_Allreduce(&made, &all_made, 1, MPI_INT, MPI_MIN, host_comm);
  if (!all_made) {
    if (made) MPI_Win_free(&window);
    window = MPI_WIN_NULL;
    AXLE_LOG(WARNING,
             "process {}: the processes of this host could not share memory ({}); their "
             "messages go through MPI's sends",
             placement.index, made ? "another process failed" : mpi_error_text(code));
    return;
  }
  // The host's processes by their rank in the job.
  MPI_Group host_group = MPI_GROUP_NULL;
  MPI_Group job_group = MPI_GROUP_NULL;
  MPI_Comm_group(host_comm, &host_group);
  MPI_Comm_group(comm, &job_group);
  std::vector<int> host_ranks(static_cast<std::size_t>(local_count));
  std::vector<int> job_ranks(host_ranks.size());
  std::iota(host_ranks.begin(), host_ranks.end(), 0);
  MPI_Group_translate_ranks(host_group, local_count, host_ranks.data(), job_group,
                            job_ranks.data());
  MPI_Group_free(&host_group);
  MPI_Group_free(&job_group);
  std::vector<std::pair<std::byte*, std::size_t>> peers(static_cast<std::size_t>(placement.count),
                                                        {nullptr, 0});
  for (int i = 0; i < local_count; ++i) {
    const int rank = job_ranks[static_cast<std::size_t>(i)];
    if (rank == placement.index || rank == MPI_UNDEFINED) continue;
    MPI_Aint size = 0;
    int unit = 0;
    void* part = nullptr;
    if (MPI_Win_shared_query(window, i, &size, &unit, &part) != MPI_SUCCESS) continue;
    if (part && size > 0) {
      peers[static_cast<std::size_t>(rank)] = {static_cast<std::byte*>(part),
                                               static_cast<std::size_t>(size)};
    }
  }
  shared.attach(static_cast<std::byte*>(base), wanted, std::move(peers));
  allow_borrowed_releases(true);
}

bool MpiLoop::poll() {
  bool progressed = false;
  if (has_work.load(std::memory_order_relaxed)) progressed |= post_sends();
  if (!sending.empty()) progressed |= test_sends();
  progressed |= match_arrivals();
  if (!receiving.empty()) progressed |= deliver_arrivals();
  return progressed;
}

bool MpiLoop::post_sends() {
  std::vector<Outgoing> batch;
  std::vector<Sending> posted_here;
  {
    std::lock_guard lock(mutex);
    batch.swap(outgoing);
    posted_here.swap(posted);
    has_work.store(false, std::memory_order_relaxed);
  }
  for (Outgoing& each : batch) post(each, posted_here);
  for (Sending& s : posted_here) sending.push_back(std::move(s));
  return !batch.empty() || !posted_here.empty();
}

bool MpiLoop::post(Outgoing& out, std::vector<Sending>& to_test) {
  const auto isend = [&](const void* data, std::size_t size, int tag, MPI_Comm on,
                         MPI_Request* request) {
    const int code = MPI_Isend(const_cast<void*>(data), static_cast<int>(size), MPI_BYTE, out.to,
                               tag, on, request);
    if (code != MPI_SUCCESS) {
      AXLE_LOG(ERROR, "process {}: sending {} bytes to process {} failed: {}", placement.index,
               size, out.to, mpi_error_text(code));
    }
    return code == MPI_SUCCESS;
  };
  Sending s{MPI_REQUEST_NULL, std::move(out.message), nullptr};
  const int tag = out.shared ? kSharedTag : out.blocks.empty() ? kTag : kHeadTag;
  if (!isend(s.message->data(), s.message->size(), tag, comm, &s.request)) {
    return false;
  }
  to_test.push_back(std::move(s));
  for (const MessageBlock& block : out.blocks) {
    Sending b{MPI_REQUEST_NULL, nullptr, out.keep};
    // A block lost here leaves its receiver waiting for it: the collective's deadline ends that.
    if (!isend(block.bytes.data(), block.bytes.size(), kTag, block_comm, &b.request)) return false;
    to_test.push_back(std::move(b));
  }
  return true;
}

bool MpiLoop::test_sends() {
  bool progressed = false;
  for (auto it = sending.begin(); it != sending.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    if (done) {
      it = sending.erase(it);
      progressed = true;
    } else {
      ++it;
    }
  }
  return progressed;
}

bool MpiLoop::match_arrivals() {
  bool progressed = false;
  while (true) {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &found, &message, &status);
    if (!found) return progressed;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    Receiving r{MPI_REQUEST_NULL, MessageBytes::make(static_cast<std::size_t>(count)),
                status.MPI_SOURCE};
    r.head = status.MPI_TAG == kHeadTag;
    r.shared = status.MPI_TAG == kSharedTag;
    MPI_Imrecv(r.buffer->data(), count, MPI_BYTE, &message, &r.request);
    receiving.push_back(std::move(r));
    progressed = true;
  }
}

bool MpiLoop::deliver_arrivals() {
  bool progressed = false;
  bool head_waits = false;  // blocks are received in their heads' order, as they were sent
  for (Receiving& r : receiving) {
    if (r.done) continue;
    if (r.whole) {
      int done = 0;
      MPI_Testall(static_cast<int>(r.blocks.size()), r.blocks.data(), &done, MPI_STATUSES_IGNORE);
      r.done = done != 0;
      continue;
    }
    if (head_waits && r.head) continue;
    int done = 0;
    MPI_Test(&r.request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      head_waits |= r.head;
      continue;
    }
    if (r.shared) {
      try {
        r.buffer = shared.read(r.from, *r.buffer);
      } catch (const std::exception& e) {
        // Delivered as it came, for its reader to refuse.
        AXLE_LOG(ERROR, "process {}: a message from process {} could not be read: {}",
                 placement.index, r.from, e.what());
      }
    }
    if (!r.head) {
      r.done = true;
      continue;
    }
    try {
      receive_blocks(r);
    } catch (const std::exception& e) {
      AXLE_LOG(ERROR, "process {}: a message from process {} could not be read: {}",
               placement.index, r.from, e.what());
      r.whole = std::move(r.buffer);  // delivered as it came, for its reader to refuse
      r.blocks.clear();
      r.done = true;
    }
  }
  // In the order they were matched, which is each sender's order.
  while (!receiving.empty() && receiving.front().done) {
    Receiving r = std::move(receiving.front());
    receiving.pop_front();
    deliver(r.from, r.whole ? std::move(r.whole) : std::move(r.buffer));
    progressed = true;
  }
  return progressed;
}

void MpiLoop::receive_blocks(Receiving& r) {
  DecodedHead head = decode_head(*r.buffer);
  r.blocks.assign(head.blocks.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < head.blocks.size(); ++i) {
    const auto [offset, bytes] = head.blocks[i];
    MPI_Irecv(head.whole->data() + offset, static_cast<int>(bytes), MPI_BYTE, r.from, kTag,
              block_comm, &r.blocks[i]);
  }
  r.whole = std::move(head.whole);
  r.buffer.reset();
}

void MpiLoop::deliver(int from, ProcessMessage message) {
  ProcessReceiver to;
  {
    std::lock_guard lock(mutex);
    if (!receiver) {
      held.emplace_back(from, std::move(message));
      return;
    }
    to = receiver;
    delivering = true;
  }
  to(from, std::move(message));
  // Its copy of the receiver goes first: what the receiver holds (a stopping system's meeting
  // points, which hand their state to the next system's as they go) must be gone by the time
  // set_receiver({}) returns.
  to = nullptr;
  {
    std::lock_guard lock(mutex);
    delivering = false;
  }
  delivered.notify_all();
}

void MpiLoop::wake_thread() {
  { const std::lock_guard lock(mutex); }
  wake.notify_one();
}

bool MpiLoop::rests_while_polled() const {
  if (waiters.load(std::memory_order_relaxed) > 0) return false;
  if (pollers.load(std::memory_order_relaxed) > 0) return true;
  const auto polled = std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(polled_at.load(std::memory_order_relaxed)));
  return std::chrono::steady_clock::now() - polled < kRestWhilePolled;
}

void MpiLoop::run() {
  using Clock = std::chrono::steady_clock;
  auto idle_since = Clock::now();
  while (true) {
    bool progressed = false;
    bool in_flight = false;  // sends to complete or messages coming in
    {
      const std::lock_guard calling(mpi_mutex);
      progressed = poll();
      in_flight = !sending.empty() || !receiving.empty();
    }
    looks.fetch_add(1, std::memory_order_relaxed);
    if (progressed) {
      idle_since = Clock::now();
      // Threads polling for themselves are left the lock between looks.
      if (!rests_while_polled()) continue;
    }
    const auto idle = Clock::now() - idle_since;
    std::unique_lock lock(mutex);
    if (stopping && outgoing.empty()) {
      lock.unlock();
      return finish();
    }
    if (rests_while_polled()) {
      // Waiting threads poll for themselves (and post what is queued): this one only looks in
      // now and then, and leaves them the cores. Woken (a poller stopped waiting in line, or a
      // thread waits without polling), it watches again.
      if (wake.wait_for(lock, kRestWhilePolled) == std::cv_status::no_timeout) {
        idle_since = Clock::now();
      }
      continue;
    }
    if (!outgoing.empty()) continue;
    if (!in_flight && posted.empty() && waiters.load(std::memory_order_relaxed) == 0 &&
        idle >= kWatchAfterWork) {
      // Nothing here expects a message: look in now and then, woken by a send or a waiter.
      resting = true;
      const bool woken = wake.wait_for(lock, kRestWhileIdle) == std::cv_status::no_timeout;
      resting = false;
      if (woken) idle_since = Clock::now();
      continue;
    }
    if (idle < std::chrono::microseconds(300)) {
      lock.unlock();
      std::this_thread::yield();
    } else {
      // Sends wake it at once; arrivals are looked for again after the pause.
      wake.wait_for(lock, std::chrono::microseconds(50));
    }
  }
}

void MpiLoop::finish() {
  // What was sent is delivered before MPI goes, for as long as the others take part.
  std::unique_lock calling(mpi_mutex);
  post_sends();  // those posted by their senders, to be tested here
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((!sending.empty() || !receiving.empty()) && std::chrono::steady_clock::now() < deadline) {
    test_sends();
    match_arrivals();
    deliver_arrivals();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  finished = true;  // no other thread calls into MPI from here on
  // MPI_Finalize waits for every process. One that died never comes, so the others meet first
  // in a barrier they can stop waiting for.
  MPI_Request barrier = MPI_REQUEST_NULL;
  int met = 0;
  if (MPI_Ibarrier(comm, &barrier) == MPI_SUCCESS) {
    const auto give_up = std::chrono::steady_clock::now() + exit_wait;
    while (!met && std::chrono::steady_clock::now() < give_up) {
      MPI_Test(&barrier, &met, MPI_STATUS_IGNORE);
      if (!met) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (!met) {
    // The job is broken: ending it makes mpirun fail, even where it was told to keep going.
    AXLE_LOG(ERROR,
             "process {}: the job's other processes did not all reach the end within {:g} s; "
             "aborting the job",
             placement.index, std::chrono::duration<double>(exit_wait).count());
    std::fflush(nullptr);
    MPI_Abort(comm, 1);
    return;
  }
  if (window != MPI_WIN_NULL) {
    allow_borrowed_releases(false);
    MPI_Win_free(&window);
  }
  MPI_Comm_free(&block_comm);
  MPI_Comm_free(&comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace axle
