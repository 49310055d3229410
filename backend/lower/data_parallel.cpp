// Data parallelism's directives: bucket() groups a module's parameters into one collective
// (the sharded executor's gathers and reductions, or the gradient reducer's buckets); batch()
// sets the batch each data-parallel rank trains a step (the last batch() counts).
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void bucket(const Directive& d, const Schedule&, RuntimePlan& plan) {
  const Value& size = *d.arg("size");
  if (size.is(ValueKind::Auto)) plan.sized_buckets.push_back({d.target, 0, true});
  else if (size.as_int() > 0) plan.sized_buckets.push_back({d.target, size.as_int(), false});
  else plan.buckets.push_back(d.target);  // the whole module
}

void batch(const Directive& d, const Schedule&, RuntimePlan& plan) {
  if (int64_t micro = d.arg("micro")->as_int()) plan.micro_batch = micro;
  if (int64_t accum = d.arg("accum")->as_int()) plan.accum = accum;
}

}  // namespace loom::lowering
