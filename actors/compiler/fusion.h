// actors: elementwise fusion — which instructions of a program run together as one kFused kernel
// (see backends/executable.h), chains of elementwise ops and the reduction that may end them, and
// the kernel call that runs them.
#pragma once

#include <vector>

#include "axle/backends/executable.h"
#include "axle/graph/passes/program.h"

namespace axle {

/// For each instruction: the root of the fused kernel computing it, or -1 when it runs as its
/// own kernel. A cluster is a root (a floating-point elementwise op) and the elementwise ops and
/// expands feeding only it, transitively; none of its members but the root is stored. A
/// floating-point sum, mean, max or min is a root too when its operand is an elementwise op that
/// only it reads and its reduced dims are adjacent or surround one run of kept dims (a
/// per-channel statistic; fusible_reduction_dims): the kernel then
/// folds the chain into the reduction's output and stores nothing else. A cast of an f32 chain
/// to bf16 is a root too: the chain runs in f32 and is rounded as it is stored. The chain is
/// computed at the root's shape (a reduction's: its operand's); members whose vector code is an
/// approximation (exp, tanh, sqrt, ...) must have that shape, so that each value is computed at the
/// same vector position as its unfused kernel would (same bits).
[[nodiscard]] std::vector<int32_t> plan_fusion(const Program& program);

/// The kFused call computing cluster `root` into slot `root` (instruction ids are slot ids).
[[nodiscard]] KernelCall fused_call(const Program& program, const std::vector<int32_t>& root_of,
                                    int32_t root);

}  // namespace axle
