#include "verifier/rules/rules.h"

namespace loom::rules {

void compress_needs_reduction(const Schedule& s, const RuleOptions&) {
  if (s.dp() > 1) return;
  for (const Directive& d : s.trace())
    if (d.primitive == "compress")
      throw UserError(d.where,
                      "compress on `" + d.target + "`: its gradients are never reduced (data-parallel degree 1 at world " +
                          std::to_string(s.world()) + ")",
                      "compression applies to the data-parallel gradient reduction: plan for more ranks, or remove the call");
}

}  // namespace loom::rules
