// actors: elementwise fusion, with trailing reductions.
#include "axle/actors/compiler/fusion.h"

#include <algorithm>
#include <span>

#include "axle/actors/compiler/kernel_map.h"

namespace axle {
namespace {

// Vectorised approximations: their last bit can depend on where in a vector a value sits (sqrt
// too: Eigen's vector sqrt refines a reciprocal estimate, its scalar tail calls std::sqrt).
bool approximated(Op op) {
  return op_family(op) == OpFamily::kFloatFunction || op == Op::kGelu || op == Op::kGeluBackward;
}

// f32 and f64 chains, and bf16 ones: the fused kernel rounds each bf16 step as its own kernel
// would (backends/cpu/fused.cpp); their reductions stay kernels of their own.
bool fusible(const Program& p, std::size_t id) {
  const Program::Instr& instr = p[id];
  if (instr.dtype != DType::kFloat32 && instr.dtype != DType::kFloat64 &&
      instr.dtype != DType::kBFloat16) {
    return false;
  }
  if (p.is_leaf(id)) return false;
  if (instr.op != Op::kExpand && fused_step_arity(kernel_for(instr.op)) == 0) return false;
  return std::ranges::all_of(p.operands(id),
                             [&](int32_t operand) { return p[operand].dtype == instr.dtype; });
}

bool reduction(Op op) {
  return op == Op::kSum || op == Op::kMean || op == Op::kReduceMax || op == Op::kReduceMin;
}

// Whether reduction `id` can end the fused kernel of its operand: a floating-point reduction the
// kernel supports, of an elementwise op computed for it alone (stored, the chain would gain
// nothing). Reductions whose terms would have to be gathered (dims {0, 2} of [a, b, c, d]) stay
// kernels of their own; a per-channel statistic (dims {0, 2, 3} of [N, C, H, W]) fuses.
bool fusible_reduction(const Program& p, std::size_t id, const std::vector<int32_t>& uses) {
  const Program::Instr& instr = p[id];
  if (!reduction(instr.op) || (instr.dtype != DType::kFloat32 && instr.dtype != DType::kFloat64)) {
    return false;
  }
  const auto operand = static_cast<std::size_t>(p.operands(id)[0]);
  if (uses[operand] != 1 || p[operand].op == Op::kExpand || !fusible(p, operand) ||
      p[operand].dtype != instr.dtype) {
    return false;
  }
  const std::span<const int64_t> ints = p.ints(id);  // [keepdim, dims...]
  return !ints.empty() && fusible_reduction_dims(p[operand].shape, ints.subspan(1));
}

// Whether cast `id` can end the fused kernel of its operand: a cast of an f32 elementwise op,
// computed for it alone, to bf16. The chain then runs in f32 and its result is rounded as it is
// stored, so the f32 values are never written (autocast's casts before its products).
bool fusible_cast(const Program& p, std::size_t id, const std::vector<int32_t>& uses) {
  const Program::Instr& instr = p[id];
  if (instr.op != Op::kCast || instr.dtype != DType::kBFloat16) return false;
  const auto operand = static_cast<std::size_t>(p.operands(id)[0]);
  return uses[operand] == 1 && p[operand].op != Op::kExpand && fusible(p, operand) &&
         p[operand].dtype == DType::kFloat32;
}

// Members per fused kernel: each scalar or broadcast operand costs a block of scratch, which
// should stay in L1/L2. Longer chains become several kernels.
constexpr std::size_t kMaxMembers = 32;

}  // namespace

std::vector<int32_t> plan_fusion(const Program& program) {
  const std::size_t n = program.size();
  std::vector<int32_t> uses(n, 0);
  for (std::size_t id = 0; id < n; ++id) {
    for (int32_t operand : program.operands(id)) ++uses[operand];
  }
  for (int32_t output : program.outputs) uses[output] += 2;  // stored: never absorbed
  std::vector<int32_t> root_of(n, -1);
  std::vector<int32_t> stack;
  for (std::size_t r = n; r-- > 0;) {
    if (root_of[r] >= 0) continue;
    const bool reduces = fusible_reduction(program, r, uses);
    if (!reduces && !fusible_cast(program, r, uses) &&
        (program[r].op == Op::kExpand || !fusible(program, r))) {
      continue;
    }
    // The shape the chain is computed at: the root's, or the reduced operand's.
    const Shape& shape = program[reduces ? program.operands(r)[0] : r].shape;
    const auto root = static_cast<int32_t>(r);
    root_of[r] = root;
    std::size_t members = 1;
    stack.assign(1, root);
    while (!stack.empty() && members < kMaxMembers) {
      const int32_t member = stack.back();
      stack.pop_back();
      for (int32_t operand : program.operands(member)) {
        const auto o = static_cast<std::size_t>(operand);
        if (root_of[o] >= 0 || uses[o] != 1 || !fusible(program, o)) continue;
        if (approximated(program[o].op) && !(program[o].shape == shape)) continue;
        if (members == kMaxMembers) break;
        root_of[o] = root;
        ++members;
        stack.push_back(operand);
      }
    }
    if (members == 1) root_of[r] = -1;  // nothing to fuse with: its own kernel
  }
  return root_of;
}

namespace {

// The members of `root`'s cluster in program order (a topological order), the root last; found
// by walking the cluster from its root, so a call costs its cluster's size, not the program's.
std::vector<int32_t> cluster_members(const Program& program, const std::vector<int32_t>& root_of,
                                     int32_t root) {
  std::vector<int32_t> members = {root};
  for (std::size_t k = 0; k < members.size(); ++k) {
    for (int32_t operand : program.operands(members[k])) {
      if (root_of[operand] == root && std::ranges::find(members, operand) == members.end()) {
        members.push_back(operand);
      }
    }
  }
  std::ranges::sort(members);
  return members;
}

// The step of member `id` (reading operand references a and b, writing `destination`) appended
// to `steps`, as backends/executable.h lays a fused call's steps out.
void append_step(const Program& program, int32_t id, int32_t destination, int32_t a, int32_t b,
                 std::vector<int64_t>& steps) {
  if (reduction(program[id].op)) {  // the root: folds its operand into the output
    const Shape& shape = program[program.operands(id)[0]].shape;
    steps.insert(steps.end(),
                 {static_cast<int64_t>(kernel_for(program[id].op)), -1, a, shape.rank()});
    steps.insert(steps.end(), shape.dims().begin(), shape.dims().end());
    steps.insert(steps.end(), program.ints(id).begin(), program.ints(id).end());
    return;
  }
  const bool tanh_form = (program[id].op == Op::kGelu || program[id].op == Op::kGeluBackward) &&
                         !program.ints(id).empty() && program.ints(id)[0] != 0;
  steps.insert(steps.end(), {static_cast<int64_t>(kernel_for(program[id].op)), destination, a, b,
                             tanh_form ? 1 : 0});
}

}  // namespace

KernelCall fused_call(const Program& program, const std::vector<int32_t>& root_of, int32_t root) {
  const std::vector<int32_t> members = cluster_members(program, root_of, root);
  auto position = [&](int32_t id) {
    return static_cast<std::size_t>(std::ranges::lower_bound(members, id) - members.begin());
  };
  KernelCall call;
  call.kernel = Kernel::kFused;
  call.output = root;
  // Per member: where its value lives during a block (an operand reference, see executable.h),
  // and the step that reads it last.
  std::vector<int32_t> ref(members.size(), 0);
  std::vector<int32_t> last_use(members.size(), -1);
  for (std::size_t k = 0; k < members.size(); ++k) {
    for (int32_t operand : program.operands(members[k])) {
      if (root_of[operand] == root) last_use[position(operand)] = static_cast<int32_t>(k);
    }
  }
  auto operand_ref = [&](int32_t operand) -> int32_t {
    if (root_of[operand] == root) return ref[position(operand)];
    const auto it = std::ranges::find(call.inputs, operand);
    if (it != call.inputs.end()) return static_cast<int32_t>(it - call.inputs.begin());
    call.inputs.push_back(operand);
    return static_cast<int32_t>(call.inputs.size() - 1);
  };
  // A cast ending the cluster is no step: its operand's step writes the output, rounded as the
  // kernel stores it (the output's dtype says so).
  const bool cast_root = program[root].op == Op::kCast;
  const int32_t writes_output = cast_root ? program.operands(root)[0] : root;
  std::vector<int32_t> free_buffers;
  int32_t buffers = 0;
  std::vector<int64_t> steps;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const int32_t id = members[k];
    if (cast_root && id == root) continue;
    const std::span<const int32_t> operands = program.operands(id);
    if (program[id].op == Op::kExpand) {
      ref[k] = operand_ref(operands[0]);  // broadcasting is how every operand is read
      continue;
    }
    const int32_t a = operand_ref(operands[0]);
    const int32_t b = operands.size() > 1 ? operand_ref(operands[1]) : 0;
    // Buffers whose last reader is this step are free for its result (steps are elementwise).
    for (int32_t operand : operands) {
      if (root_of[operand] != root || program[operand].op == Op::kExpand) continue;
      const std::size_t p = position(operand);
      if (last_use[p] != static_cast<int32_t>(k) || ref[p] >= 0) continue;
      const int32_t buffer = -ref[p] - 1;
      if (std::ranges::find(free_buffers, buffer) == free_buffers.end()) {
        free_buffers.push_back(buffer);
      }
    }
    int32_t destination = -1;
    if (id != writes_output) {
      if (free_buffers.empty()) {
        destination = buffers++;
      } else {
        destination = free_buffers.back();
        free_buffers.pop_back();
      }
      ref[k] = -destination - 1;
    }
    append_step(program, id, destination, a, b, steps);
  }
  call.ints.reserve(1 + steps.size());
  call.ints.push_back(buffers);
  call.ints.insert(call.ints.end(), steps.begin(), steps.end());
  return call;
}

}  // namespace axle
