// Activation checkpointing's directive: checkpoint() recomputes a module's forward in backward.
#include "backend/lower/directive_lowering.h"

namespace loom::lowering {

void checkpoint(const Directive& d, const Schedule&, RuntimePlan& plan) { plan.checkpoint.push_back(d.target); }

}  // namespace loom::lowering
