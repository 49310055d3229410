// The step simulated on a measured profile (`loom simulate --profile`, a run's re-plan): either
// each rank at its own measured op times (simulate_each_rank: each collective starts when the
// last rank issues it), or one representative per stage at the profile's figure for each op,
// the slowest rank's. Where ranks share a machine's cores which rank is slowest changes from op
// to op, so a representative priced at the per-op maxima pays for delays no rank has, and
// misses the waits each collective makes its ranks share (docs/simulate.md). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"
#include "backend/sim/simulator.h"

namespace loom {

// The most ranks replayed each; a larger world is simulated by its representative.
constexpr int kMaxRanksSimulatedEach = 64;

// Whether each of the profile's ranks can be replayed for `stages`: the profile holds each rank's
// op times (Profile::ranks_timed), for no more than kMaxRanksSimulatedEach ranks, and the step is
// one stage whose every collective spans all of them (data parallelism, the ZeRO stages
// without sub-groups, tensor parallelism over every rank).
bool each_rank_simulable(const std::vector<ir::Program>& stages, const Profile& profile);

// `each_rank`: replay each rank (needs each_rank_simulable), else one representative per stage.
// `calibration`: the memory the profile measured, by stage (memory::measured_calibrations of the
// programs it measured). Throws UserError when the profile lacks an op or a collective of `stages`.
SimResult simulate_on_profile(const std::vector<ir::Program>& stages, const Profile& profile, const std::string& origin,
                              const std::vector<MemoryCalibration>& calibration, bool each_rank, bool timeline = true);

}  // namespace loom
