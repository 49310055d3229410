#include "autotuner/sim_evaluator.h"

#include <chrono>

#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/pass.h"
#include "backend/sim/simulator.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom::tune {

SimEvaluator::SimEvaluator(std::string schedule_key, ScheduleAt schedule_at, Tracer tracer, std::unique_ptr<ClusterCost> cost,
                           SimShape shape)
    : schedule_key_(std::move(schedule_key)), schedule_at_(std::move(schedule_at)), tracer_(std::move(tracer)), cost_(std::move(cost)),
      shape_(std::move(shape)) {
  shape_.memory_limit = MemoryPlanning::judging_limit(shape_.memory_limit, cost_->cluster().device.memory_bytes);
}

std::string SimEvaluator::context() const {
  return "sim cluster=" + cost_->cluster().name + " schedule=" + schedule_key_ + " model=" + shape_.model +
         " world=" + std::to_string(shape_.world) + " seq=" + std::to_string(shape_.seq) + " micro_batch=" +
         std::to_string(shape_.micro_batch) + " accum=" + std::to_string(shape_.accum) + " memory_limit=" +
         std::to_string(shape_.memory_limit);
}

const ir::OpTrace& SimEvaluator::trace_at(int64_t micro_batch, const std::vector<ModuleReplacement>& replacements) {
  std::string key = std::to_string(micro_batch);
  for (const ModuleReplacement& r : replacements) key += " " + r.module + "=" + r.impl;
  auto known = traces_.find(key);
  if (known != traces_.end()) return known->second;
  return traces_[key] = tracer_({micro_batch, shape_.seq}, replacements);
}

Trial SimEvaluator::evaluate(const Point& point) {
  auto started = std::chrono::steady_clock::now();
  Trial t;
  t.knobs = point;
  try {
    RuntimePlan plan = lower_schedule(*schedule_at_(values_of(point)));
    int64_t micro_batch = plan.micro_batch_or(shape_.micro_batch), accum = plan.accum_or(shape_.accum);
    StepOptions step;
    step.accum = accum;
    step.memory.limit = shape_.memory_limit;  // prefetch(budget=auto) and unshard(auto) plan within it
    step.memory.plan_with(cost_);
    std::vector<ir::Program> stages = lower_stage_programs(plan, trace_at(micro_batch, plan.replacements), shape_.world, step);
    SimResult r = simulate(stages, *cost_, StateBytes::loom_adamw(), /*timeline=*/false);
    t.step_s = r.step_s;
    t.peak_bytes = r.peak_bytes;
    if (r.peak_bytes > shape_.memory_limit) {
      t.status = TrialStatus::Infeasible;
      t.message = "predicted peak " + format_size(r.peak_bytes) + " is above the memory limit " + format_size(shape_.memory_limit);
    } else {
      t.status = TrialStatus::Ok;
      t.objective = static_cast<double>(micro_batch * shape_.seq * accum) / (plan.tp * plan.pp) / r.step_s;
    }
  } catch (const UserError& e) {
    t.status = TrialStatus::Failed;
    t.message = e.diagnostic().message;
  }
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return t;
}

}  // namespace loom::tune
