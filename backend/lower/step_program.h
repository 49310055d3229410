// The step's initial program: a traced model and the schedule's sharding become the initial IR of one
// step: forward compute ops in order, backward ones in reverse, then the step's tail: the
// gradient norm and clipping (an all-reduce when parts of the gradients live on different
// ranks), the optimizer step, and the all-reduce of the loss the run reports. Gradient and parameter
// communication is added by the passes.
#pragma once

#include "backend/ir/ir.h"
#include "backend/ir/op_trace.h"

namespace loom::ir {

// `grad_norm`: the run needs the global gradient norm (clipping, or metrics that report it).
// `micro_batches`: the forward and backward run that many times per step (gradient accumulation).
// `mesh`: the rank's place in a mesh; the norm is then summed over the model's tp x pp ranks
// and the loss over every rank (the stage's ops and the syncs are added by the mesh lowering).
Program lower(const OpTrace& trace, const Sharding& sharding, bool grad_norm = true, int64_t micro_batches = 1,
              const MeshPosition& mesh = {});

}  // namespace loom::ir
