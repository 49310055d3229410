// Lowering: a traced model and the schedule's sharding become the initial IR of one
// step: forward compute ops in order, backward ones in reverse, then the optimizer step.
// Communication is added by the passes.
#pragma once

#include "backend/ir/ir.h"
#include "backend/ir/op_trace.h"

namespace loom::ir {

Program lower(const OpTrace& trace, const Sharding& sharding);

}  // namespace loom::ir
