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
      int64_t p = d.arg("params")->as_int(), g = d.arg("grads")->as_int(), os = d.arg("optim")->as_int();
      if (p == 1 && os > 1)
        plan.optim_shard = static_cast<int>(os);  // ZeRO-1/2 (s_g is 1 or s_os by the dependency rule)
      else if (p == g && g == os)
        plan.shard = static_cast<int>(p);
      else
        unsupported(d, "the runtime shards parameters with equal factors (s_p = s_g = s_os) or only optimizer states "
                       "(s_p = 1) so far; hybrids such as these are not implemented yet");
    } else if (d.primitive == "prefetch") {
      // Honoured by the sharded executor, which follows the IR's placement of gathers.
    } else if (d.primitive == "mesh") {
      if (d.arg("tp")->as_int() != 1 || d.arg("pp")->as_int() != 1)
        unsupported(d, "tensor and pipeline parallelism are not implemented yet");
    } else {
      unsupported(d, "its runtime effect is not implemented yet");
    }
  }
  if (plan.shard > 1) {
    const Directive* sharding = nullptr;
    for (auto& d : schedule.trace())
      if (d.primitive == "shard_states") sharding = &d;
    if (!plan.checkpoint.empty())
      unsupported(*sharding, "checkpoint() combined with sharded parameters is not implemented yet");
    for (int i = 0; i < schedule.tree().size(); ++i)
      if (schedule.tree().node(i).type == "MixtralSparseMoe")
        unsupported(*sharding, "sharding a mixture of experts (data-dependent call order) is not implemented yet");
  }
  for (const Directive& d : schedule.trace())
    if (d.primitive == "prefetch" && plan.shard == 1)
      unsupported(d, "prefetch gathers sharded parameters, but this schedule does not shard them");
  return plan;
}

}  // namespace loom
