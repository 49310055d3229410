// Operator-level gather and release (deepcompile.txt Fig. 4): with sharded parameters, an
// all-gather and its wait just before a parameter's first use in each phase, and a release
// right after its last use there. A parameter used by several ops is released after the last;
// a recompute uses the parameters of every op of its module, so they are gathered before it.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool insert_gather_release(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
