// verify(): differential testing of the scheduled model against the plain one
// before training (slapo.txt §3.5); `loom run` honours it.
#include "primitives/registry.h"

namespace {
using namespace loom;

// Warnings: verify() twice.
void check_once(const PrimitiveCall& c) {
  if (!c.schedule().directives_on("", "verify").empty())
    c.warn("verify() is already requested", "one call is enough");
}
}  // namespace

LOOM_PRIMITIVE(verify) {
  return loom::PrimitiveSpec("verify", "Check that the scheduled model computes what the plain model computes before training.")
      .on(loom::Scope::Root)
      .check(check_once);
}
