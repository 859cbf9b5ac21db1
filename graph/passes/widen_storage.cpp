// graph/passes: arithmetic on the storage-only dtypes (f16, s8, u8, s16) in their compute dtype.
#include <vector>

#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

// Ops that only store, move or convert elements: the kernels take every dtype for these.
bool moves_elements(Op op) {
  switch (op) {
    case Op::kDeviceData:
    case Op::kParameter:
    case Op::kConstant:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kExpand:
    case Op::kSlice:
    case Op::kConcat:
    case Op::kIndexSelect:
    case Op::kGather:
    case Op::kOneHot:
    case Op::kFill:
    case Op::kCast:
    case Op::kAllGather:
    case Op::kAllToAll:
    case Op::kCollectivePermute:
    case Op::kOptimizationBarrier:
    case Op::kCustomSharding:
      return true;
    default:
      return false;
  }
}

bool computes_in_storage_only(const Program& program, std::size_t id) {
  if (moves_elements(program[id].op)) return false;
  if (is_storage_only(program[id].dtype)) return true;
  for (int32_t operand : program.operands(id)) {
    if (is_storage_only(program[operand].dtype)) return true;
  }
  return false;
}

}  // namespace

Program widen_storage_only_dtypes(Program program) {
  const std::size_t n = program.size();
  bool any = false;
  for (std::size_t id = 0; id < n && !any; ++id) any = computes_in_storage_only(program, id);
  if (!any) return program;

  Program widened;
  widened.reserve(n + n / 2);
  std::vector<int32_t> renamed(n, -1);
  // Each storage-only value widened once, however many instructions read it.
  std::vector<int32_t> wide(n, -1);
  std::vector<int32_t> operands;
  for (std::size_t id = 0; id < n; ++id) {
    const auto self = static_cast<int32_t>(id);
    if (!computes_in_storage_only(program, id)) {
      renamed[id] = widened.append_renamed(program, self, renamed);
      continue;
    }
    operands.clear();
    for (int32_t operand : program.operands(id)) {
      const Program::Instr& value = program[operand];
      if (!is_storage_only(value.dtype)) {
        operands.push_back(renamed[operand]);
        continue;
      }
      if (wide[operand] < 0) {
        const int32_t from = renamed[operand];
        wide[operand] = widened.append(Op::kCast, widened_dtype(value.dtype), value.shape,
                                       std::span<const int32_t>(&from, 1));
      }
      operands.push_back(wide[operand]);
    }
    const Program::Instr& instr = program[id];
    const int32_t result = widened.append(instr.op, widened_dtype(instr.dtype), instr.shape,
                                          operands, program.ints(id), program.reals(id));
    // Rounded (or wrapped) back after each op, as torch's kernels store each result; a reader
    // that computes widens the rounded value again.
    renamed[id] = is_storage_only(instr.dtype)
                      ? widened.append(Op::kCast, instr.dtype, instr.shape,
                                       std::span<const int32_t>(&result, 1))
                      : result;
  }
  for (int32_t output : program.outputs) widened.outputs.push_back(renamed[output]);
  widened.num_inputs = program.num_inputs;
  return widened;
}

}  // namespace axle
