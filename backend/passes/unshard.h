// unshard(true): selective unsharding (deepcompile.txt §4.3). The module's parameters stay
// gathered from their forward gather until their last backward use: the forward release and
// the backward all-gather (and its wait) go, so the backward needs no communication for them.
// Parameters stay sharded between steps, and every rank does the same.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool unshard(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
