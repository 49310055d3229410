// Lowering a step: a schedule's RuntimePlan and a traced model become the step's program —
// the initial program (step_program.h), then every pass of the pipeline (pass_pipeline.h).
// What `loom explain` prints and what the executor runs. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/ir/op_trace.h"
#include "backend/lower/runtime_plan.h"
#include "backend/passes/pass_pipeline.h"

namespace loom {

// What of the run, beside the schedule, shapes the step's program.
struct StepOptions {
  int64_t bucket_bytes = 1 << 20;  // DDP's gradient bucket size
  bool grad_norm = true;           // clipping, or metrics that report it, need the global gradient norm
  int64_t accum = 1;               // micro-batches per step
  int rank = 0;                    // under a mesh, whose program: its stage and tensor-parallel slices
  MemoryPlanning memory;           // the limit (and instruction times) the memory-aware passes plan with
};

// The step program of a plan (lower_schedule) on a traced model. The IR is verified after each
// parallelism's lowering, after every pass and, whole, at the end: a violation is an
// InternalError naming the lowering or the pass.
ir::Program lower_step(const RuntimePlan& plan, const ir::OpTrace& trace, std::vector<PassRecord>* records,
                       const PipelineDebug& debug, const StepOptions& options = {});

// lower_step's two halves. The initial program: the compute ops, the step's tail, a mesh rank's
// stage and slices, the recomputation. Of the sharding it reads only dp and s_os (the tail's
// norm group, a pipeline's shared-gradient sum, sized last by ir::size_by_optimizer_shards), so
// plans of one dp share it (loom plan's planner does) once its `sharding` is set to theirs and
// size_by_optimizer_shards has sized it again.
ir::Program initial_step_program(const RuntimePlan& plan, const ir::OpTrace& trace, const StepOptions& options);
// The pass pipeline on an initial program, and the final verification.
ir::Program finish_step_program(ir::Program initial, const RuntimePlan& plan, const StepOptions& options,
                                std::vector<PassRecord>* records, const PipelineDebug& debug);
// The rank whose program a pipeline stage's is (dp rank 0, tp rank 0).
int stage_rank(const RuntimePlan& plan, int world, int stage);

// One program per pipeline stage, in stage order: that of the stage's first rank (dp rank 0,
// tp rank 0) at `world` ranks, which every rank of the stage mirrors: what the simulator replays.
// `options.rank` is ignored.
std::vector<ir::Program> lower_stage_programs(const RuntimePlan& plan, const ir::OpTrace& trace, int world, StepOptions options,
                                              const PipelineDebug& debug = {});

}  // namespace loom
