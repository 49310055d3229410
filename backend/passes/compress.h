// compress(): TAGC (tagc.txt Algorithm 1) in place of a parameter's reduce-scatter. The pass
// turns the backward reduce-scatter of each parameter below a compressed module into TAGC's
// three collectives: `compress_index` (the 1-bit index of kept entries, OR-reduced over the
// parameter group), `compress` on the same group (the count sketch, 1/ratio of the gradient; a
// small shard's sketch has a floor, backend/exec/tagc.h), and after it `compress_bound` (the error
// bound agreed over the parameter group, and over the replicas when there are any). The
// executor runs the three as one unit at the `compress` (backend/exec/tagc.h). Without sharded
// parameters there is no reduce-scatter to replace.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool compress(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
