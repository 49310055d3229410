// Optimizer-state offload's directive: offload("optimizer") keeps states on the host, all of
// them with budget=auto, or all but `budget` bytes; budget=auto under a memory limit is
// adaptive offloading (backend/passes/adaptive_offload.h).
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void offload(const Directive& d, const Schedule&, RuntimePlan& plan) {
  plan.offload = true;
  const Value& b = *d.arg("budget");
  plan.offload_budget = b.is(ValueKind::Bytes) ? b.as_int() : 0;
  plan.offload_automatic = !b.is(ValueKind::Bytes);
}

}  // namespace loom::lowering
