// Gradient-norm clipping when each rank holds only part of the gradients: the squared norms
// of this rank's parts are summed (in double) over a group whose ranks hold every element
// once, so every rank scales by the same global factor.
#pragma once

#include <vector>

#include <torch/types.h>

#include "backend/comm/communicator.h"

namespace loom {

// Scales the gradients of `tensors` so that their global norm is at most `max_norm`.
// `group` (nullptr: this rank alone) must cover every gradient element exactly once; where
// ranks hold copies, `counted` (per tensor; empty: all) says which of this rank's count.
// Returns the global norm before clipping (max_norm = infinity only measures it).
double clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, comm::Group* group, double max_norm,
                            const std::vector<bool>& counted = {});

}  // namespace loom
