// bucket(size=0|BYTES|auto): gather and reduce all parameters below this module as one bucket
// (one collective instead of one per parameter; simplefsdp.txt §3.2), or in buckets of at most
// BYTES, or sized for overlap under the memory limit (auto: SimpleFSDP's auto-wrapping).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: no parameters to bucket, a negative size. Warnings: already inside a bucket.
void check_bucketable(const PrimitiveCall& c) {
  const Value& size = c.arg("size");
  if (size.is(ValueKind::Bytes) && size.as_int() < 0)
    c.fail_at(c.arg_range("size"), "size must be a byte size, got " + size.to_source(), "e.g. size=64MiB, size=auto, or size=0 for the whole module");
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
      .param("size", loom::ParamType::bytes_or_auto(), loom::Value::bytes(0),
             "0: the whole module as one bucket; bytes: buckets of at most this; auto: sized to overlap compute (SimpleFSDP)")
      .check(check_bucketable);
}
