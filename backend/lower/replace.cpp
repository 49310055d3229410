// replace()'s directive: a module runs a registered alternative implementation (the model
// library applies it when it builds the model, so the trace, and with it the program's
// compute instructions, holds what the implementation computes and keeps for backward).
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void replace(const Directive& d, const Schedule&, RuntimePlan& plan) {
  const std::string& impl = d.arg("impl")->as_string();
  for (ModuleReplacement& r : plan.replacements)
    if (r.module == d.target) {
      r.impl = impl;  // the last replace() of a module wins, as a re-assignment would
      return;
    }
  plan.replacements.push_back({d.target, impl});
}

}  // namespace loom::lowering
