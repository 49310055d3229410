// zero(stage=1|2|3): the ZeRO stages as sharding factors (lins.txt §II-B):
// ZeRO-1 = (1, 1, dp), ZeRO-2 = (1, dp, dp), ZeRO-3 = (dp, dp, dp).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a stage other than 1, 2 or 3.
void check_stage(const PrimitiveCall& c) {
  int64_t stage = c.int_arg("stage");
  if (stage < 1 || stage > 3)
    c.fail_at(c.arg_range("stage"), "stage must be 1, 2 or 3, got " + std::to_string(stage),
              "for other combinations use shard_states(params=, grads=, optim=)");
}

void expand(const PrimitiveCall& c) {
  SourceRange at = c.where();
  int64_t stage = c.int_arg("stage");
  int64_t dp = c.schedule().read_dp(at);
  c.record_as("shard_states", {{"params", Value::integer(stage == 3 ? dp : 1)},
                               {"grads", Value::integer(stage >= 2 ? dp : 1)},
                               {"optim", Value::integer(dp)}});
}
}  // namespace

LOOM_PRIMITIVE(zero) {
  return loom::PrimitiveSpec("zero", "ZeRO stage 1, 2 or 3 expressed as sharding factors.")
      .on(loom::Scope::Root)
      .param("stage", loom::ParamType::integer(), "1: optimizer states, 2: + gradients, 3: + parameters")
      .check(check_stage)
      .effect(expand);
}
