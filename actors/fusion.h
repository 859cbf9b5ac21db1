// actors: elementwise fusion — which instructions of a program run together as one kFused kernel
// (see backends/executable.h), and the kernel call that runs them.
#pragma once

#include <vector>

#include "backends/executable.h"
#include "graph/passes/program.h"

namespace axle {

/// For each instruction: the root of the fused kernel computing it, or -1 when it runs as its
/// own kernel. A cluster is a root (a floating-point elementwise op) and the elementwise ops and
/// expands feeding only it, transitively; none of its members but the root is stored. Members
/// whose vector code is an approximation (exp, tanh, sqrt, ...) must have the root's shape, so that
/// each value is computed at the same vector position as its unfused kernel would (same bits).
[[nodiscard]] std::vector<int32_t> plan_fusion(const Program& program);

/// The kFused call computing cluster `root` into slot `root` (instruction ids are slot ids).
[[nodiscard]] KernelCall fused_call(const Program& program, const std::vector<int32_t>& root_of,
                                    int32_t root);

}  // namespace axle
