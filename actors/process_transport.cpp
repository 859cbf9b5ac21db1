// actors: the transport between the job's processes, on MPI. One thread calls into MPI: it starts
// MPI, posts the sends other threads hand it (MPI_Isend), matches whatever arrives (MPI_Improbe,
// MPI_Imrecv), tests both for completion and hands arrived messages to the receiver in the order
// they were matched. Idle, it spins briefly and then sleeps in short steps, so a message is
// picked up within about 100 µs even when nothing here expects one.
#include "actors/process_transport.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "engine/config.h"
#include "engine/log.h"

namespace axle {
namespace {

constexpr int kTag = 7;  // every message of the transport; they say themselves what they are

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

// What the process waits for, for the SIGTERM handler: two buffers, the one `g_note_current`
// names is complete; the other is the one written next.
constexpr std::size_t kNoteSize = 1024;
char g_notes[2][kNoteSize];
std::size_t g_note_sizes[2];
std::atomic<int> g_note_current{0};
int g_rank_for_note = 0;
struct sigaction g_previous_sigterm {};

void write_all(const char* text, std::size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, size);
    if (written <= 0) return;
    text += written;
    size -= static_cast<std::size_t>(written);
  }
}

// mpirun stops the other processes when one dies: say what this one was waiting for, then stop
// as the signal would have.
void on_sigterm(int signal) {
  char head[96];
  const int n = std::snprintf(head, sizeof head,
                              "axle: process %d was stopped by mpirun (a process of the job "
                              "ended)",
                              g_rank_for_note);
  write_all(head, n > 0 ? static_cast<std::size_t>(n) : 0);
  const int current = g_note_current.load(std::memory_order_acquire);
  if (g_note_sizes[current] > 0) {
    write_all(" while ", 7);
    write_all(g_notes[current], g_note_sizes[current]);
  }
  write_all("\n", 1);
  ::sigaction(SIGTERM, &g_previous_sigterm, nullptr);
  if (g_previous_sigterm.sa_handler == SIG_IGN) return;
  if (g_previous_sigterm.sa_handler == SIG_DFL) {
    ::raise(signal);
  } else {
    g_previous_sigterm.sa_handler(signal);
  }
}

}  // namespace

void ProcessTransport::note_waiting(std::string_view what) noexcept {
  const int next = 1 - g_note_current.load(std::memory_order_relaxed);
  const std::size_t size = std::min(what.size(), kNoteSize);
  if (size > 0) std::memcpy(g_notes[next], what.data(), size);
  g_note_sizes[next] = size;
  g_note_current.store(next, std::memory_order_release);
}

// Large received buffers, kept for the next messages of their size.
constexpr std::size_t kPooledBytes = std::size_t{64} << 10;
// Enough for every message of an all-reduce by stretches among a few processes to be in flight at
// once (each process sends and receives one per other process at each of its two meetings).
constexpr std::size_t kPoolBuffers = 16;
constexpr std::size_t kPoolBytes = std::size_t{512} << 20;
struct BufferPool {
  std::mutex mutex;
  std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> free;  // buffer, capacity
  std::size_t bytes = 0;  // the free buffers' capacities
};
BufferPool& buffer_pool() {
  static auto* pool = new BufferPool;  // never destroyed: buffers may come back at exit
  return *pool;
}

std::shared_ptr<MessageBytes> MessageBytes::make(std::size_t size) {
  auto message = std::make_shared<MessageBytes>();
  if (size >= kPooledBytes) {
    BufferPool& pool = buffer_pool();
    std::lock_guard lock(pool.mutex);
    // A buffer at least this large, but not wastefully so.
    auto fits = std::ranges::find_if(pool.free, [&](const auto& entry) {
      return entry.second >= size && entry.second <= 2 * size;
    });
    if (fits != pool.free.end()) {
      message->raw_ = std::move(fits->first);
      message->capacity_ = fits->second;
      pool.bytes -= fits->second;
      pool.free.erase(fits);
    }
  }
  if (!message->raw_) {
    message->raw_ = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(size, 1));
    message->capacity_ = size;
  }
  message->data_ = message->raw_.get();
  message->size_ = size;
  return message;
}

std::shared_ptr<const MessageBytes> MessageBytes::of(std::vector<std::byte> bytes) {
  auto message = std::make_shared<MessageBytes>();
  message->owned_ = std::move(bytes);
  message->data_ = message->owned_.data();
  message->size_ = message->owned_.size();
  return message;
}

