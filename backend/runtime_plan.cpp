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
      for (const char* f : {"params", "grads", "optim"})
        if (d.arg(f)->as_int() != 1) unsupported(d, "sharded execution (factors above 1) is not implemented yet");
    } else if (d.primitive == "mesh") {
      if (d.arg("tp")->as_int() != 1 || d.arg("pp")->as_int() != 1)
        unsupported(d, "tensor and pipeline parallelism are not implemented yet");
    } else {
      unsupported(d, "its runtime effect is not implemented yet");
    }
  }
  return plan;
}

}  // namespace loom
