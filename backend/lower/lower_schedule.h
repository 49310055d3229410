// Lowering a schedule: its directives become the RuntimePlan, the one translation of
// primitives into runtime effects (directive_lowering.h lists them). Torch-free.
#pragma once

#include "backend/lower/runtime_plan.h"
#include "lang/schedule.h"

namespace loom {

// The plan for a validated schedule. A directive whose runtime effect does not exist yet, or
// does not combine with the rest of the schedule yet, is a UserError at its source location
// naming it: never a silent no-op. Today a mesh (tensor or pipeline parallelism) runs over
// plain data parallelism only; compress() needs sharded parameters.
RuntimePlan lower_schedule(const Schedule& schedule);

}  // namespace loom
