// The waits that unpack (the last pass): where a collective runs on a flat buffer of several
// tensors, or of one padded past its size, its wait copies each member out into the tensor the
// step uses, host work the rank does once the collective is done (SimpleFSDP's bucketed
// all-gather-wait "copies out the gathered data based on their original tensor size",
// simplefsdp.txt §3.2). The pass writes those bytes on each wait (ir::Instr::unpack_bytes), so
// `loom explain` shows the work, the cost models price it and the executors time it as the
// wait's (instrument/unpack_timer.h), not an op's:
//   - an all-gather of a bucket, or of a parameter padded to a multiple of s_os elements: each
//     member's whole size, copied out of the gathered output (the sharded executor's
//     finish_gather; a lone parameter whose shards tile it is gathered in place);
//   - data parallelism's bucketed gradient all-reduce (the gradient reducer, replicated
//     states): each member's averaged gradient, written into its .grad.
// Not marked yet: where s_os > s_p the sharded executor's gradient reductions keep a copy of
// their optimizer slice (1/s_os) of the summed shard where they complete; that time stays in the
// ops' times, as host work the program does not name. (Where s_os = s_p the shard is the slice
// and nothing is copied; Lins' broadcast of updated slices gathers into the shard in place.)
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool mark_unpacks(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