MessageBytes::~MessageBytes() {
  if (!raw_ || capacity_ < kPooledBytes) return;
  BufferPool& pool = buffer_pool();
  std::lock_guard lock(pool.mutex);
  if (pool.free.size() < kPoolBuffers && pool.bytes + capacity_ <= kPoolBytes) {
    pool.bytes += capacity_;
    pool.free.emplace_back(std::move(raw_), capacity_);
  }
}

struct ProcessTransport::State {
  struct Outgoing {
    int to;
    ProcessMessage message;
  };
  struct Sending {
    MPI_Request request;
    ProcessMessage message;
  };
  struct Receiving {
    MPI_Request request;
    std::shared_ptr<MessageBytes> buffer;
    int from;
    bool done = false;
  };

  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Outgoing> outgoing;  // under mutex
  bool stopping = false;           // under mutex
  Receiver receiver;               // under mutex
  bool delivering = false;         // under mutex: a message is in the receiver's hands
  std::condition_variable delivered;
  std::deque<std::pair<int, ProcessMessage>> held;  // arrived while no receiver was set
  std::atomic<bool> has_work{false};

  ProcessPlacement placement;
  MPI_Comm comm = MPI_COMM_NULL;
  // How long a process at its end waits for the others to end too (the collective timeout).
  std::chrono::nanoseconds exit_wait{0};
  std::thread thread;

  // The transport thread's own.
  std::deque<Sending> sending;
  std::deque<Receiving> receiving;

  void start(std::promise<ProcessPlacement>& started);
  void run();
  bool post_sends();
  bool test_sends();
  bool match_arrivals();
  bool deliver_arrivals();
  void deliver(int from, ProcessMessage message);
  void finish();
};

void ProcessTransport::State::start(std::promise<ProcessPlacement>& started) {
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
    // Errors come back as codes, to be reported with what was being done.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    ProcessPlacement p;
    MPI_Comm_rank(comm, &p.index);
    MPI_Comm_size(comm, &p.count);
    MPI_Comm host_comm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, p.index, MPI_INFO_NULL, &host_comm),
              "MPI_Comm_split_type");
    MPI_Comm_rank(host_comm, &p.local_index);
    MPI_Comm_size(host_comm, &p.local_count);
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
    g_rank_for_note = p.index;
    struct sigaction action {};
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, &g_previous_sigterm);
    started.set_value(p);
  } catch (...) {
    started.set_exception(std::current_exception());
    return;
  }
  run();
}

bool ProcessTransport::State::post_sends() {
  std::vector<Outgoing> batch;
  {
    std::lock_guard lock(mutex);
    batch.swap(outgoing);
    has_work.store(false, std::memory_order_relaxed);
  }
  for (Outgoing& each : batch) {
    Sending s{MPI_REQUEST_NULL, std::move(each.message)};
    const int code = MPI_Isend(const_cast<std::byte*>(s.message->data()),
                               static_cast<int>(s.message->size()), MPI_BYTE,
                               each.to, kTag, comm, &s.request);
    if (code != MPI_SUCCESS) {
      AXLE_LOG(ERROR, "process {}: sending {} bytes to process {} failed: {}", placement.index,
               s.message->size(), each.to, mpi_error_text(code));
      continue;
    }
    sending.push_back(std::move(s));
  }
  return !batch.empty();
}

