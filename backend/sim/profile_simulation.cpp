#include "backend/sim/profile_simulation.h"

#include <memory>

#include "backend/cost/instruction_cost.h"
#include "lang/diagnostics.h"

namespace loom {

bool each_rank_simulable(const std::vector<ir::Program>& stages, const Profile& profile) {
  int ranks = profile.ranks_timed();
  if (stages.size() != 1 || ranks < 2 || ranks > kMaxRanksSimulatedEach) return false;
  const ir::Program& p = stages.front();
  if (p.sharding.dp * p.mesh.model_parallel() != ranks) return false;
  bool collective = false;
  for (const ir::Instr& in : p.instrs)
    if (ir::issued_collective(in)) {
      if (in.group.size != ranks) return false;
      collective = true;
    }
  return collective;
}

SimResult simulate_on_profile(const std::vector<ir::Program>& stages, const Profile& profile, const std::string& origin,
                              const std::vector<MemoryCalibration>& calibration, bool each_rank, bool timeline) {
  if (!each_rank) {
    ProfileCost cost(stages, profile, origin);
    cost.calibrate_memory(calibration);
    return simulate(stages, cost, StateBytes::loom_adamw(), timeline);
  }
  if (!each_rank_simulable(stages, profile)) throw InternalError("simulate_on_profile: these programs cannot be simulated rank by rank");
  std::vector<std::unique_ptr<ProfileCost>> costs;
  std::vector<const InstructionCost*> by_rank;
  for (int rank = 0; rank < profile.ranks_timed(); ++rank) {
    costs.push_back(std::make_unique<ProfileCost>(stages, profile.as_timed_on(rank), origin));
    costs.back()->calibrate_memory(calibration);
    by_rank.push_back(costs.back().get());
  }
  return simulate_each_rank(stages.front(), by_rank, StateBytes::loom_adamw(), timeline);
}

}  // namespace loom
