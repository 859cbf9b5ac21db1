// actors/runtime: ProcessTransport, the transport between the job's processes: starting it once
// per process, checking and queueing sends (through the memory shared with a process of this host
// when there is such), and the waiting and polling a thread here announces. The MPI loop its
// thread runs is in mpi_loop.cpp.
#include "axle/actors/runtime/process_transport.h"
#include "axle/actors/runtime/collective_settings.h"

#include <fmt/format.h>
#include <mpi.h>

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

#include "axle/actors/runtime/mpi_loop.h"
#include "axle/actors/runtime/shared_window.h"
#include "axle/actors/runtime/stop_note.h"
#include "axle/engine/config.h"
#include "axle/engine/log.h"

namespace axle {

ProcessTransport::ProcessTransport(std::unique_ptr<MpiLoop> state) : loop_(std::move(state)) {}
ProcessTransport::~ProcessTransport() = default;

namespace {

std::once_flag g_started;
ProcessTransport* g_transport = nullptr;
std::exception_ptr g_start_error;

}  // namespace

ProcessTransport* ProcessTransport::get() {
  std::call_once(g_started, [] {
    if (!config::read_process_settings().launched_by_mpi) return;
    // A small collective's message is its operand and a head of about 180 bytes: 4 KiB operands
    // fit Open MPI's shared-memory eager sends (one hop, no rendezvous handshake) only from an
    // 8 KiB limit. Set before MPI starts, on the thread that reads settings; a limit the user set
    // stays.
    ::setenv("OMPI_MCA_btl_vader_eager_limit", "8192", /*overwrite=*/0);
    auto state = std::make_unique<MpiLoop>();
    state->exit_wait = config::read_collective_settings().timeout;
    std::promise<ProcessPlacement> started;
    std::future<ProcessPlacement> placement = started.get_future();
    MpiLoop* s = state.get();
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
      MpiLoop& s = *g_transport->loop_;
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
  return transport ? transport->loop_->placement : ProcessPlacement{};
}

void ProcessTransport::check_send(int to, std::size_t size) const {
  if (to == loop_->placement.index || to < 0 || to >= loop_->placement.count) {
    throw std::invalid_argument(fmt::format("process {}: cannot send to process {} of {}",
                                            loop_->placement.index, to, loop_->placement.count));
  }
  if (size > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::length_error(fmt::format(
        "process {}: a message of {} bytes to process {} is over MPI's 2 GiB count limit",
        loop_->placement.index, size, to));
  }
}

namespace {

void enqueue(MpiLoop& s, MpiLoop::Outgoing out) {
  {
    std::lock_guard lock(s.mutex);
    if (s.stopping) return;  // the process is exiting
    s.has_work.store(true, std::memory_order_relaxed);
    bool posted = false;
    if (s.direct && s.outgoing.empty()) {
      // Posted here, one hand-off less, unless another thread is in MPI; under the lock, so
      // sends to a process keep their order. Completion is tested on the transport's thread,
      // which need not wake for it unless it rests.
      std::unique_lock calling(s.mpi_mutex, std::try_to_lock);
      posted = calling && !s.finished;
      if (posted) (void)s.post(out, s.posted);
    }
    if (!posted) s.outgoing.push_back(std::move(out));
    if (posted && !s.resting) return;
  }
  s.wake.notify_one();
}

}  // namespace

void ProcessTransport::send(int to, ProcessMessage message) {
  check_send(to, message->size());
  enqueue(*loop_, MpiLoop::Outgoing{to, std::move(message), {}, nullptr});
}

void ProcessTransport::send(int to, std::size_t size, std::span<const std::byte> rest,
                            std::vector<MessageBlock> blocks, std::shared_ptr<const void> keep) {
  check_send(to, size);
  // Blocks in ascending order, not overlapping, and with the other bytes exactly `size`.
  std::size_t end = 0;    // of the last block
  std::size_t bytes = 0;  // of the blocks
  for (const MessageBlock& block : blocks) {
    if (block.offset < end) throw std::invalid_argument("message blocks overlap");
    end = block.offset + block.bytes.size();
    bytes += block.bytes.size();
  }
  if (end > size || rest.size() + bytes != size) {
    throw std::invalid_argument(
        fmt::format("process {}: a message of {} bytes to process {} has blocks and other bytes of "
                    "another size",
                    loop_->placement.index, size, to));
  }
  if (shares_memory_with(to)) {
    // The message, whole, where `to` reads it; the note goes in order with the other messages.
    if (ProcessMessage note = loop_->shared.write(size, rest, blocks)) {
      return enqueue(*loop_, MpiLoop::Outgoing{to, std::move(note), {}, nullptr, true});
    }
  }
  if (blocks.empty()) {
    auto whole = MessageBytes::make(rest.size());
    std::memcpy(whole->data(), rest.data(), rest.size());
    return enqueue(*loop_, MpiLoop::Outgoing{to, std::move(whole), {}, nullptr});
  }
  ProcessMessage head = encode_head(size, rest, blocks);
  enqueue(*loop_, MpiLoop::Outgoing{to, std::move(head), std::move(blocks), std::move(keep)});
}

bool ProcessTransport::progress() {
  MpiLoop& s = *loop_;
  std::unique_lock calling(s.mpi_mutex, std::try_to_lock);
  if (!calling || s.finished) return false;
  return s.poll();
}

bool ProcessTransport::shares_memory_with(int to) const noexcept {
  return loop_->shared.reaches(to);
}

std::size_t ProcessTransport::shared_memory_bytes() const noexcept { return loop_->shared.bytes(); }

std::size_t ProcessTransport::shared_memory_in_use() const { return loop_->shared.in_use(); }

uint64_t ProcessTransport::messages_through_shared_memory() const noexcept {
  return loop_->shared.messages();
}

uint64_t ProcessTransport::looks() const noexcept {
  return loop_->looks.load(std::memory_order_relaxed);
}

bool ProcessTransport::resting() const {
  const std::lock_guard lock(loop_->mutex);
  return loop_->resting;
}

void ProcessTransport::begin_polling() noexcept {
  loop_->pollers.fetch_add(1, std::memory_order_relaxed);
}

void ProcessTransport::begin_waiting() noexcept {
  loop_->waiters.fetch_add(1, std::memory_order_relaxed);
  loop_->wake_thread();
}

void ProcessTransport::end_waiting() noexcept {
  loop_->waiters.fetch_sub(1, std::memory_order_relaxed);
}

void ProcessTransport::end_polling(bool wake) noexcept {
  MpiLoop& s = *loop_;
  // A poller that parks leaves no recent poll behind, so the thread does not go back to resting.
  s.polled_at.store(wake ? 0 : std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
  if (s.pollers.fetch_sub(1, std::memory_order_relaxed) == 1 && wake) s.wake_thread();
}

void ProcessTransport::set_receiver(Receiver receiver) {
  std::deque<std::pair<int, ProcessMessage>> held;
  {
    std::unique_lock lock(loop_->mutex);
    loop_->receiver = receiver;
    if (receiver) {
      held.swap(loop_->held);
    } else {
      // The last receiver has every message it was given once this returns (its actor then
      // handles them before it stops); later ones are held for the next.
      loop_->delivered.wait(lock, [&] { return !loop_->delivering; });
    }
  }
  // Held messages go first; the transport thread may deliver newer ones meanwhile, which the
  // receiver must accept in any order (the RendezvousActor does: its messages name their point).
  for (auto& [from, message] : held) receiver(from, std::move(message));
}

}  // namespace axle
