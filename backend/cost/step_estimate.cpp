#include "backend/cost/step_estimate.h"

#include <map>

#include "lang/diagnostics.h"

namespace loom {
namespace {

// The profile's process-group role of an IR group role.
std::string profile_role(const std::string& role) {
  static const std::map<std::string, std::string> roles{
      {"dp", "world"}, {"params", "params"}, {"replicas", "replicas"}, {"grads", "grad_peers"}, {"optim", "optim_peers"}};
  auto it = roles.find(role);
  return it == roles.end() ? role : it->second;
}

}  // namespace

StepEstimate estimate_step(const ir::Program& program, const Profile& profile, const std::string& origin) {
  // The k-th forward compute is the profile's k-th op; backward computes take the ops of their
  // module from the last forward call back.
  std::map<std::string, std::vector<size_t>> ops_of;
  size_t forward_seen = 0;
  for (const ir::Instr& in : program.instrs) {
    if (in.kind != ir::OpKind::Compute || in.phase != ir::Phase::Forward) continue;
    if (forward_seen >= profile.ops.size() || profile.ops[forward_seen].module != in.module)
      throw UserError(SourceRange{},
                      origin + " was measured for other compute ops: the step's op " + std::to_string(forward_seen) + " is `" +
                          in.module + "`, the profile's is `" +
                          (forward_seen < profile.ops.size() ? profile.ops[forward_seen].module : std::string("(none)")) + "`",
                      "measure this model and schedule with `loom profile`");
    ops_of[in.module].push_back(forward_seen++);
  }
  if (forward_seen != profile.ops.size())
    throw UserError(SourceRange{},
                    origin + " has " + std::to_string(profile.ops.size()) + " compute ops, the step " + std::to_string(forward_seen),
                    "measure this model and schedule with `loom profile`");

  StepEstimate e;
  for (const ir::Instr& in : program.instrs) {
    double ms = -1;
    double times = static_cast<double>(ir::times_per_step(program, in));
    if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Forward) {
      ms = profile.ops[ops_of[in.module].front()].forward_ms;
      ops_of[in.module].push_back(ops_of[in.module].front());  // rotate: the next forward call is the next op
      ops_of[in.module].erase(ops_of[in.module].begin());
      e.forward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward) {
      std::vector<size_t>& ops = ops_of[in.module];
      ms = profile.ops[ops.back()].backward_ms;
      ops.insert(ops.begin(), ops.back());  // rotate the other way: backward runs the calls in reverse
      ops.pop_back();
      e.backward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::Recompute) {
      // The module's ops run their forward again: one call of each (the profile's first).
      ms = 0;
      for (const auto& [module, ops] : ops_of)
        if (ir::within(module, in.module)) ms += profile.ops[ops.front()].forward_ms;
      e.backward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::OptimizerStep && profile.optimizer_step_ms >= 0) {
      ms = profile.optimizer_step_ms;
      e.optimizer_ms += times * ms;
    } else if (const char* name = ir::issued_collective(in)) {
      if (const CollectiveProfile* c = profile.collective(name, profile_role(in.group.role))) {
        ms = c->predict_ms(in.bytes);
        e.collective_ms += times * ms;
      }
    }
    e.instruction_ms.push_back(ms);
  }
  return e;
}

}  // namespace loom
