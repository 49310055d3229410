// unshard(true): selective unsharding (deepcompile.txt §4.3). The module's parameters stay
// gathered from their forward gather until their last backward use: the forward release and
// the backward all-gather (and its wait) go, so the backward needs no communication for them.
// With gradient accumulation they stay gathered across the micro-batches as well: the forward
// all-gather runs in the first micro-batch only and the backward release in the last. Parameters
// stay sharded between steps, and every rank does the same. unshard(auto) is
// selective_unshard's (the same rewrite, for the parameters that fit under the memory limit).
#pragma once

#include <vector>

#include "backend/passes/pass.h"

namespace loom::passes {

bool unshard(ir::Program& program, const PassInputs& inputs);

// Keeps the parameters `kept` marks (by index) gathered from forward to backward: drops them
// from the forward releases and the backward all-gathers, and the waits of gathers left empty.
// A bucket's gather that keeps some members moves the bytes of the members it still gathers.
// Over several micro-batches, those `across` marks (kept ones) stay gathered across them: their
// forward gather (split out of a bucket's, with a wait of its own) and its wait run in the
// first only, their backward release in the last only.
void keep_gathered(ir::Program& program, const std::vector<bool>& kept, const std::vector<bool>& across);

}  // namespace loom::passes
