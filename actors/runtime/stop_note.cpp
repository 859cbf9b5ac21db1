// actors: the line a process prints when mpirun stops it, saying what it was waiting for.
#include "axle/actors/runtime/stop_note.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace axle {
namespace {

// What the process waits for, for the SIGTERM handler: two buffers, the one `g_note_current`
// names is complete; the other is the one written next.
constexpr std::size_t kNoteSize = 1024;
char g_notes[2][kNoteSize];
std::size_t g_note_sizes[2];
std::atomic<int> g_note_current{0};
int g_rank_for_note = 0;
std::atomic<bool> g_note_armed{false};  // say_waiting_note_on_sigterm ran (a job of processes)
struct sigaction g_previous_sigterm {};

void write_all(const char* text, std::size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, size);
    if (written <= 0) return;
    text += written;
    size -= static_cast<std::size_t>(written);
  }
}

// "<head> while <the note>\n", or "<head>\n" when the process waits for nothing.
void say(const char* head, std::size_t size) {
  write_all(head, size);
  const int current = g_note_current.load(std::memory_order_acquire);
  if (g_note_sizes[current] > 0) {
    write_all(" while ", 7);
    write_all(g_notes[current], g_note_sizes[current]);
  }
  write_all("\n", 1);
}

// mpirun stops the other processes when one dies: say what this one was waiting for, then stop
// as the signal would have.
void on_sigterm(int signal) {
  char head[96];
  const int n = std::snprintf(head, sizeof head,
                              "axle: process %d was stopped by mpirun (a process of the job "
                              "ended)",
                              g_rank_for_note);
  say(head, n > 0 ? static_cast<std::size_t>(n) : 0);
  ::sigaction(SIGTERM, &g_previous_sigterm, nullptr);
  if (g_previous_sigterm.sa_handler == SIG_IGN) return;
  if (g_previous_sigterm.sa_handler == SIG_DFL) {
    ::raise(signal);
  } else {
    g_previous_sigterm.sa_handler(signal);
  }
}

}  // namespace

void note_waiting(std::string_view what) noexcept {
  const int next = 1 - g_note_current.load(std::memory_order_relaxed);
  const std::size_t size = std::min(what.size(), kNoteSize);
  if (size > 0) std::memcpy(g_notes[next], what.data(), size);
  g_note_sizes[next] = size;
  g_note_current.store(next, std::memory_order_release);
}

std::string waiting_note() {
  const int current = g_note_current.load(std::memory_order_acquire);
  return {g_notes[current], g_note_sizes[current]};
}

void say_sigterm_note() noexcept {
  if (!g_note_armed.load(std::memory_order_acquire)) return;
  char head[160];
  const int n = std::snprintf(head, sizeof head,
                              "axle: process %d got SIGTERM (a preemption, or mpirun stopping the "
                              "job because a process of it ended)",
                              g_rank_for_note);
  say(head, n > 0 ? static_cast<std::size_t>(n) : 0);
}

void say_waiting_note_on_sigterm(int process) {
  g_rank_for_note = process;
  g_note_armed.store(true, std::memory_order_release);
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, &g_previous_sigterm);
}

}  // namespace axle
