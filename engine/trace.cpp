// engine: per-thread span buffers and the Chrome trace-event writer.
#include "axle/engine/trace.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "axle/engine/log.h"

namespace axle {
namespace {

constexpr std::size_t kSpansPerThread = std::size_t{1} << 15;  // bounded memory per thread

struct Span {
  std::string name;
  std::string track;
  std::string_view category;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t flow_out = 0;
  uint64_t flow_in = 0;
};

// One thread's spans for one trace. Only its thread writes; a slot is published by the count
// (release), so stop_trace reads the published ones without a lock.
struct Buffer {
  explicit Buffer(uint64_t generation) : generation(generation), spans(kSpansPerThread) {}
  const uint64_t generation;
  std::vector<Span> spans;
  std::atomic<std::size_t> count{0};
  std::atomic<std::size_t> dropped{0};
};

struct Session {
  std::mutex mutex;  // buffers and path; taken when a thread first records in a trace
  std::string path;
  std::vector<std::shared_ptr<Buffer>> buffers;
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> next_flow{1};
  int64_t started_ns = 0;
};

Session& session() {
  static Session* s = new Session;  // threads may record during static destruction
  return *s;
}

Buffer* this_thread_buffer() {
  thread_local std::shared_ptr<Buffer> buffer;
  Session& s = session();
  const uint64_t generation = s.generation.load(std::memory_order_acquire);
  if (!buffer || buffer->generation != generation) {
    buffer = std::make_shared<Buffer>(generation);
    std::lock_guard lock(s.mutex);
    s.buffers.push_back(buffer);
  }
  return buffer.get();
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace

void start_trace(const std::string& path) {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  if (trace_internal::g_recording.load(std::memory_order_relaxed)) {
    throw std::logic_error(
        fmt::format("start_trace({}): a trace to {} is already recording", path, s.path));
  }
  s.path = path;
  s.buffers.clear();
  s.started_ns = trace_now();
  s.generation.fetch_add(1, std::memory_order_acq_rel);
  trace_internal::g_recording.store(true, std::memory_order_release);
}

uint64_t new_trace_flow() { return session().next_flow.fetch_add(1, std::memory_order_relaxed); }

void record_span(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns,
                 uint64_t flow_out, uint64_t flow_in) {
  if (!trace_recording()) return;
  Buffer* buffer = this_thread_buffer();
  const std::size_t at = buffer->count.load(std::memory_order_relaxed);
  if (at >= buffer->spans.size()) {
    buffer->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Span& span = buffer->spans[at];
  span.name.assign(name);
  span.track.assign(log_internal::thread_label());
  span.category = category;
  span.start_ns = start_ns;
  span.end_ns = end_ns;
  span.flow_out = flow_out;
  span.flow_in = flow_in;
  buffer->count.store(at + 1, std::memory_order_release);
}

std::size_t stop_trace() {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  if (!trace_internal::g_recording.exchange(false, std::memory_order_acq_rel)) return 0;
  // Tracks by name, numbered in order of appearance: one per actor (or thread).
  std::map<std::string, int> tracks;
  std::string events;
  std::size_t written = 0;
  std::size_t dropped = 0;
  auto micros = [&](int64_t ns) { return static_cast<double>(ns - s.started_ns) / 1e3; };
  for (const std::shared_ptr<Buffer>& buffer : s.buffers) {
    const std::size_t count = buffer->count.load(std::memory_order_acquire);
    dropped += buffer->dropped.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < count; ++i) {
      const Span& span = buffer->spans[i];
      const auto [track, added] =
          tracks.try_emplace(span.track, static_cast<int>(tracks.size()) + 1);
      const int tid = track->second;
      events += events.empty() ? "\n" : ",\n";
      events += R"({"name":)";
      append_json_string(events, span.name);
      events += R"(,"cat":)";
      append_json_string(events, span.category);
      events += fmt::format(R"(,"ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}}})", tid,
                            micros(span.start_ns),
                            static_cast<double>(span.end_ns - span.start_ns) / 1e3);
      if (span.flow_out != 0) {
        events += fmt::format(
            R"(,
{{"name":"step","cat":"flow","ph":"s","id":{},"pid":1,"tid":{},"ts":{:.3f}}})",
            span.flow_out, tid, micros(span.end_ns));
      }
      if (span.flow_in != 0) {
        events += fmt::format(
            R"(,
{{"name":"step","cat":"flow","ph":"f","bp":"e","id":{},"pid":1,"tid":{},"ts":{:.3f}}})",
            span.flow_in, tid, micros(span.start_ns));
      }
      ++written;
    }
  }
  for (const auto& [name, tid] : tracks) {
    events += events.empty() ? "\n" : ",\n";
    events +=
        fmt::format(R"({{"name":"thread_name","ph":"M","pid":1,"tid":{},"args":{{"name":)", tid);
    append_json_string(events, name);
    events += "}}";
  }
  std::string text = R"({"displayTimeUnit":"ms","otherData":{"producer":"axle","dropped_spans":)" +
                     std::to_string(dropped) + R"(},"traceEvents":[)" + events + "\n]}\n";
  const std::filesystem::path path(s.path);
  const std::filesystem::path temporary = path.string() + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      throw std::runtime_error(fmt::format("stop_trace: could not write {}", s.path));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    throw std::runtime_error(
        fmt::format("stop_trace: could not write {}: {}", s.path, error.message()));
  }
  s.buffers.clear();
  return written;
}

}  // namespace axle
