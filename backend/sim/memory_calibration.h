// measured_calibrations: what a profile measured on a GPU says of the memory walk's two blind
// spots there (MemoryCalibration, backend/cost/memory_model.h): the traced activations' dtype
// under bf16 autocast and the GPU libraries' own memory. Compared at two points of the program it
// measured, where both the walk and the op profiler read the memory in use. Torch-free.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"

namespace loom::memory {

// With m0 and m1 the profile's memory in use just before the program's first forward compute
// and just before its first backward compute, w0 and w1 the walk's there, and A the traced
// activations the forward saves between them:
//   outside_bytes = m0 - w0,  activation_scale = 1 + ((m1 - m0) - (w1 - w0)) / A.
// The two computes are the first whose module is not in `shared` (a pipeline's modules that
// several stages run: the profile holds the most any rank measured of them). Only a CUDA profile
// is calibrated: on CPU the trace's fp32 tensors are what runs and the memory counter sees
// tensors only. Without the figures (a module the profile did not measure) nothing is
// calibrated; without activations saved between the two points, or with a scale that is not
// positive, the traced activations stand.
MemoryCalibration measured_memory_calibration(const ir::Program& p, const Profile& profile, const StateBytes& state_bytes,
                                              const std::set<std::string>& shared = {});

// The calibration of each of `stages` (a program per pipeline stage), which must be the
// programs the profile measured: against another schedule's, outside_bytes would take up the
// difference between the two. A program the passes plan from the profile takes its stage's.
std::vector<MemoryCalibration> measured_calibrations(const std::vector<ir::Program>& stages, const Profile& profile,
                                                     const StateBytes& state_bytes = StateBytes::loom_adamw());

}  // namespace loom::memory
