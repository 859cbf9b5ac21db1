// backends/testing: the testing backend.
#include "axle/backends/testing/testing_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "axle/engine/future.h"

namespace axle {

// A run that may wait at its first advance (the hold) and may fail where the program meets a
// kernel chosen to fail: it then runs only the calls before that one (a prefix of the program)
// and throws as the kernel would.
class TestingBackend::HeldRun final : public ProgramRun {
 public:
  HeldRun(TestingBackend& backend, bool held, uint64_t epoch, std::unique_ptr<ProgramRun> inner,
          IntrusivePtr<Executable> prefix, std::string failure)
      : backend_(backend),
        held_(held),
        epoch_(epoch),
        inner_(std::move(inner)),
        prefix_(std::move(prefix)),
        failure_(std::move(failure)) {}

  const KernelCall* advance() override {
    if (held_) {
      std::lock_guard lock(backend_.mutex_);
      if (still_held()) {
        if (!counted_) {
          counted_ = true;
          ++backend_.held_;
          backend_.changed_.notify_all();
        }
        return waiting();
      }
      held_ = false;  // released before (or while) it got here
    }
    const KernelCall* call = inner_->advance();
    if (call == nullptr && !failure_.empty()) throw std::runtime_error(failure_);
    return call;
  }

  void when_resumable(UniqueFunction resume) override {
    {
      std::lock_guard lock(backend_.mutex_);
      if (still_held()) {
        backend_.waiting_.push_back(std::make_unique<UniqueFunction>(std::move(resume)));
        return;
      }
    }
    resume();
  }

  const IntrusivePtr<DeviceMemory>& collective_operand() const override {
    return inner_->collective_operand();
  }
  IntrusivePtr<DeviceMemory> collective_result_buffer() override {
    return inner_->collective_result_buffer();
  }
  void finish_collective(IntrusivePtr<DeviceMemory> result) override {
    inner_->finish_collective(std::move(result));
  }
  std::vector<IntrusivePtr<DeviceMemory>> take_outputs() override { return inner_->take_outputs(); }

 private:
  // Under the backend's lock: the hold this run started under is still on (a release ends it,
  // even when a later hold() begins another).
  [[nodiscard]] bool still_held() const {
    return backend_.holding_ && backend_.release_epoch_ == epoch_;
  }

  TestingBackend& backend_;
  bool held_;
  uint64_t epoch_;
  bool counted_ = false;
  std::unique_ptr<ProgramRun> inner_;
  IntrusivePtr<Executable> prefix_;  // what inner_ runs when the program is to fail
  std::string failure_;
};

TestingBackend::TestingBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)), devices_(static_cast<std::size_t>(inner_->device_count())) {}

TestingBackend::~TestingBackend() { release(); }

void TestingBackend::hold() {
  std::lock_guard lock(mutex_);
  holding_ = true;
}

void TestingBackend::release() {
  std::vector<std::unique_ptr<UniqueFunction>> resumes;
  {
    std::lock_guard lock(mutex_);
    holding_ = false;
    ++release_epoch_;
    resumes.swap(waiting_);
  }
  for (auto& resume : resumes) (*resume)();
}

bool TestingBackend::wait_until_held(int count, std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return held_ >= count; });
}

int TestingBackend::held_count() const {
  std::lock_guard lock(mutex_);
  return held_;
}

void TestingBackend::fail_kernel(Kernel kernel, int times) {
  std::lock_guard lock(mutex_);
  kernel_failures_.emplace_back(kernel, times);
}

void TestingBackend::fail_allocations(int times) {
  std::lock_guard lock(mutex_);
  allocation_failures_ += times;
}

TestingBackend::Calls TestingBackend::calls(int device) const {
  std::lock_guard lock(mutex_);
  Calls calls = devices_.at(static_cast<std::size_t>(device)).calls;
  calls.threads = static_cast<int64_t>(devices_[static_cast<std::size_t>(device)].threads.size());
  calls.actors = static_cast<int64_t>(devices_[static_cast<std::size_t>(device)].actors.size());
  return calls;
}

int64_t TestingBackend::collective_calls_from(int device, std::thread::id thread) const {
  std::lock_guard lock(mutex_);
  const auto& by_thread = devices_.at(static_cast<std::size_t>(device)).collectives_by_thread;
  const auto it = by_thread.find(thread);
  return it == by_thread.end() ? 0 : it->second;
}

