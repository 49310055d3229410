// What `loom run` does with a schedule's directives today. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "lang/schedule.h"

namespace loom {

struct RuntimePlan {
  std::vector<std::string> checkpoint;  // module paths whose forward is recomputed in backward
};

// The plan for a validated schedule. A directive whose runtime effect does not exist
// yet is a UserError at its source location naming it: never a silent no-op.
// Supported: checkpoint(), and shard_states/mesh/zero/fsdp only where they amount to
// plain data parallelism (every factor and degree 1).
RuntimePlan plan_runtime(const Schedule& schedule);

}  // namespace loom
