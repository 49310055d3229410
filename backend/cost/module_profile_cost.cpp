#include "backend/cost/module_profile_cost.h"

#include <algorithm>
#include <cmath>

#include "backend/cost/step_estimate.h"

namespace loom {

ModuleProfileCost::ModuleProfileCost(Profile profile, std::vector<MemoryCalibration> calibration_by_stage)
    : profile_(std::move(profile)), calibration_by_stage_(std::move(calibration_by_stage)) {
  for (const OpProfile& op : profile_.ops) {
    ModuleTimes& t = modules_[op.module];
    t.forward_ms += op.forward_ms;
    t.backward_ms += op.backward_ms;
    ++t.calls;
    // A backward's workspace as estimate_step measures it, the most over the module's calls: the
    // passes' programs move calls around, and under a limit the larger is the safe one.
    t.backward_workspace_bytes = std::max(t.backward_workspace_bytes, op.backward_workspace_bytes());
  }
}

double ModuleProfileCost::seconds(const ir::Program&, const ir::Instr& in) const {
  if (ir::runs_module(in.kind)) {
    double ms = 0;
    for (const auto& [module, t] : modules_) {
      bool counts = in.kind == ir::OpKind::Recompute ? ir::within(module, in.module) : module == in.module;
      if (!counts) continue;
      bool backward = in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward;
      ms += (backward ? t.backward_ms : t.forward_ms) / t.calls;
    }
    return ms / 1000.0;
  }
  if (in.kind == ir::OpKind::OptimizerStep) return std::max(0.0, profile_.optimizer_step_ms) / 1000.0;
  double own_ms = in.kind == ir::OpKind::GradNorm ? std::max(0.0, profile_.grad_norm_ms) : 0;
  const char* name = ir::issued_collective(in);
  if (!name) return own_ms / 1000.0;
  const CollectiveProfile* c = measured_collective(profile_, name, in.group.role, true);
  if (!c) c = measured_collective(profile_, name, in.group.role, false);
  return (own_ms + (c ? c->predict_ms(in.bytes) : 0)) / 1000.0;
}

int64_t ModuleProfileCost::workspace_bytes(const ir::Program&, const ir::Instr& in) const {
  if (in.kind != ir::OpKind::Compute || in.phase != ir::Phase::Backward) return 0;
  auto t = modules_.find(in.module);
  return t == modules_.end() ? 0 : t->second.backward_workspace_bytes;
}

const MemoryCalibration& ModuleProfileCost::calibration_of(const ir::Program& program) const {
  static const MemoryCalibration kTraced;
  auto stage = static_cast<size_t>(std::max(0, program.mesh.stage));
  return stage < calibration_by_stage_.size() ? calibration_by_stage_[stage] : kTraced;
}

int64_t ModuleProfileCost::activation_bytes(const ir::Program& program, const ir::Instr& in) const {
  return std::llround(static_cast<double>(in.activation_bytes) * calibration_of(program).activation_scale);
}

int64_t ModuleProfileCost::outside_bytes(const ir::Program& program) const { return calibration_of(program).outside_bytes; }

}  // namespace loom
