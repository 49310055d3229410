// bucket(): the collectives of one module's parameters become one collective per kind and
// phase (simplefsdp.txt §3.2). The all-gathers merge into the first of them, so the whole
// bucket arrives at the first member's wait; the gradient reductions (reduce-scatter and
// all-reduce) merge into the last, launched once every member's gradient is complete. A
// phase where a member is gathered or reduced more than once is left as it is. A compress()ed
// parameter's gradient is reduced by TAGC on its own (compress.h): its gathers join the bucket,
// its reductions do not.
#pragma once

#include <functional>

#include "backend/passes/pass.h"

namespace loom::passes {

bool bucket(ir::Program& program, const PassInputs& inputs);

// Merges the collectives of the parameters `member` accepts, one per family (kind, group,
// micro-batches) of `phase` (every phase but the step's when null), as bucket() does, leaving
// compress()ed parameters out of the reductions; false when nothing merged.
bool merge_collectives(ir::Program& program, const std::function<bool(int)>& member, const ir::Phase* phase = nullptr);

}  // namespace loom::passes
