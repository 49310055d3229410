#include "verifier/rules/rules.h"

#include "backend/cost/memory_model.h"
#include "lang/value.h"

namespace loom::rules {

// lins.txt §IV-D's D_modelstate, each state's bytes over its sharding factor, of the 1/(tp * pp)
// of the parameters a rank holds, with the bytes Loom's runtime keeps (4/s_p + 4/s_g + 8/s_os):
// the memory model the simulator and the planner count model states with
// (backend/cost/memory_model.h), so that a schedule `loom check` passes is one they do not find
// over the limit for its states alone. The step's memory walk, which `loom check` runs after the
// rules (cli/check.cpp), counts these states too and adds what the step holds beside them; where
// the schedule offloads optimizer states to the host the walk alone decides, since how many it
// keeps there (offload("optimizer", budget=auto)) is known only from the walk.
void memory_fits(const Schedule& s, const RuleOptions& o) {
  if (o.memory_limit <= 0) return;
  for (const Directive& d : s.trace())
    if (d.primitive == "offload") return;
  const ShardingFactors& f = s.sharding();
  double params = static_cast<double>(s.tree().parameter_count()) / (s.mesh_state().tp * s.mesh_state().pp);
  StateBytes kept = StateBytes::loom_adamw();
  double bytes = model_state_bytes(params, kept, f.params, f.grads, f.optim);
  if (bytes <= static_cast<double>(o.memory_limit)) return;
  auto term = [](double b, int factor) { return std::to_string(static_cast<int>(b)) + "/" + std::to_string(factor); };
  throw UserError(f.where,
                  "model states need " + format_size(static_cast<int64_t>(bytes)) + " per rank, above --memory-limit " +
                      format_size(o.memory_limit) + " (" + term(kept.param, f.params) + " + " + term(kept.grad, f.grads) + " + " +
                      term(kept.optim, f.optim) + " bytes for each of " + std::to_string(static_cast<int64_t>(params)) +
                      " parameters: fp32 parameters and gradients, AdamW's two moments)",
                  "shard more: raise s_p, s_g or s_os in shard_states (each must divide dp = " + std::to_string(s.dp()) + ")");
}

}  // namespace loom::rules
