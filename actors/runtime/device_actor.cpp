// actors: device execution — executions, transfers, value reads and memory queries; the
// device's side of collectives is device_collectives.cpp.
#include "axle/actors/runtime/device_actor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "axle/actors/compiler/memory_plan.h"
#include "axle/actors/compiler/program_dump.h"
#include "axle/actors/runtime/errors.h"
#include "axle/engine/element.h"
#include "axle/engine/exception_text.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"
#include "axle/engine/trace.h"

namespace axle {

void DeviceActor::handle(Execute& m) {
  Work work;
  work.execute = make_intrusive<Execution>(std::move(m.request));
  queue_.push_back(std::move(work));
  pump();
}

void DeviceActor::handle(ResumeRun& m) {
  m.execution->run_waiting = false;
  pump();
}

void DeviceActor::handle(TransferToDevice& m) {
  Work work;
  work.transfer = std::move(m);
  queue_.push_back(std::move(work));
  pump();
}

void DeviceActor::handle(ReadToHost& m, Promise<std::vector<std::byte>>&& reply) {
  if (!m.data->pending()) return copy_to_host(std::move(m.data), std::move(reply));
  // Pending data is this device's to produce, so it completes on this actor's thread, which
  // copies it there and then, before the queue moves on. Should another thread complete it, the
  // copy comes back here as a message.
  DeviceData* data = m.data.get();
  data->when_done(
      [this, self = self(), held = std::move(m.data), reply = std::move(reply)]() mutable {
        if (detail::running_actor() == self.target().get()) {
          copy_to_host(std::move(held), std::move(reply));
        } else {
          self.tell(ReadReady{std::move(held), std::move(reply)});
        }
      });
}

void DeviceActor::handle(QueryMemory&, Promise<MemoryInfo>&& reply) {
  reply.set_value(backend_.memory_info(ordinal_));
}

void DeviceActor::copy_to_host(DataHold data, Promise<std::vector<std::byte>> reply) {
  const auto start = std::chrono::steady_clock::now();
  if (data->failed()) {
    // Handed on as it is: rethrowing it here would only cost a throw.
    std::exception_ptr error = data->error();
    data = DataHold();
    reply.set_error(std::move(error));
    return;
  }
  std::vector<std::byte> bytes;
  try {
    const IntrusivePtr<DeviceMemory>& memory = data->wait();  // ready
    bytes.resize(data->bytes());
    backend_.copy_to_host(ordinal_, *memory, bytes.data(), bytes.size());
    if (!observers_.empty()) {
      const Span span{start, observer_now()};
      observers_.tell(
          [&](ActorObserver& o) { o.transferred_to_host(ordinal_, bytes.size(), span); });
    }
  } catch (...) {
    data = DataHold();
    reply.set_error(std::current_exception());
    return;
  }
  // Let go before answering: the reader may trace its next step at once, and a buffer still
  // held then would not be donated (a different graph, compiled again).
  data = DataHold();
  reply.set_value(std::move(bytes));
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
      Execution& execution = *head.execute;
      if (!execution.run && !execution.finished) {
        if (!ready(execution)) return;
        start(execution);
      }
      if (!execution.finished && !execution.at_collective && !execution.run_waiting) {
        advance(execution);
      }
      if (!execution.finished) return;  // paused at a collective, or waiting on the backend
    } else {
      run(head.transfer);
    }
    queue_.pop_front();
  }
}

namespace {

void absorb(DeviceExecution& execution, Result<IntrusivePtr<Executable>> result) {
  if (result.ok())
    execution.ready_program = result.value();
  else
    execution.compile_error = result.error();
  execution.program_known = true;
}

}  // namespace

