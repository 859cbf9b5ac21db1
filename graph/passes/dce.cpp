// graph/passes: dead-code elimination.
#include <vector>

#include "axle/graph/passes/passes.h"

namespace axle {

Program eliminate_dead_code(const Program& program) {
  const std::size_t n = program.size();
  std::vector<uint8_t> live(n, 0);
  for (int32_t output : program.outputs) live[output] = 1;
  for (std::size_t id = n; id-- > 0;) {
    if (program.is_leaf(id)) live[id] = 1;
    if (!live[id]) continue;
    for (int32_t operand : program.operands(id)) live[operand] = 1;
  }
  Program kept;
  kept.reserve(n);
  std::vector<int32_t> renamed(n, -1);
  for (std::size_t id = 0; id < n; ++id) {
    if (live[id]) renamed[id] = kept.append_renamed(program, static_cast<int32_t>(id), renamed);
  }
  for (int32_t output : program.outputs) kept.outputs.push_back(renamed[output]);
  kept.num_inputs = program.num_inputs;
  return kept;
}

}  // namespace axle
