#include "backend/passes/profile_planning.h"

#include <memory>

#include "backend/cost/module_profile_cost.h"
#include "backend/sim/memory_calibration.h"

namespace loom {

std::vector<MemoryCalibration> plan_on_profile(MemoryPlanning& m, const Profile& profile, const std::vector<ir::Program>& measured) {
  std::vector<MemoryCalibration> calibration = memory::measured_calibrations(measured, profile, m.state_bytes);
  m.plan_with(std::make_shared<ModuleProfileCost>(profile, calibration));
  return calibration;
}

}  // namespace loom
