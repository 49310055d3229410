// A measured profile's costs for any program of its model: what the memory-aware passes plan
// with when a run re-plans from its own measurements (the two-level loop, deepcompile.txt §3,
// backend/train/replan.h), and what `loom explain --profile` and `loom simulate --replanned`
// plan with to show the program that loop settles on where each round is switched to. Unlike ProfileCost, which prices the
// programs it was built with call by call, it prices the instructions passes make (merged and
// moved gathers): a compute at the mean of its module's measured calls in that phase, a
// recompute at its ops' forward times, a collective at its role's line as timed beside compute
// (else idle), the optimizer step at its measured time, the gradient norm at its own measured
// work plus its all-reduce, anything else (waits, releases, copies) at 0. Its memory is the
// simulator's (ProfileCost's), but for a module called more than once: a backward compute's
// workspace is the most its module's calls measured (ProfileCost takes each call's), and the
// traced activations and the memory held outside the model as the profile measured them for the
// program it ran (MemoryCalibration, by pipeline stage), which the programs planned from it take
// too. Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backend/cost/instruction_cost.h"
#include "backend/cost/memory_model.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"

namespace loom {

class ModuleProfileCost : public InstructionCost {
 public:
  // `calibration_by_stage`: memory::measured_calibrations of the programs the profile measured
  // (identity off a GPU); a stage it does not cover keeps the traced bytes.
  explicit ModuleProfileCost(Profile profile, std::vector<MemoryCalibration> calibration_by_stage = {});
  double seconds(const ir::Program& program, const ir::Instr& in) const override;
  int64_t workspace_bytes(const ir::Program& program, const ir::Instr& in) const override;
  int64_t activation_bytes(const ir::Program& program, const ir::Instr& in) const override;
  int64_t outside_bytes(const ir::Program& program) const override;

 private:
  // A module's measured calls, summed.
  struct ModuleTimes {
    double forward_ms = 0, backward_ms = 0;
    int calls = 0;
    int64_t backward_workspace_bytes = 0;  // the most any call's backward allocated beyond what it began with
  };
  Profile profile_;
  std::map<std::string, ModuleTimes> modules_;
  std::vector<MemoryCalibration> calibration_by_stage_;
  const MemoryCalibration& calibration_of(const ir::Program& program) const;
};

}  // namespace loom
