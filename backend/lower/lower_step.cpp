#include "backend/lower/lower_step.h"

#include "backend/ir/verifier.h"
#include "backend/lower/directive_lowering.h"
#include "backend/lower/mesh_layout.h"
#include "backend/lower/step_program.h"
#include "lang/diagnostics.h"

namespace loom {

ir::Program initial_step_program(const RuntimePlan& plan, const ir::OpTrace& trace, const StepOptions& options) {
  ir::MeshPosition mesh;
  if (plan.model_parallel()) {
    MeshLayout at = MeshLayout::of(plan.factors.dp * plan.tp * plan.pp, options.rank, plan.tp, plan.pp);
    mesh = {plan.tp, plan.pp, at.stage, at.tp_rank};
  }
  ir::Program initial = ir::lower(trace, plan.factors, options.grad_norm, options.accum, mesh);
  // Each parallelism's lowering verified on its own, so a violation names the one that made it.
  auto verified = [&initial](const char* lowering) {
    std::string problem = ir::verify(initial);
    if (!problem.empty()) throw InternalError(std::string("IR verifier, after lowering ") + lowering + ": " + problem);
  };
  lowering::lower_pipeline_stage(plan, trace, initial);
  verified("lower_pipeline_stage");
  lowering::lower_tensor_parallel(plan, trace, initial);
  verified("lower_tensor_parallel");
  // Last: a stage recomputes only its own ops, and a recomputation replays the tensor-parallel
  // collectives of the forward it repeats.
  lowering::insert_recomputation(plan.checkpoint, initial);
  verified("insert_recomputation");
  // Once tensor parallelism has sliced the parameters: what follows s_os, by the formula the
  // planner sizes each plan's copy with.
  ir::size_by_optimizer_shards(initial);
  return initial;
}

ir::Program finish_step_program(ir::Program initial, const RuntimePlan& plan, const StepOptions& options,
                                std::vector<PassRecord>* records, const PipelineDebug& debug) {
  passes::PassInputs inputs;
  inputs.prefetch = plan.prefetch;
  inputs.buckets = plan.buckets;
  inputs.sized_buckets = plan.sized_buckets;
  inputs.unshard = plan.unshard;
  inputs.compress = plan.compress;
  inputs.data_parallel_bucket_bytes = options.bucket_bytes;
  inputs.offload = plan.offload;
  inputs.offload_budget = plan.offload_budget;
  inputs.offload_automatic = plan.offload_automatic;
  inputs.memory = options.memory;
  ir::Program program = run_passes(std::move(initial), inputs, pipeline_passes(), records, debug);
  std::string problem = ir::verify_complete(program);
  if (!problem.empty()) throw InternalError("IR verifier, end of pipeline: " + problem);
  return program;
}

ir::Program lower_step(const RuntimePlan& plan, const ir::OpTrace& trace, std::vector<PassRecord>* records,
                       const PipelineDebug& debug, const StepOptions& options) {
  return finish_step_program(initial_step_program(plan, trace, options), plan, options, records, debug);
}

int stage_rank(const RuntimePlan& plan, int world, int stage) { return MeshLayout::of(world, 0, plan.tp, plan.pp).rank_at(stage, 0, 0); }

std::vector<ir::Program> lower_stage_programs(const RuntimePlan& plan, const ir::OpTrace& trace, int world, StepOptions options,
                                              const PipelineDebug& debug) {
  std::vector<ir::Program> stages;
  for (int s = 0; s < plan.pp; ++s) {
    options.rank = stage_rank(plan, world, s);
    stages.push_back(lower_step(plan, trace, nullptr, debug, options));
  }
  return stages;
}

}  // namespace loom
