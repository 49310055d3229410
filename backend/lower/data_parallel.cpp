// Data parallelism's directives: bucket() groups a module's parameters into one collective
// (the sharded executor's gathers and reductions, or the gradient reducer's buckets).
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void bucket(const Directive& d, const Schedule&, RuntimePlan& plan) { plan.buckets.push_back(d.target); }

}  // namespace loom::lowering
