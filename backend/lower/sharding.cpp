// Sharding's directives (lins.txt §IV): shard_states() (and zero() and fsdp(), which record
// it) sets the factors; prefetch() and unshard() steer the gathers of sharded parameters.
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void shard_states(const Directive& d, const Schedule&, RuntimePlan& plan) {
  // The primitive checked the dependency rule (s_p <= s_g <= s_os, s_g in {s_p, s_os}).
  plan.factors.params = static_cast<int>(d.arg("params")->as_int());
  plan.factors.grads = static_cast<int>(d.arg("grads")->as_int());
  plan.factors.optim = static_cast<int>(d.arg("optim")->as_int());
}

void prefetch(const Directive& d, const Schedule&, RuntimePlan& plan) {
  // Without sharded parameters there is nothing to gather: the prefetch pass finds no gather
  // to move (the primitive warned).
  const Value& b = *d.arg("budget");
  plan.prefetch.push_back({d.target, b.is(ValueKind::Bytes) ? b.as_int() : 0});
}

void unshard(const Directive& d, const Schedule&, RuntimePlan& plan) {
  // With s_p = 1 parameters are always resident and the unshard pass has nothing to keep (the primitive warned).
  // unshard(auto) keeps what fits under the run's memory limit (selective_unshard).
  // (keep=false was refused by the primitive.)
  plan.unshard.push_back({d.target, !d.arg("keep")->is(ValueKind::Bool)});
}

}  // namespace loom::lowering
