// What `loom run` does with a schedule's directives today. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "lang/schedule.h"

namespace loom {

struct RuntimePlan {
  std::vector<std::string> checkpoint;  // module paths whose forward is recomputed in backward
  int shard = 1;                        // s_p = s_g = s_os when parameters are sharded, else 1
  int optim_shard = 1;                  // s_os when only optimizer states (and gradients) are sharded (s_p = 1)
};

// The plan for a validated schedule. A directive whose runtime effect does not exist
// yet is a UserError at its source location naming it: never a silent no-op.
// Supported: checkpoint(); shard_states/zero/fsdp with equal factors s_p = s_g = s_os (ZeRO-3,
// MiCS-style; the sharded executor) and prefetch with them; s_p = 1 with s_g in {1, s_os}
// (ZeRO-1/2; optimizer-state sharding); mesh with tp = pp = 1.
RuntimePlan plan_runtime(const Schedule& schedule);

}  // namespace loom
