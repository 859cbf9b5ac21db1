// graph/passes: a step's graph as the compiler's passes see it. IR nodes are immutable and shared
// with live tensors, so passes work on this copy instead: instructions in topological order,
// their operands as earlier instruction ids, attributes in pools. A pass reads one program and
// appends what it keeps to a new one, so every pass is one linear sweep with no recursion.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/shape.h"
#include "axle/graph/op.h"

namespace axle {

struct StepGraph;

class Program {
 public:
  struct Instr {
    Op op;
    DType dtype;
    Shape shape;
    /// For kDeviceData and kParameter leaves: the position of the value in the step's inputs.
    int32_t input = -1;
    uint32_t operand_begin = 0;
    uint32_t operand_end = 0;
    uint32_t int_begin = 0;
    uint32_t int_end = 0;
    uint32_t real_begin = 0;
    uint32_t real_end = 0;
  };

  /// The step graph's nodes as instructions, in the same order and with the same ids.
  static Program from(const StepGraph& graph);

  /// Appends an instruction and returns its id. Operands must be earlier ids.
  int32_t append(Op op, DType dtype, const Shape& shape, std::span<const int32_t> operands,
                 std::span<const int64_t> ints = {}, std::span<const double> reals = {},
                 int32_t input = -1);
  /// Appends a copy of instruction `id` of `from` with its operands renamed through `renamed`.
  int32_t append_renamed(const Program& from, int32_t id, std::span<const int32_t> renamed);
  /// A scalar or filled constant (lowers to a fill).
  int32_t append_constant(DType dtype, const Shape& shape, double value);
  /// Removes the last instruction (one a pass appended tentatively).
  void pop_back() noexcept;

  [[nodiscard]] std::size_t size() const noexcept { return instrs_.size(); }
  [[nodiscard]] const Instr& operator[](std::size_t id) const noexcept { return instrs_[id]; }
  [[nodiscard]] std::span<const int32_t> operands(std::size_t id) const noexcept {
    const Instr& i = instrs_[id];
    return {operand_ids_.data() + i.operand_begin, i.operand_end - i.operand_begin};
  }
  [[nodiscard]] std::span<const int64_t> ints(std::size_t id) const noexcept {
    const Instr& i = instrs_[id];
    return {int_pool_.data() + i.int_begin, i.int_end - i.int_begin};
  }
  [[nodiscard]] std::span<const double> reals(std::size_t id) const noexcept {
    const Instr& i = instrs_[id];
    return {real_pool_.data() + i.real_begin, i.real_end - i.real_begin};
  }
  [[nodiscard]] bool is_leaf(std::size_t id) const noexcept {
    return instrs_[id].op == Op::kDeviceData || instrs_[id].op == Op::kParameter;
  }
  /// A kConstant's value.
  [[nodiscard]] double constant_value(std::size_t id) const noexcept { return reals(id)[0]; }
  /// Whether instruction `id` is zero everywhere: a zero fill or constant, or an expand or
  /// reshape of one (what zeros() traces); with `positive`, +0 only (its sign bit clear).
  [[nodiscard]] bool is_zero(int32_t id, bool positive = false) const noexcept;

  /// The values the step hands back, in order (an id may repeat).
  std::vector<int32_t> outputs;
  /// How many inputs the step binds (leaves carry their position); passes keep every leaf.
  int32_t num_inputs = 0;

  /// Reserves room for about `instrs` instructions.
  void reserve(std::size_t instrs);
  /// One line per instruction ("%3 = add f32[2,3] %1, %2"), then the outputs; for tests and dumps.
  [[nodiscard]] std::string to_text() const;
  /// to_text with `note(id)` after each instruction that has one (e.g. its sharding).
  [[nodiscard]] std::string to_text(const std::function<std::string(std::size_t)>& note) const;

 private:
  std::vector<Instr> instrs_;
  std::vector<int32_t> operand_ids_;
  std::vector<int64_t> int_pool_;
  std::vector<double> real_pool_;
};

}  // namespace axle
