// actors: memory planning.
#include "actors/compiler/memory_plan.h"

#include <algorithm>
#include <map>
#include <vector>

namespace axle {

void plan_memory(Executable& program) {
  const std::size_t slots = program.slots.size();
  const std::size_t calls = program.calls.size();
  enum : uint8_t { kInput = 1, kOutput = 2 };
  std::vector<uint8_t> role(slots, 0);
  for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
    if (!program.donated(i)) role[program.input_slots[i]] |= kInput;
  }
  for (int32_t s : program.output_slots) role[s] |= kOutput;
  std::vector<int32_t> last_use(slots, -1);
  for (std::size_t c = 0; c < calls; ++c) {
    for (int32_t s : program.calls[c].inputs) last_use[s] = static_cast<int32_t>(c);
  }
  auto owned = [&](int32_t s) { return role[s] == 0; };  // the program's to release
  // Results the members of an all-reduce may share: new buffers, never taken over, and gone
  // when released (the memory stays the other members' until the last lets go).
  std::vector<bool> shared(slots, false);
  for (const KernelCall& call : program.calls) {
    if (call.kernel == Kernel::kAllReduce &&
        program.slots[call.output].bytes() >= kSharedAllReduceBytes) {
      shared[call.output] = true;
    }
  }

  MemoryPlan& plan = program.plan;
  plan = MemoryPlan{};
  plan.release_begin.reserve(calls + 1);
  plan.release_begin.push_back(0);
  plan.in_place.assign(calls, -1);

  // Simulates the backend: bytes held (live slots plus pooled buffers), pooled buffers by size,
  // and the size of the buffer behind each slot (a reused buffer may be larger than its slot).
  uint64_t held = 0;
  std::map<uint64_t, int64_t> pooled;
  std::vector<uint64_t> buffer_bytes(slots, 0);
  for (std::size_t s = 0; s < slots; ++s) buffer_bytes[s] = program.slots[s].bytes();
  for (int32_t s : program.input_slots) held += program.slots[s].bytes();
  plan.peak_bytes = held;
  for (std::size_t c = 0; c < calls; ++c) {
    const KernelCall& call = program.calls[c];
    const BufferDesc& out = program.slots[call.output];
    if (writes_in_place_safely(call)) {
      for (int32_t s : call.inputs) {
        const BufferDesc& in = program.slots[s];
        // (An output is handed to the caller in a buffer of exactly its size.)
        if (owned(s) && !shared[s] && last_use[s] == static_cast<int32_t>(c) &&
            in.dtype == out.dtype && in.shape == out.shape &&
            (!(role[call.output] & kOutput) || buffer_bytes[s] == out.bytes())) {
          plan.in_place[c] = s;
          break;
        }
      }
    }
    if (plan.in_place[c] < 0) {
      // A released buffer: the same size for an output (handed to the caller as is), the
      // smallest one large enough for anything else, if it is at most twice as large.
      auto it =
          role[call.output] & kOutput ? pooled.find(out.bytes()) : pooled.lower_bound(out.bytes());
      // At most twice the size (the CPU backend's rule, backends/cpu/cpu_backend.cpp): a small
      // slot taking a large buffer would leave the next large slot to allocate another.
      if (it != pooled.end() && (it->first > 2 * out.bytes() || shared[call.output])) {
        it = pooled.end();
      }
      if (it != pooled.end()) {
        buffer_bytes[call.output] = it->first;
        if (--it->second == 0) pooled.erase(it);
      } else {
        held += out.bytes();
      }
    } else {
      buffer_bytes[call.output] = buffer_bytes[plan.in_place[c]];
    }
    plan.peak_bytes = std::max(plan.peak_bytes, held);
    // Operands read for the last time (each once), and a result nothing reads or returns.
    const auto released_from = plan.release_slots.size();
    auto release = [&](int32_t s) {
      if (!owned(s) || s == plan.in_place[c]) return;
      if (std::find(plan.release_slots.begin() + static_cast<std::ptrdiff_t>(released_from),
                    plan.release_slots.end(), s) != plan.release_slots.end()) {
        return;
      }
      plan.release_slots.push_back(s);
      if (shared[s])
        held -= buffer_bytes[s];
      else
        ++pooled[buffer_bytes[s]];
    };
    for (int32_t s : call.inputs) {
      if (last_use[s] == static_cast<int32_t>(c)) release(s);
    }
    if (last_use[call.output] < 0) release(call.output);
    plan.release_begin.push_back(static_cast<uint32_t>(plan.release_slots.size()));
  }
}

}  // namespace axle
