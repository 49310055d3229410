// unshard(auto): selective unsharding under a memory limit (deepcompile.txt §4.3). After
// proactive prefetching, the parameters of the named modules are ranked by T_c(B)/B (the
// communication a byte of kept buffer saves: the backward all-gather of B bytes no longer runs)
// and kept gathered from their forward release to their backward gather, best first, while the
// memory around every instruction where that holds them longer (memory_walk, with those
// already kept) stays within the limit M. With accumulation a parameter is kept across the
// micro-batches where that fits too (keep_gathered: its later forward gathers go as well),
// else within each. Without a profile's or cluster's collective times, the ranking is by size,
// smallest first: for any cost alpha + beta * B, T_c(B)/B falls as B grows. Without a memory
// limit nothing is kept. Torch-free.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool selective_unshard(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
