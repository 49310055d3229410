// prefetch(budget=auto) under a memory limit: proactive prefetching (deepcompile.txt §4.2,
// Algorithm 1, Fig. 6). Each all-gather of a prefetched module moves as early in its phase as
// the memory allows: above an instruction only while the memory around it (memory_walk's
// P_mem, with the gathers already moved) plus the gather's buffer stays within the limit M, and
// the bytes gathered ahead of their use within M_prefetch. Gathers keep their issue order (the
// collective stream runs them first in, first out), and never pass a gather or a release of one
// of their own parameters. Gathers that land at one place are fused where T_c(V1) + T_c(V2) >
// alpha * T_c(V1 + V2). Their waits stay before first use.
//
// Algorithm 1 as printed walks the schedule backwards and moves a group of gathers until the
// group no longer fits; that packs the later gathers together (on Fig. 6's example: the first
// gather at the start, the second and third after the first release), while the figure and
// its text put the first two at the start and the third after the first release. Loom follows
// the figure: gathers in program order, each as early as the memory left by those before it
// allows (tests/unit/memory_passes_test.cpp checks Fig. 6's example).
//
// Without a memory limit there is nothing to plan against, and auto keeps its earlier meaning
// (one block ahead, the prefetch pass). Torch-free.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool proactive_prefetch(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
