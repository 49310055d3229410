// The waits that unpack (the last pass): where a collective runs on a flat buffer of several
// tensors, or of one padded past its size, its wait copies each member out into the tensor the
// step uses, host work the rank does once the collective is done. The pass writes those bytes
// on each wait (ir::Instr::unpack_bytes), so `loom explain` shows the work, the cost models
// price it and the executors time it as the wait's (instrument/unpack_clock.h), not an op's:
//   - an all-gather of a bucket, or of a parameter padded to a multiple of s_os elements: each
//     member's whole size, copied out of the gathered output (the sharded executor's
//     finish_gather; a lone parameter whose shards tile it is gathered in place);
//   - data parallelism's bucketed gradient all-reduce (the gradient reducer, replicated
//     states): each member's averaged gradient, written into its .grad.
// Not marked yet: the sharded executor's gradient reductions keep their optimizer slice of the
// summed shard (a copy of 1/s_os of it) where they complete; that time stays in the ops' times,
// as all host work between two ops does.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

// The bytes the wait of `collective` (an instruction of `program`) unpacks; 0 for a wait that
// copies nothing.
int64_t unpacked_at_wait(const ir::Program& program, const ir::Instr& collective);

bool mark_unpacks(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
