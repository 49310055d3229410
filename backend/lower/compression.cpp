// TAGC's directive (tagc.txt): compress() replaces the reduce-scatter of a module's sharded
// gradients by a compressed one; sparsity=auto is resolved by the paper's Table 1.
#include "backend/lower/directive_lowering.h"
#include "primitives/tagc_table1.h"

namespace loom::lowering {

void compress(const Directive& d, const Schedule&, RuntimePlan& plan) {
  CompressRequest c{d.target, d.arg("ratio")->as_number(), static_cast<int>(d.arg("index_bits")->as_int())};
  const Value& s = *d.arg("sparsity");
  c.sparsity = s.is(ValueKind::Float) ? s.as_number() : tagc_table1_sparsity(c.ratio);
  plan.compress.push_back(c);
}

void check_compress(const Directive& d, const Schedule& schedule, const RuntimePlan& plan) {
  if (plan.factors.params == 1 && schedule.dp() > 1)
    unsupported(d, "TAGC replaces the reduce-scatter of sharded parameters, and this schedule does not shard them "
                   "(s_p = 1)",
                "shard them with zero(stage=3) or fsdp() first, or remove the compress()");
}

}  // namespace loom::lowering
