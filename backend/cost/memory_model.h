// The bytes of model states one rank holds (issue #15 §1), by the sharding factors: the one
// memory model that the verifier's memory rule (verifier/rules/memory_fits.cpp) and the
// simulator (backend/sim/) use; the bytes the step's tail moves over them (the cost model's
// price of the optimizer step and the gradient norm); and the calibration a GPU profile gives
// the simulator's walk. Header-only and torch-free, so the language core can include it.
#pragma once

#include <cstdint>

namespace loom {

// Bytes per parameter element of each model state.
struct StateBytes {
  double param = 4;  // the parameters
  double grad = 4;   // their gradients
  double optim = 8;  // the optimizer's states of them (and any master copy)

  // What Loom's runtime keeps: fp32 parameters and gradients (on a GPU bf16 autocast computes
  // from fp32 master weights) and AdamW's two fp32 moments.
  static StateBytes loom_adamw() { return {4, 4, 8}; }
  // (lins.txt §IV-D counts 2/2/12: fp16 parameters and gradients; fp32 master weights, momentum
  // and variance. Loom has no such layout yet, so nothing counts with it.)

  // What the cost model prices by bytes in the step's tail, for `elements` updated on a rank:
  // AdamW reads and writes every state of each; the gradient norm reads each gradient, and
  // its clipping reads and writes it again.
  double optimizer_step_bytes(double elements) const { return 2 * elements * (param + grad + optim); }
  double grad_norm_bytes(double elements) const { return 3 * elements * grad; }
};

// What a profile measured on a GPU says of the two things the memory model cannot see there
// (backend/sim/memory_calibration.h): the traced activations are fp32, on the meta device,
// while bf16 autocast saves some in bf16 and caches bf16 copies of the weights for the forward;
// and the GPU libraries hold memory of their own for the whole run (cuBLAS's workspaces).
struct MemoryCalibration {
  double activation_scale = 1;  // measured forward growth over the traced activations'
  int64_t outside_bytes = 0;    // held beyond the model's states from the step's start on
};

// lins.txt §IV-D's D_modelstate for `params` elements: each state divided by its sharding
// factor (s_p, s_g, s_os).
inline double model_state_bytes(double params, const StateBytes& bytes, int s_p, int s_g, int s_os) {
  return params * (bytes.param / s_p + bytes.grad / s_g + bytes.optim / s_os);
}

}  // namespace loom
