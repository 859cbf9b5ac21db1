// graph/passes: the all-reduce combiner — a step's independent small all_reduces of one kind
// become one, so the replicas meet once for them all (XLA's all-reduce combiner does the same).
#include <bit>
#include <map>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

// Past this, a combined buffer starts anew: a meeting saved is worth a few microseconds, nothing
// against moving megabytes, and every byte combined costs two more copies.
constexpr int64_t kCombinedBufferBytes = int64_t{4} << 20;

int64_t bytes_of(const Program::Instr& instr) {
  return instr.shape.numel() * static_cast<int64_t>(dtype_size(instr.dtype));
}

// What all_reduces must agree on to travel together: how many all_reduces precede them on any
// path (so that none of them reads another's result), the reduce type, the groups' key, the
// dtype and the scale's bits.
using Kind = std::tuple<int32_t, int64_t, int64_t, DType, uint64_t>;

// The members of each combined all_reduce, in program order; every all_reduce not listed stays as
// it is.
std::vector<std::vector<int32_t>> plan_combined(const Program& program) {
  const std::size_t n = program.size();
  std::vector<int32_t> depth(n, 0);
  std::map<Kind, std::vector<int32_t>> by_kind;
  for (std::size_t id = 0; id < n; ++id) {
    int32_t d = 0;
    for (int32_t operand : program.operands(id)) d = std::max(d, depth[operand]);
    const Program::Instr& instr = program[id];
    if (instr.op != Op::kAllReduce) {
      depth[id] = d;
      continue;
    }
    depth[id] = d + 1;
    if (bytes_of(instr) >= kCombinedAllReduceBytes) continue;
    const std::span<const int64_t> ints = program.ints(id);
    by_kind[Kind{d, ints[0], ints[1], instr.dtype, std::bit_cast<uint64_t>(program.reals(id)[0])}]
        .push_back(static_cast<int32_t>(id));
  }
  std::vector<std::vector<int32_t>> combined;
  for (auto& [kind, members] : by_kind) {
    std::vector<int32_t> buffer;
    int64_t bytes = 0;
    auto close = [&] {
      if (buffer.size() > 1) combined.push_back(std::move(buffer));
      buffer.clear();
      bytes = 0;
    };
    for (int32_t id : members) {
      const int64_t more = bytes_of(program[id]);
      if (bytes + more > kCombinedBufferBytes) close();
      buffer.push_back(id);
      bytes += more;
    }
    close();
  }
  return combined;
}

// Appends the combined all_reduce of `members` (flatten, concatenate, reduce, slice, reshape
// back) and renames each member to its part of the result.
void append_combined(const Program& program, std::span<const int32_t> members, Program& out,
                     std::vector<int32_t>& renamed) {
  const Program::Instr& first = program[members[0]];
  std::vector<int32_t> flat;
  flat.reserve(members.size());
  int64_t total = 0;
  for (int32_t id : members) {
    const int32_t operand = renamed[program.operands(id)[0]];
    const int64_t numel = program[id].shape.numel();
    flat.push_back(program[id].shape.rank() == 1
                       ? operand
                       : out.append(Op::kReshape, first.dtype, Shape{numel}, {&operand, 1}));
    total += numel;
  }
  const int64_t along[] = {0};
  const int32_t joined = out.append(Op::kConcat, first.dtype, Shape{total}, flat, along);
  const int32_t reduced = out.append(Op::kAllReduce, first.dtype, Shape{total}, {&joined, 1},
                                     program.ints(members[0]), program.reals(members[0]));
  int64_t offset = 0;
  for (int32_t id : members) {
    const Shape& shape = program[id].shape;
    const int64_t numel = shape.numel();
    const int64_t part_ints[] = {0, offset, 1};
    const int32_t part =
        out.append(Op::kSlice, first.dtype, Shape{numel}, {&reduced, 1}, part_ints);
    renamed[id] =
        shape.rank() == 1 ? part : out.append(Op::kReshape, first.dtype, shape, {&part, 1});
    offset += numel;
  }
}

}  // namespace

Program combine_all_reduces(Program program) {
  std::size_t all_reduces = 0;
  for (std::size_t id = 0; id < program.size() && all_reduces < 2; ++id) {
    all_reduces += program[id].op == Op::kAllReduce;
  }
  if (all_reduces < 2) return program;  // most steps: nothing to combine, nothing to copy
  const std::vector<std::vector<int32_t>> combined = plan_combined(program);
  if (combined.empty()) return program;
  const std::size_t n = program.size();
  // Each instruction is a unit of its own but the members of a combined all_reduce, which make
  // one unit named by its last member. The units go out in a topological order that keeps the
  // program's wherever it can (the smallest ready unit first): the combined all_reduce where its
  // last member was, and what read its earlier members moved after it. No cycle can arise: a unit
  // that reads a combined all_reduce's result has more all_reduces before it than its members.
  std::vector<int32_t> unit(n);
  std::iota(unit.begin(), unit.end(), 0);
  std::vector<int32_t> combined_at(n, -1);  // by unit: which entry of `combined`
  for (std::size_t c = 0; c < combined.size(); ++c) {
    const int32_t last = combined[c].back();
    for (int32_t id : combined[c]) unit[id] = last;
    combined_at[last] = static_cast<int32_t>(c);
  }
  // Edges between units, one per operand read across units, as users in CSR form.
  std::vector<int32_t> waiting(n, 0);
  std::vector<uint32_t> user_begin(n + 1, 0);
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) {
      if (unit[operand] == unit[id]) continue;
      ++user_begin[unit[operand] + 1];
      ++waiting[unit[id]];
    }
  }
  for (std::size_t u = 0; u < n; ++u) user_begin[u + 1] += user_begin[u];
  std::vector<int32_t> users(user_begin[n]);
  std::vector<uint32_t> filled(user_begin.begin(), user_begin.end() - 1);
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) {
      if (unit[operand] != unit[id]) users[filled[unit[operand]]++] = unit[id];
    }
  }
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<>> ready;
  for (std::size_t id = 0; id < n; ++id) {
    if (unit[id] == static_cast<int32_t>(id) && waiting[id] == 0) {
      ready.push(static_cast<int32_t>(id));
    }
  }
  // Each member adds up to a flattening reshape, a slice and a reshape back; each combined one a
  // concatenation and its reduction.
  std::size_t member_count = 0;
  for (const std::vector<int32_t>& c : combined) member_count += c.size();
  Program out;
  out.reserve(n + 3 * member_count + 2 * combined.size());
  std::vector<int32_t> renamed(n, -1);
  std::size_t emitted = 0;
  while (!ready.empty()) {
    const int32_t u = ready.top();
    ready.pop();
    if (combined_at[u] >= 0) {
      const std::vector<int32_t>& members = combined[static_cast<std::size_t>(combined_at[u])];
      append_combined(program, members, out, renamed);
      emitted += members.size();
    } else {
      renamed[u] = out.append_renamed(program, u, renamed);
      ++emitted;
    }
    for (uint32_t e = user_begin[u]; e < user_begin[u + 1]; ++e) {
      if (--waiting[users[e]] == 0) ready.push(users[e]);
    }
  }
  if (emitted != n) {
    throw std::logic_error("all-reduce combiner: the combined program's units form a cycle");
  }
  for (int32_t output : program.outputs) out.outputs.push_back(renamed[output]);
  out.num_inputs = program.num_inputs;
  return out;
}

}  // namespace axle
