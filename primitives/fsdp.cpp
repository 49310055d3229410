// fsdp(): full sharding, the shorthand for shard_states(params=dp, grads=dp, optim=dp).
#include "primitives/registry.h"

namespace {
using namespace loom;

void expand(const PrimitiveCall& c) {
  SourceRange at = c.where();
  Value dp = Value::integer(c.schedule().read_dp(at));
  c.record_as("shard_states", {{"params", dp}, {"grads", dp}, {"optim", dp}});
}
}  // namespace

LOOM_PRIMITIVE(fsdp) {
  return loom::PrimitiveSpec("fsdp", "Fully shard parameters, gradients and optimizer states: shard_states(dp, dp, dp).")
      .on(loom::Scope::Root)
      .effect(expand);
}
