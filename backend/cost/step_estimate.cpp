#include "backend/cost/step_estimate.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "lang/diagnostics.h"

namespace loom {
const char* sweep_group_alias(ir::Role role) {
  return role == ir::Role::Grads ? "grad_peers" : role == ir::Role::Optim ? "optim_peers" : nullptr;
}

const CollectiveProfile* measured_collective(const Profile& profile, const char* collective, ir::Role role,
                                             bool beside_compute) {
  if (const CollectiveProfile* own = profile.collective(collective, ir::role_name(role), beside_compute)) return own;
  const char* plays = role == ir::Role::Dp ? "world" : sweep_group_alias(role);
  return plays ? profile.collective(collective, plays, beside_compute) : nullptr;
}

std::vector<bool> contended_collectives(const ir::Program& program) {
  std::vector<bool> contended(program.instrs.size(), false);
  std::unordered_set<int> in_flight;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.kind == ir::OpKind::Wait) in_flight.erase(in.handle);
    if (!ir::issued_collective(in)) continue;
    bool waited_at_once = i + 1 < program.instrs.size() && program.instrs[i + 1].kind == ir::OpKind::Wait &&
                          program.instrs[i + 1].handle == in.handle;
    contended[i] = !waited_at_once || !in_flight.empty();
    in_flight.insert(in.handle);
  }
  return contended;
}

namespace {

// The profile's ops of each module the program computes, in forward order.
std::map<std::string, std::vector<size_t>> match_forward_ops(const ir::Program& program, const Profile& profile,
                                                             const std::string& origin) {
  // The k-th forward compute is the profile's k-th op (backward computes take the ops of their
  // module from the last forward call back: estimate_step). A pipeline stage runs some of the model's ops, and
  // the profile holds every stage's: the stage's k-th is the profile's next op of its module.
  std::map<std::string, std::vector<size_t>> ops_of;
  bool staged = program.mesh.pp > 1;
  size_t k = 0, forward_seen = 0;
  for (const ir::Instr& in : program.instrs) {
    if (in.kind != ir::OpKind::Compute || in.phase != ir::Phase::Forward) continue;
    size_t from = k;
    while (staged && k < profile.ops.size() && profile.ops[k].module != in.module) ++k;
    if (k >= profile.ops.size()) k = from;  // not found: name the op where the search began
    if (k >= profile.ops.size() || profile.ops[k].module != in.module)
      throw UserError(SourceRange{},
                      origin + " was measured for other compute ops: the step's op " + std::to_string(forward_seen) + " is `" +
                          in.module + "`, the profile's is `" + (k < profile.ops.size() ? profile.ops[k].module : std::string("(none)")) +
                          "`",
                      "measure this model and schedule with `loom profile`");
    ops_of[in.module].push_back(k++);
    ++forward_seen;
  }
  if (!staged && forward_seen != profile.ops.size())
    throw UserError(SourceRange{},
                    origin + " has " + std::to_string(profile.ops.size()) + " compute ops, the step " + std::to_string(forward_seen),
                    "measure this model and schedule with `loom profile`");
  return ops_of;
}

// What a wait's unpacking (its unpack_bytes) takes at the profile's measured rate; 0 for other
// instructions, and where the profile measured none.
double unpack_ms(const Profile& profile, const ir::Instr& in) {
  if (in.kind != ir::OpKind::Wait || in.unpack_bytes <= 0 || profile.unpack_gb_per_s <= 0) return 0;
  return static_cast<double>(in.unpack_bytes) / (profile.unpack_gb_per_s * 1e6);
}

}  // namespace

StepEstimate estimate_step(const ir::Program& program, const Profile& profile, const std::string& origin) {
  std::map<std::string, std::vector<size_t>> ops_of = match_forward_ops(program, profile, origin);
  std::vector<bool> contended = contended_collectives(program);
  StepEstimate e;
  for (const ir::Instr& in : program.instrs) {
    double ms = -1, host_ms = -1;
    int64_t workspace = 0;
    double times = static_cast<double>(ir::times_per_step(program, in));
    if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Forward) {
      const OpProfile& op = profile.ops[ops_of[in.module].front()];
      ms = op.forward_ms;
      host_ms = op.forward_host_ms;
      ops_of[in.module].push_back(ops_of[in.module].front());  // rotate: the next forward call is the next op
      ops_of[in.module].erase(ops_of[in.module].begin());
      e.forward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::Compute && in.phase == ir::Phase::Backward) {
      std::vector<size_t>& ops = ops_of[in.module];
      const OpProfile& op = profile.ops[ops.back()];
      ms = op.backward_ms;
      host_ms = op.backward_host_ms;
      workspace = op.backward_workspace_bytes();
      ops.insert(ops.begin(), ops.back());  // rotate the other way: backward runs the calls in reverse
      ops.pop_back();
      e.backward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::Recompute) {
      // The module's ops run their forward again: one call of each (the profile's first).
      ms = host_ms = 0;
      for (const auto& [module, ops] : ops_of)
        if (ir::within(module, in.module)) {
          const OpProfile& op = profile.ops[ops.front()];
          ms += op.forward_ms;
          host_ms = host_ms < 0 || op.forward_host_ms < 0 ? -1 : host_ms + op.forward_host_ms;
        }
      e.backward_compute_ms += times * ms;
    } else if (in.kind == ir::OpKind::OptimizerStep && profile.optimizer_step_ms >= 0) {
      ms = profile.optimizer_step_ms;
      e.optimizer_ms += times * ms;
    } else if (const char* name = ir::issued_collective(in)) {
      if (const CollectiveProfile* c = measured_collective(profile, name, in.group.role, contended[e.instruction_ms.size()])) {
        ms = c->predict_ms(in.bytes);
        e.collective_ms += times * ms;
      }
    }
    // The gradient norm: its own work (the norm, the clipping), then its all-reduce if any.
    double own = 0;
    if (in.kind == ir::OpKind::GradNorm && profile.grad_norm_ms >= 0 && (ms >= 0 || !ir::issued_collective(in))) {
      own = profile.grad_norm_ms;
      ms = std::max(0.0, ms) + own;
      e.grad_norm_ms += times * own;
    }
    if (double unpacking = unpack_ms(profile, in); unpacking > 0) {
      own = ms = unpacking;
      e.unpack_ms += times * unpacking;
    }
    e.instruction_ms.push_back(ms);
    e.instruction_own_ms.push_back(own);
    e.instruction_host_ms.push_back(host_ms);
    e.instruction_workspace_bytes.push_back(workspace);
  }
  return e;
}

}  // namespace loom
