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
//     states): each member's averaged gradient, written into its .grad;
//   - with sharded states, an all-reduce of gradient shards over their replicas (the sharded
//     executor's replica sums): a bucket's sum copied back into its members' 1/s_p shards, and
//     where s_os > s_p each member's optimizer slice (1/s_os) kept as a copy, so the rest of the
//     shard can go (where s_os = s_p the shard is the slice: no slice is copied).
// Lins' broadcast of updated slices gathers into each shard in place: it copies nothing.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool mark_unpacks(ir::Program& program, const PassInputs& inputs);

}  // namespace loom::passes
