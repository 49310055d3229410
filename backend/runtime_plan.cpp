#include "backend/runtime_plan.h"

namespace loom {
namespace {

[[noreturn]] void unsupported(const Directive& d, const std::string& why) {
  throw UserError(d.where, d.primitive + " is not yet supported at runtime: " + why,
                  "`loom check` accepts this schedule, but `loom run` cannot honour `" + d.to_sched() +
                      "` yet; remove it to train with plain data parallelism");
}

}  // namespace

RuntimePlan plan_runtime(const Schedule& schedule) {
  RuntimePlan plan;
  for (const Directive& d : schedule.trace()) {
    if (d.primitive == "checkpoint") {
      plan.checkpoint.push_back(d.target);
    } else if (d.primitive == "shard_states") {
      // The primitive checked the dependency rule (s_p <= s_g <= s_os, s_g in {s_p, s_os}).
      plan.factors.params = static_cast<int>(d.arg("params")->as_int());
      plan.factors.grads = static_cast<int>(d.arg("grads")->as_int());
      plan.factors.optim = static_cast<int>(d.arg("optim")->as_int());
    } else if (d.primitive == "prefetch") {
      // Honoured by the sharded executor, which follows the IR's placement of gathers; without
      // sharded parameters there is nothing to gather (the primitive warned).
    } else if (d.primitive == "verify") {
      // The launcher runs loom verify first (cli/run.cpp); the ranks have nothing to do.
    } else if (d.primitive.rfind("test_", 0) == 0) {
      const Value* param = d.arg("param");
      const Value* rank = d.arg("rank");
      plan.faults.push_back({d.primitive, d.target, param ? d.target + "." + param->as_string() : "",
                             rank ? static_cast<int>(rank->as_int()) : 0});
    } else if (d.primitive == "mesh") {
      if (d.arg("tp")->as_int() != 1 || d.arg("pp")->as_int() != 1)
        unsupported(d, "tensor and pipeline parallelism are not implemented yet");
    } else {
      unsupported(d, "its runtime effect is not implemented yet");
    }
  }
  for (const Directive& d : schedule.trace())
    if (d.primitive == "test_release_early" && plan.factors.params == 1)
      unsupported(d, "it releases sharded parameters, but this schedule does not shard them (s_p = 1)");
  return plan;
}

}  // namespace loom
