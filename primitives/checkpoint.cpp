// checkpoint(): activation checkpointing; the module's forward is recomputed
// during backward instead of keeping its activations (slapo.txt §3.2.1).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Warnings: checkpointing twice, or inside a module that is already checkpointed.
void check_not_redundant(const PrimitiveCall& c) {
  const Directive* earlier = c.schedule().enclosing_directive(c.module(), "checkpoint");
  if (!earlier) return;
  c.warn(earlier->target == c.node().path ? "already checkpointed at " + earlier->where.to_string()
                                          : "inside `" + earlier->target + "`, checkpointed at " + earlier->where.to_string(),
         "the outer checkpoint already recomputes this module; remove one call");
}
}  // namespace

LOOM_PRIMITIVE(checkpoint) {
  return loom::PrimitiveSpec("checkpoint", "Recompute the module's forward during backward instead of storing activations.")
      .on(loom::Scope::Module)
      .check(check_not_redundant);
}
