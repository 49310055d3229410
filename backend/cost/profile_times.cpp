#include "backend/cost/profile_times.h"

#include <map>
#include <memory>

#include "backend/cost/step_estimate.h"

namespace loom {
namespace {

struct ModuleTimes {
  double forward_ms = 0, backward_ms = 0;
  int calls = 0;
};

double seconds_of(const Profile& profile, const std::map<std::string, ModuleTimes>& modules, const ir::Instr& in) {
  if (ir::runs_module(in.kind)) {
    double ms = 0;
    for (const auto& [module, t] : modules) {
      bool counts = in.kind == ir::OpKind::Recompute ? ir::within(module, in.module) : module == in.module;
      if (!counts) continue;
      bool backward = in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward;
      ms += (backward ? t.backward_ms : t.forward_ms) / t.calls;
    }
    return ms / 1000.0;
  }
  if (in.kind == ir::OpKind::OptimizerStep) return std::max(0.0, profile.optimizer_step_ms) / 1000.0;
  double own_ms = in.kind == ir::OpKind::GradNorm ? std::max(0.0, profile.grad_norm_ms) : 0;
  const char* name = ir::issued_collective(in);
  if (!name) return own_ms / 1000.0;
  const CollectiveProfile* c = measured_collective(profile, name, in.group.role, true);
  if (!c) c = measured_collective(profile, name, in.group.role, false);
  return (own_ms + (c ? c->predict_ms(in.bytes) : 0)) / 1000.0;
}

}  // namespace

std::function<double(const ir::Program&, const ir::Instr&)> profile_instruction_seconds(const Profile& profile) {
  auto modules = std::make_shared<std::map<std::string, ModuleTimes>>();
  for (const OpProfile& op : profile.ops) {
    ModuleTimes& t = (*modules)[op.module];
    t.forward_ms += op.forward_ms;
    t.backward_ms += op.backward_ms;
    ++t.calls;
  }
  auto kept = std::make_shared<Profile>(profile);
  return [kept, modules](const ir::Program&, const ir::Instr& in) { return seconds_of(*kept, *modules, in); };
}

}  // namespace loom
