// bucket(): gather and reduce all parameters below this module as one bucket
// (one collective instead of one per parameter; simplefsdp.txt §3.2).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: no parameters to bucket. Warnings: already inside a bucket.
void check_bucketable(const PrimitiveCall& c) {
  const Schedule& s = c.schedule();
  if (s.tree().parameter_count(c.module()) == 0)
    c.fail("the module owns no parameters, so there is nothing to bucket", "select a module with weights");
  if (const Directive* earlier = s.enclosing_directive(c.module(), "bucket"))
    c.warn("already in the bucket declared at " + earlier->where.to_string(), "remove one of the two calls");
}
}  // namespace

LOOM_PRIMITIVE(bucket) {
  return loom::PrimitiveSpec("bucket", "Gather and reduce the module's parameters as one bucket.")
      .on(loom::Scope::NonRoot)
      .check(check_bucketable);
}
