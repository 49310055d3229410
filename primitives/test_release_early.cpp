// test_release_early(): test-only. This module's sharded parameters are released after the
// forward and not gathered again for its backward: the backward computes with a buffer whose
// contents are gone (zeros, so the fault is deterministic). Needs sharded parameters (s_p > 1).
// `loom verify` must name this module and this directive.
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a module that owns no parameters directly.
void check_has_params(const PrimitiveCall& c) {
  if (c.node().params.empty()) c.fail("module owns no parameters directly", "select a layer with weights, e.g. an mlp.c_fc");
}
}  // namespace

LOOM_PRIMITIVE(test_release_early) {
  return loom::PrimitiveSpec("test_release_early", "Test only: the module's backward finds its sharded parameters released.")
      .on(loom::Scope::NonRoot)
      .check(check_has_params)
      .test_only();
}
