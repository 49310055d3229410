// offload("optimizer"): optimizer states in host memory (deepcompile.txt §4.4, in its static
// form). Around the optimizer step, an `offload` copies the gradients of this rank's optimizer
// slices that live on the host there, and a `reload` copies their updated values back. Which
// slices: in the program's parameter order, those whose AdamW states (8 bytes per element) fit
// in the budget stay on the device, until the first that does not; the rest are offloaded
// (budget 0, offload's auto without a memory limit: all; under one, adaptive_offload decides).
// The executor offloads exactly the parameters these instructions name.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool offload_optimizer(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
