// bucket(): the collectives of one module's parameters become one collective per kind and
// phase (simplefsdp.txt §3.2). The all-gathers merge into the first of them, so the whole
// bucket arrives at the first member's wait; the gradient reductions (reduce-scatter and
// all-reduce) merge into the last, launched once every member's gradient is complete. A
// phase where a member is gathered or reduced more than once is left as it is.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool bucket(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
