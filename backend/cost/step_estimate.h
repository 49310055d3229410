// A step's instructions priced by a measured profile (backend/cost/profile.h): each compute op at
// its measured forward or backward time (a recompute at its module's ops' forward times, counted
// with the backward), the optimizer step at its measured time, the gradient norm at its own
// measured work plus its all-reduce, a wait that unpacks at the measured unpacking rate, each
// collective at its role's fitted time for its bytes: as timed on idle cores where the program
// waits for it at once, as timed beside compute where it issues other work first. The sums are
// serial: overlap is what the simulator (backend/sim/simulator.h) and the executed timeline
// (--trace) show. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/cost/profile.h"

namespace loom {

struct StepEstimate {
  std::vector<double> instruction_ms;  // per instruction, one run of it; -1 where the profile has no figure
  // Per instruction: the part of instruction_ms that is the rank's own host work around its
  // collective (the gradient norm's norm and clipping before it, a wait's unpacking after it);
  // 0 for the others.
  std::vector<double> instruction_own_ms;
  // Per instruction: the host's part of a compute or recompute measured on a GPU, whose kernels
  // run behind the host (OpProfile::forward_host_ms); -1 for the others and where the profile
  // has none (a CPU's, where the host runs the op).
  std::vector<double> instruction_host_ms;
  // Per instruction: what a backward compute allocates while it runs beyond what it had (its
  // op's backward peak over the memory before it); 0 for the others.
  std::vector<int64_t> instruction_workspace_bytes;
  // The sums count each instruction as often as it runs in a step (ir::times_per_step).
  double forward_compute_ms = 0;
  double backward_compute_ms = 0;
  double collective_ms = 0;
  double optimizer_ms = 0;
  double grad_norm_ms = 0;  // the gradient norm's own work (its all-reduce is in collective_ms)
  double unpack_ms = 0;     // the waits' unpacking
};

// The name a profile's sweep gives the group of `role` where it is not the role's own name (the
// sharding's peers, named as their process groups in collective_profiler.cpp); null elsewhere.
const char* sweep_group_alias(ir::Role role);

// The profile's measurement of a collective on an IR group role: the role's own where the
// profile timed it (tp, dp, model, pipeline, stage_pair under a mesh), else the process group
// that plays it without a mesh (the world is the data-parallel group); null where it has none.
const CollectiveProfile* measured_collective(const Profile& profile, const char* collective, ir::Role role,
                                             bool beside_compute);

// Whether each instruction is a collective that shares the device with other work: another
// collective is still in flight when it is issued, or the rank issues something (compute, or
// another collective) before waiting for it. One that runs alone, as a profile's idle sweep
// timed it, is not (CollectiveProfile::beside_compute).
std::vector<bool> contended_collectives(const ir::Program& program);

// Throws UserError when the profile was measured for other compute ops (another model or
// schedule); `origin` names the profile in the message.
StepEstimate estimate_step(const ir::Program& program, const Profile& profile, const std::string& origin);

}  // namespace loom
