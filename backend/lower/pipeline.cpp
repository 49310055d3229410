// Pipeline parallelism's directives (slapo.txt §3.3.2): pipeline_split() puts stage
// boundaries after list entries; the stage plan is made here so it fails before any rank starts.
#include "backend/lower/directive_lowering.h"
#include "backend/lower/pipeline_stages.h"

namespace loom::lowering {

void pipeline_split(const Directive& d, const Schedule&, RuntimePlan& plan) { plan.pipeline_splits.push_back(d.target); }

void check_pipeline_stages(const Schedule& schedule, const RuntimePlan& plan) {
  // Throws when the list is too short for pp stages.
  if (plan.pp > 1) plan_pipeline_stages(schedule.tree(), plan.pipeline_splits, plan.pp);
}

}  // namespace loom::lowering