bool DeviceActor::ready(Execution& execution) {
  if (!execution.program_known) {
    // Once a continuation waits for the program, only it takes the outcome (taking it twice
    // would leave a running request without its program).
    if (execution.waiting_for_program) return false;
    if (execution.program.ready()) {
      absorb(execution, execution.program.state()->take());
    } else {
      execution.waiting_for_program = true;
      execution.waits_since = std::chrono::steady_clock::now();
      // The compiler answers on its own thread; the outcome comes back here as a message.
      execution.program.then_on(
          self().target(), [this, held = IntrusivePtr<Execution>(&execution)](
                               Result<IntrusivePtr<Executable>> result) mutable {
            absorb(*held, std::move(result));
            if (!observers_.empty()) {
              const Span waited{held->waits_since, observer_now()};
              observers_.tell([&](ActorObserver& o) { o.program_waited(*held->request, waited); });
            }
            pump();
          });
      return false;
    }
  }
  for (const ExecuteInput& input : execution.request->inputs) {
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

void DeviceActor::start(Execution& execution) {
  if (execution.compile_error) return finish(execution, execution.compile_error);
  const ExecuteRequest& request = *execution.request;
  const Executable& program = *execution.ready_program;
  for (const ExecuteInput& input : request.inputs) {
    if (input.data && input.data->failed()) return finish(execution, input.data->error());
  }
  if (memory_limit_ > 0) {
    if (std::exception_ptr error = over_memory_limit(execution)) return finish(execution, error);
  }
  std::vector<IntrusivePtr<DeviceMemory>> inputs;
  inputs.reserve(request.inputs.size());
  try {
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
    execution.started = std::chrono::steady_clock::now();
    execution.run = backend_.start(ordinal_, program, std::move(inputs));
  } catch (...) {
    finish(execution, std::current_exception());
  }
}

std::exception_ptr DeviceActor::over_memory_limit(const Execution& execution) const {
  const ExecuteRequest& request = *execution.request;
  // The plan's peak counts the step's inputs; the device also holds every other live tensor.
  uint64_t inputs_held = 0;
  for (const ExecuteInput& input : request.inputs) {
    if (input.data && input.data->memory()) inputs_held += input.data->memory()->bytes();
  }
  const uint64_t in_use = backend_.memory_info(ordinal_).bytes_in_use;
  const uint64_t others = in_use > inputs_held ? in_use - inputs_held : 0;
  const uint64_t peak = execution.ready_program->plan.peak_bytes;
  if (peak + others <= memory_limit_) return nullptr;
  return std::make_exception_ptr(DeviceMemoryError(fmt::format(
      "the step cut at {}:{} needs {} bytes on xla:{} ({} at its memory plan's peak, {} held by "
      "other tensors), over AXLE_DEVICE_MEMORY_LIMIT={}; it did not run",
      request.where.file_name(), request.where.line(), peak + others, ordinal_, peak, others,
      memory_limit_)));
}

void DeviceActor::advance(Execution& execution) {
  try {
    while (const KernelCall* call = execution.run->advance()) {
      if (call == ProgramRun::waiting()) {
        // The actor stays free meanwhile (reads, transfers, queries); the run comes back here.
        execution.run_waiting = true;
        execution.run->when_resumable(
            [self = self(), held = IntrusivePtr<Execution>(&execution)]() mutable {
              self.tell(ResumeRun{std::move(held)});
            });
        return;
      }
      collective(execution, *call);
      if (execution.at_collective || execution.finished) return;
    }
  } catch (const std::exception& e) {
    save_failed_program(fmt::format("execution failed: {}", e.what()),
                        program_text(*execution.ready_program));
    return finish(execution, std::current_exception());
  }
  finish(execution, nullptr);
}

void DeviceActor::finish(Execution& execution, std::exception_ptr error) {
  execution.finished = true;
  execution.at_collective = false;
  const ExecuteRequest& request = *execution.request;
  if (error) {
    come_failed_to_collectives(execution, error);
    for (const auto& out : request.outputs) out->fail(error);
  } else {
    std::vector<IntrusivePtr<DeviceMemory>> results = execution.run->take_outputs();
    if (!observers_.empty()) {
      const Span run{execution.started, observer_now()};
      observers_.tell(
          [&](ActorObserver& o) { o.executed(ordinal_, request, run, execution.collective_ns); });
    }
    if (request.times) {
      const auto ran = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - execution.started);
      request.times->offer(request.graph_hash,
                           ran.count() - static_cast<int64_t>(execution.collective_ns));
    }
    for (std::size_t i = 0; i < request.outputs.size(); ++i) {
      request.outputs[i]->fulfil(std::move(results[i]));
    }
  }
  // Its buffers go back now, not when the last holder of the execution lets go of it (a
  // collective's continuation may go on to run the next request first): the request was the
  // device's alone once sent.
  execution.run.reset();
  execution.request = nullptr;
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
  if (!observers_.empty()) {
    const Span span{start, observer_now()};
    observers_.tell(
        [&](ActorObserver& o) { o.transferred_to_device(ordinal_, transfer.bytes->size(), span); });
  }
}

}  // namespace axle
