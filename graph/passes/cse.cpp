// graph/passes: common-subexpression elimination, by hashing each instruction as it is appended.
#include <algorithm>
#include <array>
#include <bit>
#include <vector>

#include "axle/engine/hash.h"
#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

uint64_t instr_hash(const Program& p, std::size_t id) {
  const Program::Instr& instr = p[id];
  uint64_t h = hash_combine(static_cast<uint64_t>(instr.op), static_cast<uint64_t>(instr.dtype));
  for (int64_t d : instr.shape.dims()) h = hash_combine(h, static_cast<uint64_t>(d));
  h = hash_combine(h, instr.shape.rank());
  for (int32_t operand : p.operands(id)) h = hash_combine(h, static_cast<uint64_t>(operand));
  for (int64_t v : p.ints(id)) h = hash_combine(h, static_cast<uint64_t>(v));
  for (double v : p.reals(id)) h = hash_combine(h, std::bit_cast<uint64_t>(v));
  return h;
}

bool same_bits(std::span<const double> a, std::span<const double> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](double x, double y) {
    return std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y);
  });
}

bool same_computation(const Program& p, std::size_t a, std::size_t b) {
  return p[a].op == p[b].op && p[a].dtype == p[b].dtype && p[a].shape == p[b].shape &&
         std::ranges::equal(p.operands(a), p.operands(b)) &&
         std::ranges::equal(p.ints(a), p.ints(b)) && same_bits(p.reals(a), p.reals(b));
}

}  // namespace

Program eliminate_common_subexpressions(const Program& program) {
  const std::size_t n = program.size();
  Program out;
  out.reserve(n);
  std::vector<int32_t> renamed(n, -1);
  // Open addressing over the ids of `out`; at most half full.
  std::size_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  std::vector<int32_t> table(capacity, -1);
  const std::size_t mask = capacity - 1;
  for (std::size_t id = 0; id < n; ++id) {
    int32_t appended;
    const std::span<const int32_t> operands = program.operands(id);
    if (is_commutative(program[id].op) && operands.size() == 2) {
      // Merging operands can unsort what canonicalisation sorted: sort again.
      std::array<int32_t, 2> sorted = {renamed[operands[0]], renamed[operands[1]]};
      std::ranges::sort(sorted);
      const Program::Instr& instr = program[id];
      appended = out.append(instr.op, instr.dtype, instr.shape, sorted, program.ints(id),
                            program.reals(id));
    } else {
      appended = out.append_renamed(program, static_cast<int32_t>(id), renamed);
    }
    renamed[id] = appended;
    // Leaves are distinct inputs; each optimization barrier stands on its own (two barriers of
    // the same values are still two: what reads one must not be merged with what reads the
    // other).
    if (out.is_leaf(appended) || out[appended].op == Op::kOptimizationBarrier) continue;
    for (std::size_t slot = instr_hash(out, appended) & mask;; slot = (slot + 1) & mask) {
      if (table[slot] < 0) {
        table[slot] = appended;
        break;
      }
      if (same_computation(out, table[slot], appended)) {
        out.pop_back();
        renamed[id] = table[slot];
        break;
      }
    }
  }
  for (int32_t output : program.outputs) out.outputs.push_back(renamed[output]);
  out.num_inputs = program.num_inputs;
  return out;
}

}  // namespace axle
