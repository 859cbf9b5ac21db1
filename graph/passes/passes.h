// graph/passes: the compiler's IR passes. Each reads a program and returns the program it makes,
// with the same values at the same outputs, in one linear sweep (graphs may be a million nodes
// deep). They run in the order declared here; AXLE_DISABLE_PASSES switches any of them off.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "axle/graph/passes/program.h"
#include "axle/graph/sharding.h"

namespace axle {

/// Whether swapping the two operands of `op` never changes its result (maximum and minimum do
/// not qualify: they pick between +0 and -0 by position).
[[nodiscard]] bool is_commutative(Op op) noexcept;

/// Canonical operand order for commutative ops (so CSE sees a+b and b+a as one), reshape and
/// permute chains folded into one (and dropped when they change nothing), and transposes of the
/// last two dims folded into the matmul that consumes them.
[[nodiscard]] Program canonicalize(const Program& program);
/// Instructions computing the same op on the same operands with the same attributes become one.
/// Leaves are never merged: each is a distinct input; nor are optimization barriers.
///
/// No pass looks through an optimization barrier (Op::kOptimizationBarrier): its result is not
/// its operand to any of them, so nothing that reads the barrier merges with, folds into or
/// fuses with what computed the operand.
[[nodiscard]] Program eliminate_common_subexpressions(const Program& program);
/// Ops whose operands are all constants, where the result is exact (arithmetic, comparisons,
/// casts between floating types, data movement), become constants; transcendental functions are
/// left to the kernels so results match theirs bit for bit.
[[nodiscard]] Program fold_constants(const Program& program);
/// Instructions no output depends on are removed (leaves stay: the step still binds them).
[[nodiscard]] Program eliminate_dead_code(const Program& program);
/// All_reduces of one step that agree on reduce type, groups, dtype and scale, none reading
/// another's result, become one all_reduce of their operands flattened and concatenated (each
/// under kCombinedAllReduceBytes, together up to 4 MiB): the replicas meet once instead of once
/// each. Each element is folded as before, so every result keeps its bits. What read an earlier
/// member moves after the combined all_reduce, which stands where the last member stood.
[[nodiscard]] Program combine_all_reduces(Program program);
/// The all-reduce combiner leaves operands of this size or more apart: past it, the copies that
/// combining costs (flatten, concatenate, slice, reshape back) outweigh a meeting saved between
/// devices of one process (benchmarks/README.md, collectives_bench).
inline constexpr int64_t kCombinedAllReduceBytes = int64_t{32} << 10;

/// One sharding per instruction of `program` (same ids), decided from the annotations
/// (custom_sharding, fixed) and `input_shardings` (by leaf input position, Instr::input; leaves
/// past its end take the sharding they carry, else replicated). The rules are in
/// sharding_propagation.cpp; throws ShapeError when an input sharding does not fit its leaf.
[[nodiscard]] std::vector<ShardingSpec> propagate_shardings(
    const Program& program, std::span<const ShardingSpec> input_shardings);

/// propagate_shardings, with how many sweeps it took to settle (for tests: at most 8).
struct ShardingPropagation {
  std::vector<ShardingSpec> shardings;
  int sweeps = 0;
};
[[nodiscard]] ShardingPropagation propagate_shardings_counting_sweeps(
    const Program& program, std::span<const ShardingSpec> input_shardings);

/// The shardings the program's leaves carry (mark_sharding on device data), by input position.
[[nodiscard]] std::vector<ShardingSpec> input_shardings(const Program& program);

/// The SPMD partitioner's result: one program every device of the mesh runs on its own shards.
struct PartitionedProgram {
  /// The per-device program (the same for every device): its shapes are local shard shapes and
  /// it meets the other devices in collectives whose groups are device positions 0..N-1.
  Program program;
  /// The leaf input position of the device's partition index (an s64 kParameter the runtime
  /// feeds with the device's position 0..N-1), or -1 when the program does not read it.
  int32_t partition_input = -1;
  /// The sharding of each of program.outputs (the global program's outputs, laid out so).
  std::vector<ShardingSpec> output_shardings;
  /// The sharding of each leaf input, by input position: a device is fed
  /// shard_shape(global, sharding) elements, its tile of the global value.
  std::vector<ShardingSpec> input_shardings;
  /// Bytes the collectives bring to each device per execution (an estimate: ring all_reduce
  /// moves 2 (g - 1) / g of the buffer, all_gather (g - 1) shards, reduce_scatter and all_to_all
  /// (g - 1) / g of their operand, collective_permute one shard).
  int64_t collective_bytes = 0;
  /// The global instruction each instruction of `program` was made for (by id), so dumps can
  /// say where a collective was inserted.
  std::vector<int32_t> origins;
};

/// Not one of run_passes' passes: an SPMD step calls it once, after sharding propagation.
/// Turns `global` (single-device semantics) into the program each of `num_devices` devices runs
/// on its shards, given one sharding per instruction (same ids; each naming devices
/// 0..num_devices-1, or replicated). Each instruction becomes its local computation on shards,
/// with collectives where an operand's layout differs from what the op needs (the rules are in
/// graph/README.md). Throws std::invalid_argument naming the instruction for shardings that do
/// not fit and for ops it cannot partition.
[[nodiscard]] PartitionedProgram partition(const Program& global,
                                           std::span<const ShardingSpec> shardings,
                                           int64_t num_devices);

/// An SPMD compile as text, for XLA_FLAGS=--xla_dump_to (as XLA's dumps after sharding
/// propagation and after SPMD partitioning): the global program with every instruction's
/// sharding, then the per-device program with each collective marked with the global
/// instruction it was inserted for.
[[nodiscard]] std::string spmd_text(const Program& global, std::span<const ShardingSpec> shardings,
                                    const PartitionedProgram& partitioned, int64_t num_devices);

/// The passes, by the names AXLE_DISABLE_PASSES uses. Fusion is the lowering's (actors/).
enum class Pass : uint8_t {
  kCanonicalize,
  kCse,
  kConstantFolding,
  kDce,
  kAllReduceCombiner,
  kFusion,
  kCount
};

[[nodiscard]] std::string_view pass_name(Pass pass) noexcept;

/// Which passes run.
class PassSet {
 public:
  /// Every pass.
  PassSet() = default;
  /// Every pass except those named in AXLE_DISABLE_PASSES (comma-separated, e.g.
  /// "fusion,cse"); an unknown name is a ConfigError that lists the known ones.
  [[nodiscard]] static PassSet from_config();

  [[nodiscard]] bool enabled(Pass pass) const noexcept { return (disabled_ & bit(pass)) == 0; }
  void disable(Pass pass) noexcept { disabled_ |= bit(pass); }

 private:
  static constexpr uint32_t bit(Pass pass) noexcept { return 1u << static_cast<uint32_t>(pass); }
  uint32_t disabled_ = 0;
};

/// Every instruction that computes (anything but the leaves, data movement, fills and casts) on
/// a storage-only dtype (f16, s8, u8, s16: engine/dtype.h) computes in its widened_dtype instead:
/// its storage-only operands are cast up, and a storage-only result is cast back down, so each
/// op rounds (f16) or wraps (the small integers) as torch's does. Not one of the optional passes:
/// run_passes runs it first, always, since the kernels compute in none of these dtypes.
[[nodiscard]] Program widen_storage_only_dtypes(Program program);

/// Runs widen_storage_only_dtypes, then the enabled IR passes in order.
[[nodiscard]] Program run_passes(Program program, const PassSet& passes);

}  // namespace axle
