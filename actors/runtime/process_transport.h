// actors: the job's processes and the transport between them — MPI (Open MPI's mpirun launches
// the processes), driven by a thread of the transport's own. Where MPI allows calls from any
// thread (MPI_THREAD_MULTIPLE), a sender posts its own sends: a hand-off between threads less.
// A process not launched by mpirun is the whole job: get() is null and MPI is never initialised.
// Messages are byte buffers, self-describing (the RendezvousActor reads who and what they are
// for); the transport only moves them, in order from each sender.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "axle/actors/runtime/message_bytes.h"
#include "axle/actors/runtime/process_placement.h"

namespace axle {

struct MpiLoop;  // mpi_loop.h

class ProcessTransport {
 public:
  /// Receives every message another process sent to this one, on the transport's thread.
  using Receiver = ProcessReceiver;

  /// The job's transport, started (MPI_Init) on first use when the process was launched by
  /// mpirun; null otherwise. Throws std::runtime_error when MPI cannot start. It lives until the
  /// process exits, when its thread delivers what is still in flight and finalises MPI.
  [[nodiscard]] static ProcessTransport* get();

  /// This process's placement, or the one of a process that is the whole job.
  [[nodiscard]] static ProcessPlacement placement();

  /// Sends `message` to process `to` (not this one), without waiting. Sends to one process
  /// arrive in the order they were made.
  void send(int to, ProcessMessage message);
  /// Sends a message of `size` bytes: `blocks` (in ascending offsets) where they lie, and
  /// `rest`, the message's other bytes in order, around them. `keep` holds the blocks' bytes
  /// alive, and their owner leaves them unchanged, until the send completes. The receiver gets
  /// the whole message in one buffer, as from send(), in order with the sender's other messages.
  void send(int to, std::size_t size, std::span<const std::byte> rest,
            std::vector<MessageBlock> blocks, std::shared_ptr<const void> keep);

  /// One round of the transport's work on the calling thread (posting sends, completing them,
  /// receiving and delivering arrivals), unless another thread is at it; true when something
  /// moved. A thread about to wait for a message (a device at a meeting among processes) polls
  /// for it so, between begin_polling() and end_polling(): the message is delivered on the thread
  /// that waits for it, without a hand-off, and the transport's own thread rests meanwhile, so
  /// that the two do not compete for a core.
  bool progress();
  void begin_polling() noexcept;
  /// `wake`: the caller gives up waiting in line (it parks), so the transport's thread takes over
  /// at once; otherwise it looks in again within a millisecond.
  void end_polling(bool wake) noexcept;
  /// A thread that waits for other processes without polling (a replica at a rendezvous), between
  /// begin_waiting() and end_waiting(): the transport's thread keeps watching meanwhile, even
  /// while devices poll for themselves.
  void begin_waiting() noexcept;
  void end_waiting() noexcept;
  /// Whether messages to process `to` go through memory the two share (AXLE_SHARED_MEMORY_MB):
  /// a large one is then written once where `to` reads it, and `to` hears of it by a short note,
  /// so a thread waiting for it receives it by polling as cheaply as a small one.
  [[nodiscard]] bool shares_memory_with(int to) const noexcept;
  /// This process's part of the shared memory (0 without), the bytes of it messages to others
  /// still hold (not yet released by their receivers), and how many messages went through it.
  [[nodiscard]] std::size_t shared_memory_bytes() const noexcept;
  [[nodiscard]] std::size_t shared_memory_in_use() const;
  [[nodiscard]] uint64_t messages_through_shared_memory() const noexcept;
  /// Rounds of polling the transport's own thread has made: it makes them at a busy pace while
  /// a thread here waits for another process or messages are on the way, and about one a
  /// millisecond while nothing is expected.
  [[nodiscard]] uint64_t looks() const noexcept;
  /// Whether the transport's thread rests now: nothing here expects a message.
  [[nodiscard]] bool resting() const;

  /// Where messages go from now on; messages that arrived while none was set go to it first.
  /// An empty receiver holds them again.
  void set_receiver(Receiver receiver);

  ProcessTransport(const ProcessTransport&) = delete;
  ProcessTransport& operator=(const ProcessTransport&) = delete;

 private:
  explicit ProcessTransport(std::unique_ptr<MpiLoop> loop);
  void check_send(int to, std::size_t size) const;
  ~ProcessTransport();
  std::unique_ptr<MpiLoop> loop_;
};

}  // namespace axle
