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

// The group the gradient norm's squares are summed over: the ranks that hold disjoint parts of
// the gradients, the s_os ranks of an optimizer block (times the model's tp x pp ranks in a mesh).
GroupRef gradient_norm_group(const MeshPosition& mesh, int optim_shards);
// What a pipeline's sum of the gradients of `params` (those every stage holds) moves: the slice
// of each that one rank updates, 1/s_os of it.
int64_t shared_gradient_bytes(const Program& p, const std::vector<int>& params);
// Sizes again the instructions of an initial program that follow s_os, to p.sharding.optim: the
// gradient norm's group and a pipeline's sum of shared gradients (its only step-phase all-reduce
// on the pipeline). The planner lowers a point's initial program once per mesh and recomputation,
// and gives each point its own s_os so.
void size_by_optimizer_shards(Program& p);

}  // namespace loom::ir
