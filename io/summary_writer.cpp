// io: SummaryWriter (see summary_writer.h).
#include "axle/io/summary_writer.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <stdexcept>

#include "axle/actors/host/replica_host.h"
#include "axle/actors/runtime/step_breakdown.h"
#include "axle/graph/formats/error.h"
#include "axle/graph/formats/event_file.h"

namespace axle {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

SummaryWriter::SummaryWriter(std::filesystem::path log_dir) : log_dir_(std::move(log_dir)) {
  const auto now = std::chrono::system_clock::now();
  if (log_dir_.empty()) {
    // PyTorch's default: runs/<Mon>dd_HH-MM-SS_<host>.
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    ::localtime_r(&t, &local);
    log_dir_ =
        std::filesystem::path("runs") / fmt::format("{:%b%d_%H-%M-%S}_{}", local, host_name());
  }
  std::error_code error;
  std::filesystem::create_directories(log_dir_, error);
  if (error) {
    throw FileError(log_dir_, fmt::format("cannot create the log directory: {}", error.message()));
  }
  static std::atomic<int> next{0};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch());
  writer_ = std::make_unique<EventFileWriter>(
      log_dir_ / fmt::format("events.out.tfevents.{}.{}.{}.{}", seconds.count(), host_name(),
                             ::getpid(), next.fetch_add(1)));
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (...) {
    // A destructor must not throw; close() explicitly to see write errors.
  }
}

void SummaryWriter::add_scalar(const std::string& tag, double scalar_value, int64_t global_step) {
  std::lock_guard lock(mutex_);
  if (!writer_) throw std::logic_error("SummaryWriter: add_scalar after close()");
  writer_->add_scalar(tag, scalar_value, global_step, wall_seconds());
  writer_->flush();
}

void SummaryWriter::add_scalar(const std::string& tag, const Tensor& scalar_value,
                               int64_t global_step) {
  add_scalar(tag, scalar_value.item(), global_step);
}

void SummaryWriter::add_histogram(const std::string& tag, const Tensor& values, int64_t global_step,
                                  int bins) {
  const std::vector<double> host = values.cpu().values<double>();
  std::lock_guard lock(mutex_);
  if (!writer_) throw std::logic_error("SummaryWriter: add_histogram after close()");
  writer_->add_histogram(tag, host, global_step, wall_seconds(), bins);
  writer_->flush();
}

void SummaryWriter::add_step_breakdown(int64_t global_step) {
  static constexpr const char* kParts[StepBreakdown::kParts] = {
      "tracing",   "input_wait",  "value_wait", "compiler_wait",
      "executing", "collectives", "closures",   "device_wait"};
  const StepBreakdown::Totals totals = ReplicaHost::current().account()->totals();
  std::vector<int64_t> now(totals.ns.begin(), totals.ns.end());
  now.push_back(totals.steps);
  std::lock_guard lock(mutex_);
  if (!writer_) throw std::logic_error("SummaryWriter: add_step_breakdown after close()");
  std::vector<int64_t> before = breakdown_ns_;
  before.resize(now.size(), 0);
  breakdown_ns_ = now;
  const int64_t steps = now.back() - before.back();
  if (steps <= 0) return;
  const double wall = wall_seconds();
  for (int part = 0; part < StepBreakdown::kParts; ++part) {
    writer_->add_scalar(fmt::format("step_breakdown/{}_ms", kParts[part]),
                        static_cast<double>(now[part] - before[part]) / 1e6 / steps, global_step,
                        wall);
  }
  writer_->flush();
}

void SummaryWriter::flush() {
  std::lock_guard lock(mutex_);
  if (writer_) writer_->flush();
}

void SummaryWriter::close() {
  std::lock_guard lock(mutex_);
  if (writer_) writer_->flush();
  writer_.reset();
}

std::filesystem::path SummaryWriter::file() const {
  return writer_ ? writer_->path() : std::filesystem::path();
}

}  // namespace axle
