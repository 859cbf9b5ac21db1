// actors/runtime: the MPI loop of ProcessTransport (process_transport.h): its state, run by the
// transport's thread (mpi_loop.cpp). Private to actors/runtime: it includes <mpi.h>, which
// nothing else here does.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "axle/actors/runtime/message_bytes.h"
#include "axle/actors/runtime/process_placement.h"
#include "axle/actors/runtime/shared_window.h"

namespace axle {

struct MpiLoop {
  struct Outgoing {
    int to;
    ProcessMessage message;  // whole, or a head (blocks not empty)
    std::vector<MessageBlock> blocks;
    std::shared_ptr<const void> keep;  // the blocks' bytes
    bool shared = false;               // message is a note of a message in shared memory
  };
  struct Sending {
    MPI_Request request;
    ProcessMessage message;
    std::shared_ptr<const void> keep;
  };
  struct Receiving {
    MPI_Request request;
    std::shared_ptr<MessageBytes> buffer;  // the message, or its head
    int from;
    bool done = false;
    bool head = false;                    // buffer is a head: the blocks come after it
    bool shared = false;                  // buffer is a note of a message in shared memory
    std::shared_ptr<MessageBytes> whole;  // a head's message, once its blocks are on the way
    std::vector<MPI_Request> blocks;
  };

  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Outgoing> outgoing;  // under mutex
  bool stopping = false;           // under mutex
  ProcessReceiver receiver;        // under mutex
  bool delivering = false;         // under mutex: a message is in the receiver's hands
  std::condition_variable delivered;
  std::deque<std::pair<int, ProcessMessage>> held;  // arrived while no receiver was set
  std::atomic<bool> has_work{false};                // outgoing or posted has sends
  std::atomic<int> pollers{0};  // threads polling for themselves (begin_polling)
  // When a poller last got what it waited for (steady_clock ticks): while threads keep
  // polling for themselves, this one need not spin between their waits.
  std::atomic<int64_t> polled_at{0};
  std::atomic<int> waiters{0};     // threads waiting without polling (begin_waiting)
  bool resting = false;            // under mutex: the thread rests while nothing is expected
  std::atomic<uint64_t> looks{0};  // rounds of polling by this thread
  // MPI_THREAD_MULTIPLE: senders post their own sends.
  bool direct = false;
  std::vector<Sending> posted;  // under mutex: posted by senders, for this thread to test

  // The memory the processes of this host share (an MPI shared window; shared_window.h): large
  // messages to the others go through it. Without it (one process on the host,
  // AXLE_SHARED_MEMORY_MB=0, a window MPI could not make) every message goes by MPI's sends.
  MPI_Win window = MPI_WIN_NULL;
  SharedWindow shared;

  ProcessPlacement placement;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm block_comm = MPI_COMM_NULL;
  // How long a process at its end waits for the others to end too (the collective timeout).
  std::chrono::nanoseconds exit_wait{0};
  std::thread thread;

  // Held by whichever thread calls into MPI (a sender takes it with try_lock): one at a time,
  // so that MPI's own locks are never contended. With fewer cores than runnable threads, a thread
  // preempted inside MPI holding them stalls the others.
  std::mutex mpi_mutex;
  std::deque<Sending> sending;      // the transport thread's own
  std::deque<Receiving> receiving;  // the transport thread's own
  bool finished = false;            // under mpi_mutex: MPI is going away

  void start(std::promise<ProcessPlacement>& started);
  // Makes the window of memory this host's processes share, of `wanted` bytes here (fewer when
  // /dev/shm has less room); leaves `shared` empty when any of them could not.
  void open_shared_memory(MPI_Comm host_comm, std::size_t wanted);
  void run();
  // One round of polling; the caller holds mpi_mutex.
  bool poll();
  // Whether threads poll for themselves now (and none waits without polling): this thread rests.
  [[nodiscard]] bool rests_while_polled() const;
  // Wakes this thread from its rest after a change to what rests_while_polled() reads. Taking
  // `mutex` first (the thread checks under it) means the thread is either past its check or
  // already waiting, so the wake is never lost.
  void wake_thread();
  bool post_sends();
  // Posts `out`'s sends (MPI_Isend) onto `to_test`; false when MPI refused them.
  bool post(Outgoing& out, std::vector<Sending>& to_test);
  // A head has come: its blocks are received into the whole message.
  void receive_blocks(Receiving& r);
  bool test_sends();
  bool match_arrivals();
  bool deliver_arrivals();
  void deliver(int from, ProcessMessage message);
  void finish();
};

}  // namespace axle
