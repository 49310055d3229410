// The test-only primitives (LOOM_TEST_PRIMITIVES=1): faults injected on purpose so that
// loom verify's tests can show it finds them.
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

namespace {
void add_fault(FaultKind kind, const Directive& d, RuntimePlan& plan) {
  InjectedFault f;
  f.kind = kind;
  f.module = d.target;
  if (const Value* param = d.arg("param")) f.param = d.target + "." + param->as_string();
  if (const Value* rank = d.arg("rank")) f.rank = static_cast<int>(rank->as_int());
  plan.faults.push_back(f);
}
}  // namespace

void test_corrupt_shard(const Directive& d, const Schedule&, RuntimePlan& plan) { add_fault(FaultKind::CorruptShard, d, plan); }
void test_skip_reduction(const Directive& d, const Schedule&, RuntimePlan& plan) { add_fault(FaultKind::SkipReduction, d, plan); }
void test_release_early(const Directive& d, const Schedule&, RuntimePlan& plan) { add_fault(FaultKind::ReleaseEarly, d, plan); }

void check_release_early(const Directive& d, const Schedule&, const RuntimePlan& plan) {
  if (plan.factors.params == 1)
    unsupported(d, "it releases sharded parameters, but this schedule does not shard them (s_p = 1)",
                "shard parameters first, e.g. sch.zero(stage=3)");
}

}  // namespace loom::lowering
