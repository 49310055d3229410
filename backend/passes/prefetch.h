// A first meaning for prefetch(budget=...): the all-gathers of the next prefetched block are
// issued before the current block computes (their waits stay just before first use), as many
// blocks ahead as fit in the budget; auto means one block ahead, as FSDP2 does. The
// memory-aware placement of deepcompile.txt Algorithm 1 replaces this pass later.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool prefetch(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
