// What `loom run` does with a schedule's directives today. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "lang/schedule.h"

namespace loom {

struct RuntimePlan {
  std::vector<std::string> checkpoint;  // module paths whose forward is recomputed in backward
  ir::Sharding factors;                 // Lins factors from shard_states (all 1: plain data parallelism); dp unset
};

// The plan for a validated schedule. A directive whose runtime effect does not exist
// yet is a UserError at its source location naming it: never a silent no-op.
// Supported: checkpoint(); shard_states/zero/fsdp with any valid factors (s_p > 1: the sharded
// executor, also with checkpoint() and prefetch; s_p = 1: optimizer-state sharding, ZeRO-1/2);
// mesh with tp = pp = 1. Not yet: sharding a mixture of experts.
RuntimePlan plan_runtime(const Schedule& schedule);

}  // namespace loom
