// actors: IR-to-Executable lowering.
#include "axle/actors/compiler/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "axle/actors/compiler/call_folding.h"
#include "axle/actors/compiler/fusion.h"
#include "axle/actors/compiler/kernel_map.h"
#include "axle/actors/compiler/memory_plan.h"
#include "axle/graph/collectives.h"

namespace axle {

namespace {

// Ops whose kernels broadcast every operand to the output shape.
bool broadcasts_operands(Op op) {
  switch (op) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kPow:
    case Op::kMaximum:
    case Op::kMinimum:
    case Op::kEq:
    case Op::kNe:
    case Op::kLt:
    case Op::kLe:
    case Op::kGt:
    case Op::kGe:
    case Op::kLogicalAnd:
    case Op::kLogicalOr:
    case Op::kWhere:
    case Op::kExpand:
      return true;
    default:
      return false;
  }
}

// Filled constants that only broadcasting ops read are stored as one element, not filled out to
// their shape (zeros_like(activation) would otherwise cost an activation's memory).
std::vector<uint8_t> constants_kept_scalar(const Program& program) {
  std::vector<uint8_t> scalar(program.size(), 0);
  for (std::size_t id = 0; id < program.size(); ++id) {
    scalar[id] = program[id].op == Op::kConstant && program[id].shape.rank() > 0;
  }
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (broadcasts_operands(program[id].op)) continue;
    for (int32_t operand : program.operands(id)) scalar[operand] = 0;
  }
  for (int32_t output : program.outputs) scalar[output] = 0;
  return scalar;
}

// A collective node's last int is a key to its groups (graph/collectives.h); the kernel takes
// the groups themselves.
void expand_groups(KernelCall& call) {
  const int64_t key = call.ints.back();
  std::vector<int64_t> groups = detail::collective_group_ints(key);
  if (groups.empty()) {
    throw std::logic_error(
        fmt::format("lowering {}: no replica groups under key {}", kernel_name(call.kernel), key));
  }
  call.ints.pop_back();
  call.ints.insert(call.ints.end(), groups.begin(), groups.end());
}

// The program with its sharding annotations (custom_sharding) dropped: each reader reads the
// annotated value itself. On one device an annotation changes nothing, and this way it costs no
// copy and splits no fused chain.
Program without_sharding_annotations(const Program& program) {
  Program out;
  out.reserve(program.size());
  std::vector<int32_t> renamed(program.size(), -1);
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program[id].op == Op::kCustomSharding) {
      renamed[id] = renamed[program.operands(id)[0]];
      continue;
    }
    renamed[id] = out.append_renamed(program, static_cast<int32_t>(id), renamed);
  }
  for (int32_t output : program.outputs) out.outputs.push_back(renamed[output]);
  out.num_inputs = program.num_inputs;
  return out;
}

bool has_sharding_annotations(const Program& program) {
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program[id].op == Op::kCustomSharding) return true;
  }
  return false;
}

}  // namespace

IntrusivePtr<Executable> compile_graph(const StepGraph& graph, const PassSet& passes,
                                       int64_t spmd_devices, std::string* spmd_dump) {
  if (spmd_devices <= 0) {
    return lower(run_passes(Program::from(graph), passes), graph.hash,
                 passes.enabled(Pass::kFusion), graph.donated);
  }
  const Program global = run_passes(Program::from(graph), passes);
  const std::vector<ShardingSpec> shardings = propagate_shardings(global, input_shardings(global));
  PartitionedProgram partitioned = partition(global, shardings, spmd_devices);
  if (spmd_dump) *spmd_dump = spmd_text(global, shardings, partitioned, spmd_devices);
  // The device's position is an input the step graph does not have: never donated.
  std::vector<uint8_t> donated;
  if (!graph.donated.empty()) {
    donated.assign(static_cast<std::size_t>(partitioned.program.num_inputs), 0);
    std::copy(graph.donated.begin(), graph.donated.end(), donated.begin());
  }
  IntrusivePtr<Executable> executable = lower(run_passes(std::move(partitioned.program), passes),
                                              graph.hash, passes.enabled(Pass::kFusion), donated);
  auto key = [](const ShardingSpec& sharding) {
    return sharding.is_replicated() ? int64_t{-1} : intern_sharding(sharding);
  };
  Executable::Spmd& spmd = executable->spmd;
  spmd.devices = spmd_devices;
  spmd.partition_input = partitioned.partition_input;
  spmd.collective_bytes = partitioned.collective_bytes;
  for (const ShardingSpec& sharding : partitioned.input_shardings) {
    spmd.input_shardings.push_back(key(sharding));
  }
  for (std::size_t i = 0; i < partitioned.output_shardings.size(); ++i) {
    const ShardingSpec& sharding = partitioned.output_shardings[i];
    spmd.output_shardings.push_back(key(sharding));
    spmd.output_shard_shapes.push_back(shard_shape(global[global.outputs[i]].shape, sharding));
  }
  return executable;
}

