#include "backend/ir/verifier.h"

#include <map>
#include <set>

namespace loom::ir {
namespace {

bool is_collective(OpKind k) { return collective_op(k) != nullptr; }

std::string at(size_t i, const Program& p, const std::string& what) {
  const Instr& in = p.instrs[i];
  return "instruction " + std::to_string(i) + " (" + phase_name(in.phase) + " " + op_name(in.kind) +
         (in.module.empty() ? "" : " " + in.module) + "): " + what;
}

}  // namespace

std::string verify(const Program& p) {
  bool sharded = p.sharding.params > 1;
  enum class State { Sharded, InFlight, Resident };
  std::vector<State> state(p.params.size(), sharded ? State::Sharded : State::Resident);
  std::map<int, std::vector<int>> gather_of;  // handle -> params it gathers
  std::map<int, size_t> issued;               // handle -> instruction index
  std::set<int> waited;
  std::vector<bool> reduced(p.params.size(), false);
  std::set<int> reduction_handles;
  int64_t gathered = 0;
  bool stepped = false;  // the optimizer step has run
  std::set<int> updated;  // the parameters this rank's optimizer step updates (a pipeline stage: its own)
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::OptimizerStep) updated.insert(in.params.begin(), in.params.end());
  std::set<int> on_host;  // offloaded, not yet reloaded
  // A gradient is complete after its parameter's last backward compute: no reduction before it.
  std::map<int, size_t> last_backward_use;
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Compute && p.instrs[i].phase == Phase::Backward)
      for (int q : p.instrs[i].params) last_backward_use[q] = i;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    for (int q : in.params)
      if (q < 0 || q >= static_cast<int>(p.params.size())) return at(i, p, "refers to parameter " + std::to_string(q) + ", which does not exist");
    if (is_collective(in.kind)) {
      if (in.handle < 0 || issued.count(in.handle)) return at(i, p, "a collective needs a fresh handle");
      issued[in.handle] = i;
    }
    switch (in.kind) {
      case OpKind::Recompute:
        if (in.phase != Phase::Backward) return at(i, p, "recomputes outside the backward");
        [[fallthrough]];
      case OpKind::Compute:
        if (in.runs_in != MicroBatches::All) return at(i, p, "computes in only some micro-batches");
        if (!p.gathers_placed) break;
        for (int q : in.params)
          if (state[q] != State::Resident)
            return at(i, p, "uses " + p.params[q].name + (state[q] == State::InFlight ? " before waiting for its gather" : " while it is not gathered"));
        break;
      case OpKind::AllGather:
        if (!sharded) return at(i, p, "gathers although parameters are not sharded");
        for (int q : in.params) {
          if (state[q] != State::Sharded) return at(i, p, "gathers " + p.params[q].name + ", which is already gathered");
          state[q] = State::InFlight;
          gathered += p.params[q].numel * p.params[q].element_bytes;
        }
        gather_of[in.handle] = in.params;
        if (p.memory_limit > 0 && gathered > p.memory_limit)
          return at(i, p, "gathered parameters take " + std::to_string(gathered) + " bytes, over the limit of " + std::to_string(p.memory_limit));
        break;
      case OpKind::Wait: {
        if (!issued.count(in.handle)) return at(i, p, "waits for %" + std::to_string(in.handle) + ", which was never issued");
        if (!waited.insert(in.handle).second) return at(i, p, "waits for %" + std::to_string(in.handle) + " twice");
        if (in.phase != Phase::Step && in.runs_in != p.instrs[issued[in.handle]].runs_in)
          return at(i, p, "waits for %" + std::to_string(in.handle) + " in other micro-batches than it runs in");
        for (int q : gather_of[in.handle]) state[q] = State::Resident;
        break;
      }
      case OpKind::Release:
        for (int q : in.params) {
          if (state[q] != State::Resident) return at(i, p, "releases " + p.params[q].name + ", which is not gathered");
          state[q] = State::Sharded;
          gathered -= p.params[q].numel * p.params[q].element_bytes;
        }
        break;
      case OpKind::ReduceScatter:
      case OpKind::Compress:
      case OpKind::AllReduce:
        if (in.phase == Phase::Backward) {
          for (int q : in.params) {
            auto last = last_backward_use.find(q);
            if (last != last_backward_use.end() && last->second > i)
              return at(i, p, "reduces the gradient of " + p.params[q].name + " before its last backward use (instruction " +
                                  std::to_string(last->second) + ")");
            reduced[q] = true;
          }
          reduction_handles.insert(in.handle);
        }
        break;
      case OpKind::Offload:
        if (stepped) return at(i, p, "copies gradients to the host after the optimizer step");
        on_host.insert(in.params.begin(), in.params.end());
        [[fallthrough]];
      case OpKind::GradNorm:
      case OpKind::OptimizerStep: {
        // Each reads every reduced gradient: each must be reduced and waited for.
        std::string what = in.kind == OpKind::GradNorm ? "measures the gradient norm"
                           : in.kind == OpKind::Offload ? "copies gradients to the host"
                                                        : "updates parameters";
        stepped = stepped || in.kind == OpKind::OptimizerStep;
        if (p.sharding.dp > 1 && p.reductions_placed) {
          for (int q : updated)
            if (!reduced[q]) return at(i, p, what + " before the gradient of " + p.params[q].name + " is reduced");
          for (int h : reduction_handles)
            if (!waited.count(h)) return at(i, p, what + " before waiting for gradient reduction %" + std::to_string(h));
        }
        break;
      }
      case OpKind::Reload:
        if (!stepped) return at(i, p, "copies values to the device before the optimizer step updated them");
        for (int q : in.params)
          if (!on_host.erase(q)) return at(i, p, "reloads " + p.params[q].name + ", which was not offloaded");
        break;
      default: break;
    }
  }
  for (auto& [h, i] : issued)
    if (!waited.count(h)) return at(i, p, "collective %" + std::to_string(h) + " is never waited");
  for (size_t q = 0; q < p.params.size(); ++q)
    if (sharded && p.gathers_placed && state[q] != State::Sharded) return "end of step: " + p.params[q].name + " is still gathered";
  if (!on_host.empty()) return "end of step: the updated values of " + p.params[*on_host.begin()].name + " never come back to the device";
  return "";
}

std::string verify_complete(const Program& p) {
  if (!p.gathers_placed) return "no pass placed the gathers of sharded parameters";
  if (!p.reductions_placed) return "no pass placed the gradient reductions";
  return verify(p);
}

std::string compare_collectives(const Program& a, const Program& b) {
  std::vector<const Instr*> ca, cb;
  for (auto& in : a.instrs)
    if (is_collective(in.kind)) ca.push_back(&in);
  for (auto& in : b.instrs)
    if (is_collective(in.kind)) cb.push_back(&in);
  for (size_t i = 0; i < std::min(ca.size(), cb.size()); ++i)
    if (ca[i]->kind != cb[i]->kind || ca[i]->params != cb[i]->params || ca[i]->group.role != cb[i]->group.role ||
        ca[i]->group.size != cb[i]->group.size)
      return "collective " + std::to_string(i) + " differs: " + op_name(ca[i]->kind) + " vs " + op_name(cb[i]->kind);
  if (ca.size() != cb.size()) return std::to_string(ca.size()) + " collectives vs " + std::to_string(cb.size());
  return "";
}

}  // namespace loom::ir
