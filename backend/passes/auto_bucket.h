// bucket(size=BYTES|auto): buckets sized for overlap (simplefsdp.txt §3.2-3.3.2). The selected
// modules' all-gathers, in each phase's order, are grouped greedily into buckets of consecutive
// gathers; each bucket's gathers (and, in backward, their reductions) become one collective
// (bucket()'s merge), and each bucket's all-gather is reordered to just before the previous
// bucket's wait, so it overlaps the previous bucket's compute (§3.2.2).
//
// A gather joins the current bucket when (size=BYTES) the bucket stays within BYTES, or (auto,
// SimpleFSDP's Algorithm 1) when
//   time:   T_AG(bucket + gather) <= T_c(previous bucket's compute)          (forward)
//           T_RS(previous bucket) + T_AG(bucket + gather) <= T_c(...)        (backward)
//   memory: the memory around the previous bucket's and this bucket's instructions
//           (memory_walk), plus the bucket's gathered buffers, stays within the limit M (none
//           without a limit); this holds for size=BYTES and the whole-module fallback too, and
//           a bucket's gather is moved ahead only where its buffer fits.
// The first bucket of a run has no compute before it to hide behind, so it keeps one gather.
// Without instruction times (loom run has none yet) auto buckets each selected module whole,
// with the same reordering. A gather of parameters outside the selection ends a run. Torch-free.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool auto_bucket(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