bool ProcessTransport::State::test_sends() {
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

bool ProcessTransport::State::match_arrivals() {
  bool progressed = false;
  while (true) {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(MPI_ANY_SOURCE, kTag, comm, &found, &message, &status);
    if (!found) return progressed;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    Receiving r{MPI_REQUEST_NULL,
                MessageBytes::make(static_cast<std::size_t>(count)),
                status.MPI_SOURCE};
    MPI_Imrecv(r.buffer->data(), count, MPI_BYTE, &message, &r.request);
    receiving.push_back(std::move(r));
    progressed = true;
  }
}

bool ProcessTransport::State::deliver_arrivals() {
  bool progressed = false;
  for (Receiving& r : receiving) {
    if (r.done) continue;
    int done = 0;
    MPI_Test(&r.request, &done, MPI_STATUS_IGNORE);
    r.done = done != 0;
  }
  // In the order they were matched, which is each sender's order.
  while (!receiving.empty() && receiving.front().done) {
    Receiving r = std::move(receiving.front());
    receiving.pop_front();
    deliver(r.from, std::move(r.buffer));
    progressed = true;
  }
  return progressed;
}

void ProcessTransport::State::deliver(int from, ProcessMessage message) {
  Receiver to;
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
  {
    std::lock_guard lock(mutex);
    delivering = false;
  }
  delivered.notify_all();
}

void ProcessTransport::State::run() {
  using Clock = std::chrono::steady_clock;
  auto idle_since = Clock::now();
  while (true) {
    bool progressed = false;
    if (has_work.load(std::memory_order_relaxed)) progressed |= post_sends();
    if (!sending.empty()) progressed |= test_sends();
    progressed |= match_arrivals();
    if (!receiving.empty()) progressed |= deliver_arrivals();
    if (progressed) {
      idle_since = Clock::now();
      continue;
    }
    const auto idle = Clock::now() - idle_since;
    std::unique_lock lock(mutex);
    if (stopping && outgoing.empty()) {
      lock.unlock();
      return finish();
    }
    if (!outgoing.empty()) continue;
    if (idle < std::chrono::microseconds(300)) {
      lock.unlock();
      std::this_thread::yield();
    } else {
      // Sends wake it at once; arrivals are looked for again after the pause.
      wake.wait_for(lock, std::chrono::microseconds(50));
    }
  }
}

void ProcessTransport::State::finish() {
  // What was sent is delivered before MPI goes, for as long as the others take part.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((!sending.empty() || !receiving.empty()) && std::chrono::steady_clock::now() < deadline) {
    test_sends();
    match_arrivals();
    deliver_arrivals();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
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
  MPI_Comm_free(&comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

ProcessTransport::ProcessTransport(std::unique_ptr<State> state) : state_(std::move(state)) {}
ProcessTransport::~ProcessTransport() = default;

namespace {

std::once_flag g_started;
ProcessTransport* g_transport = nullptr;
std::exception_ptr g_start_error;

}  // namespace

ProcessTransport* ProcessTransport::get() {
  std::call_once(g_started, [] {
    if (!config::read_process_settings().launched_by_mpi) return;
    auto state = std::make_unique<State>();
    state->exit_wait = config::read_collective_settings().timeout;
    std::promise<ProcessPlacement> started;
    std::future<ProcessPlacement> placement = started.get_future();
    State* s = state.get();
    s->thread = std::thread([s, &started] { s->start(started); });
    try {
      placement.get();
    } catch (...) {
      g_start_error = std::current_exception();
      s->thread.join();
      return;
    }
    // Never destroyed: actors may still hold it while the process exits. Its thread ends at
    // exit, after delivering what is in flight, and finalises MPI.
    g_transport = new ProcessTransport(std::move(state));
    std::atexit([] {
      State& s = *g_transport->state_;
      {
        std::lock_guard lock(s.mutex);
        s.stopping = true;
      }
      s.wake.notify_one();
      if (s.thread.joinable()) s.thread.join();
    });
  });
  if (g_start_error) std::rethrow_exception(g_start_error);
  return g_transport;
}

ProcessPlacement ProcessTransport::placement() {
  ProcessTransport* transport = get();
  return transport ? transport->state_->placement : ProcessPlacement{};
}

void ProcessTransport::send(int to, ProcessMessage message) {
  if (to == state_->placement.index || to < 0 || to >= state_->placement.count) {
    throw std::invalid_argument(fmt::format("process {}: cannot send to process {} of {}",
                                            state_->placement.index, to, state_->placement.count));
  }
  if (message->size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::length_error(fmt::format(
        "process {}: a message of {} bytes to process {} is over MPI's 2 GiB count limit",
        state_->placement.index, message->size(), to));
  }
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopping) return;  // the process is exiting
    state_->outgoing.push_back({to, std::move(message)});
    state_->has_work.store(true, std::memory_order_relaxed);
  }
  state_->wake.notify_one();
}

void ProcessTransport::set_receiver(Receiver receiver) {
  std::deque<std::pair<int, ProcessMessage>> held;
  {
    std::unique_lock lock(state_->mutex);
    state_->receiver = receiver;
    if (receiver) {
      held.swap(state_->held);
    } else {
      // The last receiver has every message it was given once this returns (its actor then
      // handles them before it stops); later ones are held for the next.
      state_->delivered.wait(lock, [&] { return !state_->delivering; });
    }
  }
  // Held messages go first; the transport thread may deliver newer ones meanwhile, which the
  // receiver must accept in any order (the RendezvousActor does: its messages name their point).
  for (auto& [from, message] : held) receiver(from, std::move(message));
}

}  // namespace axle
