// actors: what a process of a job waits for from the others, kept for the line it prints when
// mpirun stops it (SIGTERM: another process of the job died or failed).
#pragma once

#include <string>
#include <string_view>

namespace axle {

/// Notes what this process waits for from the others; empty when it waits for nothing. Kept in
/// a fixed buffer, so the signal handler can print it safely.
void note_waiting(std::string_view what) noexcept;
/// The last note_waiting's text: what that line would say now.
[[nodiscard]] std::string waiting_note();

/// For a SIGTERM handler that does not stop the process (CheckpointManager's preemption): once
/// say_waiting_note_on_sigterm armed the note, prints "axle: process `process` got SIGTERM (a
/// preemption, or mpirun stopping the job because a process of it ended)", with " while <the
/// note>" when the process waits for the others. Async-signal-safe.
void say_sigterm_note() noexcept;

/// From now on SIGTERM makes the process print "axle: process `process` was stopped by mpirun
/// ... while <the note>" to stderr, then stop as the signal would have.
void say_waiting_note_on_sigterm(int process);

}  // namespace axle