void TestingBackend::count(int device, int64_t Calls::*kind) const {
  std::lock_guard lock(mutex_);
  if (device < 0 || device >= static_cast<int>(devices_.size())) return;  // inner_ will throw
  Device& d = devices_[static_cast<std::size_t>(device)];
  ++(d.calls.*kind);
  d.threads.insert(std::this_thread::get_id());
  d.actors.insert(detail::running_actor());
}

int TestingBackend::failing_call(const Executable& program) {
  std::lock_guard lock(mutex_);
  for (auto it = kernel_failures_.begin(); it != kernel_failures_.end(); ++it) {
    const auto call = std::ranges::find_if(
        program.calls, [&](const KernelCall& c) { return c.kernel == it->first; });
    if (call == program.calls.end()) continue;
    if (--it->second == 0) kernel_failures_.erase(it);
    return static_cast<int>(call - program.calls.begin());
  }
  return -1;
}

std::string_view TestingBackend::hardware() const noexcept { return inner_->hardware(); }

int TestingBackend::device_count() const noexcept { return inner_->device_count(); }

void TestingBackend::count_allocation(int device) {
  count(device, &Calls::allocate);
  std::lock_guard lock(mutex_);
  if (allocation_failures_ > 0) {
    --allocation_failures_;
    throw std::bad_alloc();
  }
}

IntrusivePtr<DeviceMemory> TestingBackend::allocate(int device, std::size_t bytes) {
  count_allocation(device);
  return inner_->allocate(device, bytes);
}

IntrusivePtr<DeviceMemory> TestingBackend::allocate_shared(int device, std::size_t bytes) {
  count_allocation(device);
  return inner_->allocate_shared(device, bytes);
}

IntrusivePtr<DeviceMemory> TestingBackend::share(int device, IntrusivePtr<DeviceMemory> shared) {
  return inner_->share(device, std::move(shared));
}

void TestingBackend::copy_to_device(int device, const void* host, DeviceMemory& dst,
                                    std::size_t bytes) {
  count(device, &Calls::copy_to_device);
  inner_->copy_to_device(device, host, dst, bytes);
}

void TestingBackend::copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) {
  count(device, &Calls::copy_to_host);
  inner_->copy_to_host(device, src, host, bytes);
}

std::unique_ptr<ProgramRun> TestingBackend::start(int device, const Executable& program,
                                                  std::vector<IntrusivePtr<DeviceMemory>> inputs) {
  count(device, &Calls::start);
  bool held = false;
  uint64_t epoch = 0;
  {
    std::lock_guard lock(mutex_);
    held = holding_;
    epoch = release_epoch_;
  }
  const int fail_at = failing_call(program);
  if (fail_at < 0) {
    return std::make_unique<HeldRun>(*this, held, epoch,
                                     inner_->start(device, program, std::move(inputs)), nullptr,
                                     std::string());
  }
  // The calls before the failing one, with the memory plan cut to match; nothing is handed back.
  auto prefix = make_intrusive<Executable>();
  prefix->slots = program.slots;
  prefix->input_slots = program.input_slots;
  prefix->calls.assign(program.calls.begin(), program.calls.begin() + fail_at);
  prefix->donated_inputs = program.donated_inputs;
  prefix->graph_hash = program.graph_hash;
  if (!program.plan.empty()) {
    prefix->plan = program.plan;
    prefix->plan.release_begin.resize(static_cast<std::size_t>(fail_at) + 1);
    prefix->plan.in_place.resize(static_cast<std::size_t>(fail_at));
  }
  std::string failure =
      fmt::format("kernel {} failed: the testing backend was told to fail it",
                  describe_call(program, program.calls[static_cast<std::size_t>(fail_at)]));
  std::unique_ptr<ProgramRun> inner = inner_->start(device, *prefix, std::move(inputs));
  return std::make_unique<HeldRun>(*this, held, epoch, std::move(inner), std::move(prefix),
                                   std::move(failure));
}

void TestingBackend::collective(int device, const KernelCall& call, const BufferDesc& operand,
                                const BufferDesc& result, std::span<DeviceMemory* const> operands,
                                int position, DeviceMemory& output) {
  count(device, &Calls::collective);
  {
    std::lock_guard lock(mutex_);
    if (device >= 0 && device < static_cast<int>(devices_.size())) {
      ++devices_[static_cast<std::size_t>(device)]
            .collectives_by_thread[std::this_thread::get_id()];
    }
  }
  inner_->collective(device, call, operand, result, operands, position, output);
}

MemoryInfo TestingBackend::memory_info(int device) const {
  count(device, &Calls::memory_info);
  return inner_->memory_info(device);
}

}  // namespace axle
