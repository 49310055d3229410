// checkpoint(): activation checkpointing; the module's forward is recomputed
// during backward instead of keeping its activations (slapo.txt §3.2.1).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Warnings: checkpointing twice, or inside a module that is already checkpointed.
void check_not_redundant(const PrimitiveCall& c) {
  const Schedule& s = c.schedule();
  for (int m = c.module(); m >= 0; m = s.tree().node(m).parent) {
    auto earlier = s.directives_on(s.tree().node(m).path, "checkpoint");
    if (earlier.empty()) continue;
    c.warn(m == c.module() ? "already checkpointed at " + earlier[0]->where.to_string()
                           : "inside `" + s.tree().node(m).path + "`, checkpointed at " + earlier[0]->where.to_string(),
           "the outer checkpoint already recomputes this module; remove one call");
    return;
  }
}
}  // namespace

LOOM_PRIMITIVE(checkpoint) {
  return loom::PrimitiveSpec("checkpoint", "Recompute the module's forward during backward instead of storing activations.")
      .on(loom::Scope::Module)
      .check(check_not_redundant);
}
