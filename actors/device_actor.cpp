// actors: device execution.
#include "actors/device_actor.h"

#include <chrono>
#include <cstring>
#include <mutex>

#include "engine/element.h"
#include "engine/metrics.h"

namespace axle {
namespace {

std::mutex g_gate_mutex;
std::function<void()> g_gate;

double elapsed_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void DeviceActor::set_execution_gate(std::function<void()> gate) {
  std::lock_guard lock(g_gate_mutex);
  g_gate = std::move(gate);
}

void DeviceActor::handle(Execute& m) {
  Work work;
  work.execute = std::move(m.request);
  queue_.push_back(std::move(work));
  pump();
}

void DeviceActor::handle(TransferToDevice& m) {
  Work work;
  work.transfer = std::move(m);
  queue_.push_back(std::move(work));
  pump();
}

void DeviceActor::handle(Drain&, Promise<void>&& reply) {
  Work work;
  work.is_drain = true;
  work.drained = std::move(reply);
  queue_.push_back(std::move(work));
  pump();
}

void DeviceActor::pump() {
  while (!queue_.empty()) {
    Work& head = queue_.front();
    if (head.is_drain) {
      head.drained.set_value();
    } else if (head.execute) {
      if (!ready(*head.execute)) return;
      run(*head.execute);
    } else {
      run(head.transfer);
    }
    queue_.pop_front();
  }
}

namespace {

void absorb(ExecuteRequest& request, Result<IntrusivePtr<Executable>> result) {
  if (result.ok())
    request.ready_program = result.value();
  else
    request.compile_error = result.error();
  request.program_known = true;
}

}  // namespace

bool DeviceActor::ready(ExecuteRequest& request) {
  if (!request.program_known) {
    if (request.program.ready()) {
      absorb(request, request.program.state()->take());
    } else {
      if (!request.waiting_for_program) {
        request.waiting_for_program = true;
        // The compiler answers on its own thread; the outcome comes back here as a message.
        request.program.then_on(self().target(),
                                [this, held = IntrusivePtr<ExecuteRequest>(&request)](
                                    Result<IntrusivePtr<Executable>> result) mutable {
                                  absorb(*held, std::move(result));
                                  pump();
                                });
      }
      return false;
    }
  }
  for (const ExecuteInput& input : request.inputs) {
    if (input.data && input.data->pending()) {
      if (waiting_on_ != input.data.get()) {
        waiting_on_ = input.data.get();
        input.data->when_done([self = self()] { self.tell(Pump{}); });
      }
      return false;
    }
  }
  waiting_on_ = nullptr;
  return true;
}

void DeviceActor::run(ExecuteRequest& request) {
  auto fail_outputs = [&](std::exception_ptr error) {
    for (auto& out : request.outputs) out->fail(error);
  };
  if (request.compile_error) return fail_outputs(request.compile_error);
  const Executable& program = *request.ready_program;
  std::vector<IntrusivePtr<DeviceMemory>> inputs;
  inputs.reserve(request.inputs.size());
  for (const ExecuteInput& input : request.inputs) {
    if (input.data) {
      if (input.data->failed()) return fail_outputs(input.data->error());
    }
  }
  for (std::size_t i = 0; i < request.inputs.size(); ++i) {
    const ExecuteInput& input = request.inputs[i];
    if (!input.data) {
      inputs.push_back(backend_.allocate(ordinal_, dtype_size(input.dtype)));
      store_element(input.dtype, input.value, inputs.back()->data());
    } else if (program.donated(i)) {
      inputs.push_back(input.data->donate());  // the program's now: it may write over it
    } else {
      inputs.push_back(input.data->memory());
    }
  }
  {
    std::function<void()> gate;
    {
      std::lock_guard lock(g_gate_mutex);
      gate = g_gate;
    }
    if (gate) gate();
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<IntrusivePtr<DeviceMemory>> results;
  try {
    results = backend_.execute(ordinal_, program, std::move(inputs));
  } catch (...) {
    return fail_outputs(std::current_exception());
  }
  AXLE_METRIC_ADD("ExecuteTime", MetricKind::kTime, elapsed_ns(start));
  for (std::size_t i = 0; i < request.outputs.size(); ++i) {
    request.outputs[i]->fulfil(std::move(results[i]));
  }
}

void DeviceActor::run(TransferToDevice& transfer) {
  const auto start = std::chrono::steady_clock::now();
  try {
    auto memory = backend_.allocate(ordinal_, transfer.bytes->size());
    backend_.copy_to_device(ordinal_, transfer.bytes->data(), *memory, transfer.bytes->size());
    transfer.target->fulfil(std::move(memory));
  } catch (...) {
    transfer.target->fail(std::current_exception());
  }
  AXLE_METRIC_ADD("TransferToDeviceTime", MetricKind::kTime, elapsed_ns(start));
}

}  // namespace axle
