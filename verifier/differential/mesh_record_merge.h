// loom verify under mesh(tp, pp): the ranks of one data-parallel replica each recorded part of
// the step (their stage's modules, their tensor-parallel slices). This reassembles, per
// replica, one record shaped like the plain model's, which runs at dp ranks.
#pragma once

#include <vector>

#include "verifier/differential/step_record.h"

namespace loom {

// `ranks[r]`: world rank r's record of a run at mesh (tp, pp); `plain[d]`: the plain run's rank d.
// A quantity recorded by several stages is taken from the first (those outside the split list
// are computed by every stage); the tp ranks' slices are concatenated along the one axis where
// the plain quantity is tp times larger, and otherwise tp rank 0's copy is taken. Gradients
// recorded as ranges of flat shards (sharded optimizer states) are first put together over the
// data-parallel ranks; compression bounds of the slices combine into the largest.
std::vector<std::vector<RecordEntry>> merge_mesh_records(const std::vector<std::vector<RecordEntry>>& ranks, int tp, int pp,
                                                         const std::vector<std::vector<RecordEntry>>& plain);

}  // namespace loom
