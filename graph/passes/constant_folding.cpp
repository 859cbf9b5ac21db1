// graph/passes: constant folding. A constant is a kConstant or kFill instruction: one value
// filling its shape. Values are kept rounded to their dtype, so that folding a chain rounds
// where the kernels would.
#include <cmath>
#include <optional>
#include <vector>

#include "axle/engine/element.h"
#include "axle/graph/passes/passes.h"

namespace axle {
namespace {

double round_to(DType dtype, double value) {
  alignas(8) unsigned char bytes[8];
  store_element(dtype, value, bytes);
  return load_element(dtype, bytes);
}

bool is_integer(DType dtype) { return dtype == DType::kInt32 || dtype == DType::kInt64; }

// Integer results are folded only where they are exact and in range (the kernels wrap).
bool representable(DType dtype, double value) {
  if (dtype == DType::kInt32) {
    return std::trunc(value) == value && value >= -2147483648.0 && value <= 2147483647.0;
  }
  if (dtype == DType::kInt64) return std::trunc(value) == value && std::fabs(value) <= 0x1p53;
  return true;
}

// The value `op` computes from constant operands, or nothing when folding it would not give
// the kernel's bits.
std::optional<double> evaluate(Op op, DType dtype, DType operand_dtype,
                               const std::vector<double>& v) {
  const bool floating = is_floating(operand_dtype);
  const bool boolean = operand_dtype == DType::kBool;
  switch (op) {
    case Op::kAdd:
      if (boolean) return (v[0] != 0) || (v[1] != 0);
      return v[0] + v[1];
    case Op::kSub:
      if (boolean) return std::nullopt;
      return v[0] - v[1];
    case Op::kMul:
      if (boolean) return (v[0] != 0) && (v[1] != 0);
      return v[0] * v[1];
    case Op::kDiv:
      if (!floating) return std::nullopt;
      return v[0] / v[1];
    case Op::kMaximum:
      if (boolean) return (v[0] != 0) || (v[1] != 0);
      return (v[0] > v[1] || std::isnan(v[0])) ? v[0] : v[1];
    case Op::kMinimum:
      if (boolean) return (v[0] != 0) && (v[1] != 0);
      return (v[0] < v[1] || std::isnan(v[0])) ? v[0] : v[1];
    case Op::kNeg:
      if (boolean) return std::nullopt;
      return -v[0];
    case Op::kAbs:
      return std::fabs(v[0]);
    case Op::kRelu:
      return v[0] < 0 ? 0.0 : v[0];
    case Op::kSqrt:
      if (!floating) return std::nullopt;
      return std::sqrt(v[0]);
    case Op::kEq:
      return v[0] == v[1];
    case Op::kNe:
      return v[0] != v[1];
    case Op::kLt:
      return v[0] < v[1];
    case Op::kLe:
      return v[0] <= v[1];
    case Op::kGt:
      return v[0] > v[1];
    case Op::kGe:
      return v[0] >= v[1];
    case Op::kLogicalAnd:
      return (v[0] != 0) && (v[1] != 0);
    case Op::kLogicalOr:
      return (v[0] != 0) || (v[1] != 0);
    case Op::kLogicalNot:
      return v[0] == 0;
    case Op::kWhere:
      return v[0] != 0 ? v[1] : v[2];
    case Op::kCast:
      // Floating to integer conversion is the kernel's business (truncation, NaN).
      if (floating && is_integer(dtype)) return std::nullopt;
      return v[0];
    case Op::kReshape:
    case Op::kPermute:
    case Op::kExpand:
    case Op::kSlice:
      return v[0];  // the same value, filling another shape
    default:
      return std::nullopt;
  }
}

bool is_constant(const Program& p, int32_t id) {
  return p[id].op == Op::kConstant || p[id].op == Op::kFill;
}

}  // namespace

Program fold_constants(const Program& program) {
  const std::size_t n = program.size();
  Program out;
  out.reserve(n);
  std::vector<int32_t> renamed(n, -1);
  std::vector<double> values;
  for (std::size_t id = 0; id < n; ++id) {
    const Program::Instr& instr = program[id];
    const std::span<const int32_t> operands = program.operands(id);
    bool foldable = !operands.empty();
    values.clear();
    for (int32_t operand : operands) {
      const int32_t source = renamed[operand];
      if (!is_constant(out, source)) {
        foldable = false;
        break;
      }
      const double raw = out.reals(source)[0];
      if (!representable(out[source].dtype, std::trunc(raw))) {  // (a fill the kernel would wrap)
        foldable = false;
        break;
      }
      values.push_back(round_to(out[source].dtype, raw));
    }
    if (foldable) {
      // where's condition is bool; its value operands carry the dtype.
      const int32_t typed = instr.op == Op::kWhere ? renamed[operands[1]] : renamed[operands[0]];
      const std::optional<double> value = evaluate(instr.op, instr.dtype, out[typed].dtype, values);
      if (value && representable(instr.dtype, *value)) {
        renamed[id] = out.append_constant(instr.dtype, instr.shape, round_to(instr.dtype, *value));
        continue;
      }
    }
    renamed[id] = out.append_renamed(program, static_cast<int32_t>(id), renamed);
  }
  for (int32_t output : program.outputs) out.outputs.push_back(renamed[output]);
  out.num_inputs = program.num_inputs;
  return out;
}

}  // namespace axle
