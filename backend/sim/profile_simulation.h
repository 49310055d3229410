// The step simulated on a measured profile (`loom simulate --profile`, a run's re-plan): each
// rank at its own measured op times where the profile kept them and every collective of the
// step spans all its ranks (simulate_each_rank), else one representative per stage at the
// slowest rank's time of each op. With several ranks sharing a machine's cores which rank is
// slowest changes from op to op (measured at world 4 on two cores: the ops' per-op maxima summed
// to 21% more than any rank's own), so a representative priced at the maxima pays for delays no
// rank has, and misses the waits each collective makes its ranks share. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"
#include "backend/sim/simulator.h"

namespace loom {

// `calibration`: the memory the profile measured, by stage (memory::calibrate_to_profile of the
// program it measured). Throws UserError when the profile lacks an op or a collective of `stages`.
SimResult simulate_on_profile(const std::vector<ir::Program>& stages, const Profile& profile, const std::string& origin,
                              const std::vector<MemoryCalibration>& calibration, bool timeline = true);

// Whether simulate_on_profile simulates each of the profile's ranks for `stages`.
bool simulates_each_rank(const std::vector<ir::Program>& stages, const Profile& profile);

}  // namespace loom
