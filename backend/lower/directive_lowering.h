// Every directive's lowering, listed in one place: what each primitive with a runtime effect
// contributes to the RuntimePlan. One .cpp per parallelism (data_parallel, sharding,
// tensor_parallel, pipeline, activation_checkpoint, optimizer_offload, compression, replace,
// test_faults); lower_schedule.cpp dispatches on the primitive's name, the only place that
// matches names. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/lower/runtime_plan.h"
#include "lang/schedule.h"

namespace loom::lowering {

// Adds directive `d` of `schedule` to `plan`; throws UserError where the runtime cannot honour it.
using Lower = void (*)(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// Checks `d` against the whole plan, once every directive is lowered.
using Check = void (*)(const Directive& d, const Schedule& schedule, const RuntimePlan& plan);

// data_parallel.cpp (DDP's buckets, and the batch each data-parallel rank trains)
void bucket(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void batch(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// sharding.cpp (Lins factors, ZeRO, FSDP, and what steers the gathers of sharded parameters)
void shard_states(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void prefetch(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void unshard(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// tensor_parallel.cpp (Megatron-LM's split layers and their syncs; mesh() sets tp and pp)
void mesh(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void shard(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void sync(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// The tensor-parallel rank's program: its slices of the shard()ed parameters, and each sync's
// collective after the module's forward (fwd_post) or backward (bwd_post) compute.
void lower_tensor_parallel(const RuntimePlan& plan, const ir::OpTrace& trace, ir::Program& program);
// pipeline.cpp
void pipeline_split(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void plan_stages(const Schedule& schedule, RuntimePlan& plan);
// One stage's program (the program's mesh position says which): the ops it runs (those before
// the list on every stage, its entries, those after the list on the last stage; backward
// through the ops before the list on the first stage only), the parameters it holds (the
// program's only parameters), the activation it receives and sends on (recv, send) and their
// gradients back, and the sum of the gradients of the parameters outside the list over the
// pipeline.
void lower_pipeline_stage(const RuntimePlan& plan, const ir::OpTrace& trace, ir::Program& program);
// activation_checkpoint.cpp
void checkpoint(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void check_checkpoint(const Directive& d, const Schedule& schedule, const RuntimePlan& plan);
// The step program's recomputations: before the backward of a checkpointed module's ops, a
// `recompute` of the module (with their parameters, FLOPs and re-saved activations) and the
// tensor-parallel collectives of its forward, issued again; its ops' forward saves nothing
// (the module's inputs, which the checkpoint keeps, are not counted). A module inside another
// checkpointed one is recomputed with it. Runs after the pipeline and tensor-parallel
// lowerings: a stage recomputes only its own ops, a tensor-parallel rank its slices' FLOPs.
void insert_recomputation(const std::vector<std::string>& checkpointed, ir::Program& program);
// optimizer_offload.cpp
void offload(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// replace.cpp (a module runs a registered alternative implementation)
void replace(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
// compression.cpp (TAGC)
void compress(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void check_compress(const Directive& d, const Schedule& schedule, const RuntimePlan& plan);
// test_faults.cpp (the test-only primitives that break a run on purpose, for loom verify's tests)
void test_corrupt_shard(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void test_skip_reduction(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void test_release_early(const Directive& d, const Schedule& schedule, RuntimePlan& plan);
void check_release_early(const Directive& d, const Schedule& schedule, const RuntimePlan& plan);

// A directive the runtime cannot honour: a UserError at its source location naming it. `hint`
// says what the user can do instead; by default, train without the directive.
[[noreturn]] void unsupported(const Directive& d, const std::string& why, const std::string& hint = "");

}  // namespace loom::lowering
