#include "backend/plan/planner.h"

#include <algorithm>

#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/sim/simulator.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "verifier/schedule_rules.h"

namespace loom {
namespace {

// The schedule's runtime plan; throws UserError where the language or lowering refuses it.
RuntimePlan runtime_plan_of(std::shared_ptr<const ModuleTree> tree, const std::string& text, const PlannerOptions& o) {
  Schedule sch(std::move(tree), ScheduleContext{o.world, o.local_world});
  SourceManager sources;
  InterpreterOptions io;
  io.print_to = nullptr;
  Interpreter(sch, sources, io).run_source("plan.sched", text);
  check_schedule_rules(sch);
  return lower_schedule(sch);
}

// The model's FLOPs in one step over every rank: forward and backward (twice the forward) of
// each replica's micro-batches; recomputation is not counted (Megatron-LM's MFU).
double model_flops_per_step(const ir::OpTrace& trace, const PlanPoint& p, const PlannerOptions& o) {
  double forward = 0;
  for (const ir::TracedOp& op : trace.forward) forward += op.flops;
  return 3 * forward * static_cast<double>(o.accum) * p.dp(o.world);
}

// Whether the model states alone exceed the limit: then simulating cannot help.
bool states_exceed(const ModuleTree& tree, const PlanPoint& p, int64_t limit) {
  double elements = static_cast<double>(tree.parameter_count()) / (p.tp * p.pp);
  return model_state_bytes(elements, StateBytes::loom_adamw(), p.params, p.grads, p.optim) > static_cast<double>(limit);
}

}  // namespace

PlanReport plan_parallelism(std::shared_ptr<const ModuleTree> tree, const ir::OpTrace& trace, const ClusterCost& cost,
                            const PlannerOptions& o, const std::function<void(size_t, size_t)>& progress) {
  std::vector<PlanPoint> points = enumerate_plan_space(*tree, {o.world, o.local_world, o.checkpoint});
  int64_t limit = o.memory_limit > 0 ? o.memory_limit : cost.cluster().device.memory_bytes;
  const DeviceSpec& device = cost.cluster().device;
  double peak_flops = cost.precision() == Precision::Bf16 ? device.matrix_flops_bf16 : device.matrix_flops_fp32;
  PlanReport report;
  for (size_t i = 0; i < points.size(); ++i) {
    if (progress) progress(i, points.size());
    const PlanPoint& p = points[i];
    if (states_exceed(*tree, p, limit)) {
      ++report.over_memory;
      continue;
    }
    PlannedStep step{p, plan_schedule_text(*tree, p)};
    std::vector<ir::Program> stages;
    try {
      StepOptions step_options;
      step_options.grad_norm = o.grad_norm;
      step_options.accum = o.accum;
      stages = lower_stage_programs(runtime_plan_of(tree, step.schedule, o), trace, o.world, step_options);
    } catch (const UserError& e) {
      if (report.refused++ == 0) report.first_refusal = e.diagnostic().message;
      continue;
    }
    SimResult r = simulate(stages, cost);
    ++report.evaluated;
    if (r.peak_bytes > limit) {
      ++report.over_memory;
      continue;
    }
    step.step_s = r.step_s;
    step.compute_s = r.compute_s;
    step.exposed_comm_s = r.exposed_comm_s;
    step.peak_bytes = r.peak_bytes;
    step.mfu = model_flops_per_step(trace, p, o) / (r.step_s * o.world * peak_flops);
    step.tokens_per_s_per_rank = static_cast<double>(o.micro_batch * o.seq * o.accum) * p.dp(o.world) / (r.step_s * o.world);
    report.feasible.push_back(std::move(step));
  }
  if (progress) progress(points.size(), points.size());
  // Best first by throughput: a plan with fewer data-parallel replicas (a mesh) processes fewer
  // tokens per step, so its step time alone would flatter it; for plans of the same tokens per
  // step this is their order by step time.
  std::stable_sort(report.feasible.begin(), report.feasible.end(), [](const PlannedStep& a, const PlannedStep& b) {
    return a.tokens_per_s_per_rank > b.tokens_per_s_per_rank;
  });
  return report;
}

}  // namespace loom
