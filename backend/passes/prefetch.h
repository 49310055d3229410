// prefetch(budget=BYTES): the all-gathers of the next prefetched block are issued before the
// current block computes (their waits stay just before first use), as many blocks ahead as fit
// in the budget. budget=auto without a memory limit means one block ahead, as FSDP2 does; under
// a limit it is proactive_prefetch's (deepcompile.txt Algorithm 1).
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool prefetch(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
