// The window_reductions pass, reductions in flight (simplefsdp.txt §3.1: each gradient is
// reduce-scattered as soon as it is complete): the wait of each backward reduce-scatter (or TAGC
// compress), with what completes the reduction after it (the gradient peers' all-reduce and
// select & drop, the replicas' all-reduce, TAGC's bound), moves to just after the launch of the
// reduction `reductions_in_flight` later (after the run of launches it stands in: the reductions
// one op's backward completes together, which a rank launches in its gradient hooks before it
// reaches the program's next instruction, or after a pipeline stage's send of its input's
// gradient, which the previous stage waits for), so that many overlap the backward compute; the
// last ones complete at the end of backward. The sharded executor completes a reduction where the
// program waits for it: this window is the program's, not a constant of the executor.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool window_reductions(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
