// offload("optimizer", budget=auto) under a memory limit: adaptive offloading (deepcompile.txt
// §4.4, Algorithm 2). The optimizer states of each parameter slice this rank updates are one
// fragment (B_os: their bytes). Where the program's peak (memory_walk, every state on the
// device) is above the limit M, the first fragments in parameter order whose absence brings it
// to M are offloaded: an `offload_states` of each starts at the beginning of the forward, on
// the copy stream, and its wait, which frees the states on the device, goes just before the
// first instruction whose memory would otherwise be above M (Algorithm 2's loop, which the paper
// writes for the forward; here it runs on to the end of the backward, since a training step's
// peak is often there, so a wait may land in the backward). In backward,
// each fragment's `reload_states` goes at the earliest instruction from which, with it back,
// the memory stays within M to the end of the step (§4.4, last paragraph), or at the end of the
// backward where none is; the reloads are waited at the end of the backward, so the optimizer
// steps on the device. With accumulation, the offloads run in the first micro-batch and the
// reloads in the last. Nothing moves where the peak fits. Torch-free.
#pragma once

#include "backend/passes/pass.h"

namespace loom::passes {

bool adaptive_offload(ir::Program& program, const PassInputs& inputs);

// Whether the schedule's offload is adaptive_offload's (budget=auto under a memory limit), which
// offload_optimizer then leaves alone.
bool offload_is_adaptive(const PassInputs& inputs);

}  // namespace loom::passes