IntrusivePtr<Executable> lower(const Program& program, uint64_t graph_hash, bool fuse,
                               std::span<const uint8_t> donated) {
  if (has_sharding_annotations(program)) {
    return lower(without_sharding_annotations(program), graph_hash, fuse, donated);
  }
  auto executable = make_intrusive<Executable>();
  executable->graph_hash = graph_hash;
  if (!donated.empty() && donated.size() != static_cast<std::size_t>(program.num_inputs)) {
    throw std::logic_error(fmt::format("lowering: {} donation flags for {} inputs", donated.size(),
                                       program.num_inputs));
  }
  executable->donated_inputs.assign(donated.begin(), donated.end());
  executable->slots.reserve(program.size());
  executable->input_slots.assign(static_cast<std::size_t>(program.num_inputs), -1);
  const std::vector<uint8_t> scalar = constants_kept_scalar(program);
  std::size_t leaves = 0;
  for (std::size_t id = 0; id < program.size(); ++id) {
    const Program::Instr& instr = program[id];
    executable->slots.push_back({instr.dtype, scalar[id] ? Shape{} : instr.shape});
    if (program.is_leaf(id)) {
      executable->input_slots.at(static_cast<std::size_t>(instr.input)) = static_cast<int32_t>(id);
      ++leaves;
    }
  }
  if (leaves != executable->input_slots.size()) {
    throw std::logic_error(
        fmt::format("lowering: {} leaves for {} inputs", leaves, executable->input_slots.size()));
  }
  executable->output_slots = program.outputs;
  executable->calls.reserve(program.size() - leaves);
  const std::vector<int32_t> root_of =
      fuse ? plan_fusion(program) : std::vector<int32_t>(program.size(), -1);
  // Each node's own call first, so that folding (with fusion) can rewrite a reader's call to
  // compute its producer too.
  std::vector<KernelCall> calls(program.size());
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program.is_leaf(id) || root_of[id] >= 0) continue;
    KernelCall& call = calls[id];
    call.kernel = kernel_for(program[id].op);
    const std::span<const int32_t> operands = program.operands(id);
    call.inputs.assign(operands.begin(), operands.end());
    call.output = static_cast<int32_t>(id);
    call.ints.assign(program.ints(id).begin(), program.ints(id).end());
    if (is_collective(call.kernel)) expand_groups(call);
    call.reals.assign(program.reals(id).begin(), program.reals(id).end());
  }
  std::vector<uint8_t> absorbed(program.size(), 0);
  if (fuse) fold_calls(program, root_of, calls, absorbed);
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program.is_leaf(id) || absorbed[id]) continue;
    if (root_of[id] >= 0) {
      // A member of a fused kernel runs inside its root's call; the root's call runs here.
      if (root_of[id] == static_cast<int32_t>(id)) {
        executable->calls.push_back(fused_call(program, root_of, static_cast<int32_t>(id)));
      }
      continue;
    }
    executable->calls.push_back(std::move(calls[id]));
  }
  plan_memory(*executable);
  return executable;
}

}  // namespace axle
