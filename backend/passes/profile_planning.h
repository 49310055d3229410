// What the memory-aware passes plan with on a measured profile, as a run's re-plan (the
// two-level loop, backend/train/replan.h), `loom explain --profile` and `loom simulate
// --replanned` plan: the profile's instruction times for any program the passes make, and its
// memory as the simulator prices it (a backward's measured workspace; on a GPU the traced
// activations and the libraries' own memory calibrated against the programs it measured).
// Torch-free.
#pragma once

#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"
#include "backend/passes/pass.h"

namespace loom {

// Sets `m` to plan on `profile`, whose measurements are of the programs `measured` (one per
// pipeline stage: the program a run ran, or those a schedule starts with). Returns the memory
// calibration of each of them, which the programs planned from it take too (and their
// simulation should: memory::measured_calibrations).
std::vector<MemoryCalibration> plan_on_profile(MemoryPlanning& m, const Profile& profile, const std::vector<ir::Program>& measured);

}  // namespace loom
