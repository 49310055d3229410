// offload("optimizer", budget=auto|bytes): move optimizer states to host memory
// (deepcompile.txt adaptive offloading); budget caps device memory they may use, 0 keeping
// none there (every state on the host, whatever --memory-limit says).
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: a negative budget.
void check_budget(const PrimitiveCall& c) {
  const Value& b = c.arg("budget");
  if (b.is(ValueKind::Bytes) && b.as_int() < 0)
    c.fail_at(c.arg_range("budget"), "budget must be a size, got " + b.to_source(),
              "e.g. budget=8GiB, budget=0 (every state on the host), or budget=auto");
}
}  // namespace

LOOM_PRIMITIVE(offload) {
  return loom::PrimitiveSpec("offload", "Offload optimizer states to host memory, keeping what fits in the budget on device.")
      .on(loom::Scope::Root)
      .param("what", loom::ParamType::one_of({"optimizer"}), "what to offload")
      .param("budget", loom::ParamType::bytes_or_auto(), loom::Value::auto_(), "device memory the states may keep; 0 = none; auto = decided by the memory limit")
      .check(check_budget);
}
