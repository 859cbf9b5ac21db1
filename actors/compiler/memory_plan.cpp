// actors: memory planning.
#include "axle/actors/compiler/memory_plan.h"

#include <algorithm>
#include <map>
#include <vector>

namespace axle {
namespace {

enum : uint8_t { kInput = 1, kOutput = 2 };

// Walks the calls as the backend will run them, simulating its buffers: bytes held (live slots
// plus pooled buffers), pooled buffers by size, and the size of the buffer behind each slot (a
// reused buffer may be larger than its slot).
class MemoryPlanner {
 public:
  explicit MemoryPlanner(Executable& program)
      : program_(program),
        plan_(program.plan),
        role_(program.slots.size(), 0),
        last_use_(program.slots.size(), -1),
        shared_(program.slots.size(), false),
        buffer_bytes_(program.slots.size(), 0) {
    for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
      if (!program.donated(i)) role_[program.input_slots[i]] |= kInput;
    }
    for (int32_t s : program.output_slots) role_[s] |= kOutput;
    for (std::size_t c = 0; c < program.calls.size(); ++c) {
      for (int32_t s : program.calls[c].inputs) last_use_[s] = static_cast<int32_t>(c);
    }
    // Results the members of an all-reduce may share: new buffers, never taken over, and gone
    // when released (the memory stays the other members' until the last lets go).
    for (const KernelCall& call : program.calls) {
      if (call.kernel == Kernel::kAllReduce &&
          program.slots[call.output].bytes() >= kSharedAllReduceBytes) {
        shared_[call.output] = true;
      }
    }
    for (std::size_t s = 0; s < program.slots.size(); ++s) {
      buffer_bytes_[s] = program.slots[s].bytes();
    }
    for (int32_t s : program.input_slots) held_ += program.slots[s].bytes();
  }

  void run() {
    const std::size_t calls = program_.calls.size();
    plan_ = MemoryPlan{};
    plan_.release_begin.reserve(calls + 1);
    plan_.release_begin.push_back(0);
    plan_.in_place.assign(calls, -1);
    plan_.peak_bytes = held_;
    for (std::size_t c = 0; c < calls; ++c) {
      const KernelCall& call = program_.calls[c];
      plan_.in_place[c] = in_place_operand(call, c);
      if (plan_.in_place[c] < 0) {
        take_buffer(call.output);
      } else {
        buffer_bytes_[call.output] = buffer_bytes_[plan_.in_place[c]];
      }
      plan_.peak_bytes = std::max(plan_.peak_bytes, held_);
      release_after(call, c);
    }
  }

 private:
  // The program's to release.
  [[nodiscard]] bool owned(int32_t s) const { return role_[s] == 0; }

  // An operand call c may write its result over (read for the last time, of the result's type
  // and shape), or -1.
  [[nodiscard]] int32_t in_place_operand(const KernelCall& call, std::size_t c) const {
    const BufferDesc& out = program_.slots[call.output];
    for (std::size_t position = 0; position < call.inputs.size(); ++position) {
      const int32_t s = call.inputs[position];
      if (!writes_in_place_safely(call, position)) continue;
      const BufferDesc& in = program_.slots[s];
      // (An output is handed to the caller in a buffer of exactly its size.)
      if (owned(s) && !shared_[s] && last_use_[s] == static_cast<int32_t>(c) &&
          in.dtype == out.dtype && in.shape == out.shape &&
          (!(role_[call.output] & kOutput) || buffer_bytes_[s] == out.bytes())) {
        return s;
      }
    }
    return -1;
  }

  // A released buffer for `slot`: the same size for an output (handed to the caller as is), the
  // smallest one large enough for anything else, if it is at most twice as large; else a new one.
  void take_buffer(int32_t slot) {
    const uint64_t bytes = program_.slots[slot].bytes();
    auto it = role_[slot] & kOutput ? pooled_.find(bytes) : pooled_.lower_bound(bytes);
    // At most twice the size (the CPU backend's rule, backends/cpu/cpu_backend.cpp): a small
    // slot taking a large buffer would leave the next large slot to allocate another.
    if (it != pooled_.end() && (it->first > 2 * bytes || shared_[slot])) it = pooled_.end();
    if (it != pooled_.end()) {
      buffer_bytes_[slot] = it->first;
      if (--it->second == 0) pooled_.erase(it);
    } else {
      held_ += bytes;
    }
  }

  // Operands call c read for the last time (each once), and a result nothing reads or returns.
  void release_after(const KernelCall& call, std::size_t c) {
    const auto released_from = plan_.release_slots.size();
    auto release = [&](int32_t s) {
      if (!owned(s) || s == plan_.in_place[c]) return;
      if (std::find(plan_.release_slots.begin() + static_cast<std::ptrdiff_t>(released_from),
                    plan_.release_slots.end(), s) != plan_.release_slots.end()) {
        return;
      }
      plan_.release_slots.push_back(s);
      if (shared_[s])
        held_ -= buffer_bytes_[s];
      else
        ++pooled_[buffer_bytes_[s]];
    };
    for (int32_t s : call.inputs) {
      if (last_use_[s] == static_cast<int32_t>(c)) release(s);
    }
    if (last_use_[call.output] < 0) release(call.output);
    plan_.release_begin.push_back(static_cast<uint32_t>(plan_.release_slots.size()));
  }

  const Executable& program_;
  MemoryPlan& plan_;
  std::vector<uint8_t> role_;
  std::vector<int32_t> last_use_;
  std::vector<bool> shared_;
  std::vector<uint64_t> buffer_bytes_;
  uint64_t held_ = 0;
  std::map<uint64_t, int64_t> pooled_;
};

}  // namespace

void plan_memory(Executable& program) { MemoryPlanner(program).run(); }

}  // namespace axle
