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
//   memory: the program with the grown bucket merged and moved ahead, its reductions in flight as
//           window_reductions (which runs next) keeps them, walks (memory_walk) within the limit
//           M from the bucket's gather to the end of its compute (and, in backward, until its
//           reductions complete); none without a limit. This holds for size=BYTES and the
//           whole-module fallback too, and a gather is moved ahead only where the walk fits.
// Buckets are applied one at a time, each on the program the ones before it left, so the walk a
// bucket is sized on is the program's. Sized for overlap, the first bucket of a run has no
// compute before it to hide behind, so it keeps one gather; so does a bucket whose gather cannot
// move ahead (it grows only while it still moves ahead), and a capped or whole-module bucket
// grows only where it keeps its move. Without instruction times (a loom run before its first
// re-plan) auto buckets by module: a module's gathers join while the memory rule allows. A
// gather of parameters outside the selection ends a run. Torch-free.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool auto_bucket(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
