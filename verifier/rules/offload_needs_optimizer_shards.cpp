#include "verifier/rules/rules.h"

namespace loom::rules {

void offload_needs_optimizer_shards(const Schedule& s, const RuleOptions&) {
  if (s.sharding().optim > 1) return;
  for (const Directive& d : s.trace())
    if (d.primitive == "offload")
      throw UserError(d.where, "offload on sch: this schedule keeps no optimizer shards (s_os = 1), so there are none to offload",
                      "shard the optimizer states first, e.g. sch.zero(stage=1) or sch.shard_states(params=1, grads=1, optim=" +
                          std::to_string(s.dp()) + ")");
}

}  // namespace loom::rules
