// Gradient reduction (lins.txt §IV-C): as soon as a parameter's gradient is complete (after
// its last use in backward) it is reduced to its owners, and waited before the optimizer step:
//   s_g = 1:           all-reduce over all dp ranks (plain data parallelism);
//   s_g = s_p > 1:     reduce-scatter inside the parameter group, then all-reduce of the
//                      shard across the dp / s_g replicas;
//   s_g > s_p:         reduce-scatter inside the parameter group (when s_p > 1), all-reduce
//                      across the dp / s_p replicas, then select & drop keeps 1 / (s_g / s_p).
// A parameter the rank updates without computing its gradient is reduced after the last
// backward compute. With several micro-batches, the reduce-scatter runs in each; what crosses replicas runs in
// the last only (the data-parallel all-reduce as DDP's no_sync); before it, s_g > s_p
// all-reduces among the s_g / s_p gradient peers and selects & drops in each micro-batch.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool insert_gradient_reduction(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
