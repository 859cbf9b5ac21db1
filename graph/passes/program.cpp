// graph/passes: building and printing programs.
#include "axle/graph/passes/program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "axle/graph/sharding.h"
#include "axle/graph/step_graph.h"

namespace axle {

Program Program::from(const StepGraph& graph) {
  Program program;
  program.reserve(graph.nodes.size());
  std::vector<int32_t> input_of(graph.nodes.size(), -1);
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    input_of[graph.inputs[i]] = static_cast<int32_t>(i);
  }
  for (std::size_t id = 0; id < graph.nodes.size(); ++id) {
    const Node& node = *graph.nodes[id];
    // A node holds its sharding as a key (graph/sharding.h); programs hold it encoded.
    const bool sharded = (node.op() == Op::kCustomSharding || node.op() == Op::kDeviceData) &&
                         node.ints().size() == 1;
    const std::vector<int64_t> sharding =
        sharded ? encode_sharding(interned_sharding(node.ints()[0])) : std::vector<int64_t>{};
    program.append(node.op(), node.dtype(), node.shape(), graph.operands(id),
                   sharded ? std::span<const int64_t>(sharding) : node.ints(), node.reals(),
                   input_of[id]);
  }
  program.outputs = graph.outputs;
  program.num_inputs = static_cast<int32_t>(graph.inputs.size());
  return program;
}

void Program::reserve(std::size_t instrs) {
  instrs_.reserve(instrs);
  operand_ids_.reserve(instrs * 2);
}

int32_t Program::append(Op op, DType dtype, const Shape& shape, std::span<const int32_t> operands,
                        std::span<const int64_t> ints, std::span<const double> reals,
                        int32_t input) {
  Instr instr{op, dtype, shape, input};
  instr.operand_begin = static_cast<uint32_t>(operand_ids_.size());
  operand_ids_.insert(operand_ids_.end(), operands.begin(), operands.end());
  instr.operand_end = static_cast<uint32_t>(operand_ids_.size());
  instr.int_begin = static_cast<uint32_t>(int_pool_.size());
  int_pool_.insert(int_pool_.end(), ints.begin(), ints.end());
  instr.int_end = static_cast<uint32_t>(int_pool_.size());
  instr.real_begin = static_cast<uint32_t>(real_pool_.size());
  real_pool_.insert(real_pool_.end(), reals.begin(), reals.end());
  instr.real_end = static_cast<uint32_t>(real_pool_.size());
  instrs_.push_back(instr);
  return static_cast<int32_t>(instrs_.size() - 1);
}

int32_t Program::append_renamed(const Program& from, int32_t id, std::span<const int32_t> renamed) {
  const Instr& instr = from[id];
  const std::span<const int32_t> old_operands = from.operands(id);
  // Operand lists are short; a fixed buffer keeps this off the allocator.
  int32_t buffer[16];
  std::vector<int32_t> spill;
  int32_t* operands = buffer;
  if (old_operands.size() > std::size(buffer)) {
    spill.resize(old_operands.size());
    operands = spill.data();
  }
  for (std::size_t i = 0; i < old_operands.size(); ++i) operands[i] = renamed[old_operands[i]];
  return append(instr.op, instr.dtype, instr.shape, {operands, old_operands.size()}, from.ints(id),
                from.reals(id), instr.input);
}

bool Program::is_zero(int32_t id, bool positive) const noexcept {
  // Operands come before their readers, so the walk ends.
  while ((*this)[id].op == Op::kExpand || (*this)[id].op == Op::kReshape) id = operands(id)[0];
  return ((*this)[id].op == Op::kFill || (*this)[id].op == Op::kConstant) && reals(id)[0] == 0 &&
         !(positive && std::signbit(reals(id)[0]));
}

int32_t Program::append_constant(DType dtype, const Shape& shape, double value) {
  return append(Op::kConstant, dtype, shape, {}, {}, std::span<const double>(&value, 1));
}

void Program::pop_back() noexcept {
  const Instr& last = instrs_.back();
  operand_ids_.resize(last.operand_begin);
  int_pool_.resize(last.int_begin);
  real_pool_.resize(last.real_begin);
  instrs_.pop_back();
}

std::string Program::to_text() const { return to_text(nullptr); }

std::string Program::to_text(const std::function<std::string(std::size_t)>& note) const {
  std::string out;
  for (std::size_t id = 0; id < size(); ++id) {
    const Instr& instr = instrs_[id];
    fmt::format_to(std::back_inserter(out), "%{} = {} {}{}", id, op_name(instr.op),
                   dtype_name(instr.dtype), instr.shape.to_string());
    const char* separator = " ";
    for (int32_t operand : operands(id)) {
      fmt::format_to(std::back_inserter(out), "{}%{}", separator, operand);
      separator = ", ";
    }
    if (instr.op == Op::kConstant) {
      fmt::format_to(std::back_inserter(out), " {}", constant_value(id));
    } else if ((instr.op == Op::kCustomSharding || instr.op == Op::kDeviceData) &&
               !ints(id).empty()) {
      fmt::format_to(std::back_inserter(out), " sharding={}", to_string(decode_sharding(ints(id))));
    } else {
      if (!ints(id).empty()) fmt::format_to(std::back_inserter(out), " ints={}", ints(id));
      if (!reals(id).empty()) fmt::format_to(std::back_inserter(out), " reals={}", reals(id));
    }
    if (instr.input >= 0) fmt::format_to(std::back_inserter(out), " input={}", instr.input);
    if (note) {
      if (std::string text = note(id); !text.empty()) out += "  # " + text;
    }
    out += '\n';
  }
  out += "outputs";
  const char* separator = " ";
  for (int32_t output : outputs) {
    fmt::format_to(std::back_inserter(out), "{}%{}", separator, output);
    separator = ", ";
  }
  out += '\n';
  return out;
}

}  // namespace axle
