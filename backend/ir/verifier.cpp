#include "backend/ir/verifier.h"

#include <algorithm>
#include <vector>

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
  const size_t n_params = p.params.size();
  std::vector<State> state(n_params, sharded ? State::Sharded : State::Resident);
  // Per handle (handles are dense): the instruction that issued it, kNone if none.
  constexpr long kNone = -1;
  int handles = std::max(p.next_handle, 0);
  for (const Instr& in : p.instrs) handles = std::max(handles, in.handle + 1);
  std::vector<long> issued(static_cast<size_t>(handles), kNone);
  std::vector<bool> waited(issued.size(), false);
  std::vector<bool> reduced(n_params, false);
  std::vector<int> reduction_handles;
  int64_t gathered = 0;
  bool stepped = false;  // the optimizer step has run
  std::vector<int> updated;  // the parameters this rank's optimizer step updates (a pipeline stage: its own)
  std::vector<bool> is_updated(n_params, false);
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::OptimizerStep)
      for (int q : in.params)
        if (q >= 0 && q < static_cast<int>(n_params) && !is_updated[q]) is_updated[q] = true, updated.push_back(q);
  std::vector<bool> on_host(n_params, false);  // offloaded, not yet reloaded
  // Optimizer states moved by OffloadStates / ReloadStates (adaptive offloading).
  enum class States { Device, Leaving, Host, Returning };
  std::vector<States> states(n_params, States::Device);
  size_t offloaded = 0;
  // A gradient is complete after its parameter's last backward compute: no reduction before it.
  std::vector<long> last_backward_use(n_params, kNone);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Compute && p.instrs[i].phase == Phase::Backward)
      for (int q : p.instrs[i].params)
        if (q >= 0 && q < static_cast<int>(n_params)) last_backward_use[q] = static_cast<long>(i);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    for (int q : in.params)
      if (q < 0 || q >= static_cast<int>(n_params)) return at(i, p, "refers to parameter " + std::to_string(q) + ", which does not exist");
    if (issues_handle(in.kind)) {
      if (in.handle < 0 || in.handle >= static_cast<int>(issued.size()) || issued[in.handle] != kNone)
        return at(i, p, "an asynchronous instruction (a collective or a copy) needs a fresh handle");
      issued[in.handle] = static_cast<long>(i);
    }
    if (in.unpack_bytes < 0 || (in.unpack_bytes > 0 && in.kind != OpKind::Wait))
      return at(i, p, "unpacks " + std::to_string(in.unpack_bytes) + " bytes: only a wait unpacks, and never a negative number");
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
        if (in.bytes != total_param_bytes(p, in.params))  // what the cost model prices it by
          return at(i, p, "moves " + std::to_string(in.bytes) + " bytes where its parameters hold " +
                              std::to_string(total_param_bytes(p, in.params)));
        for (int q : in.params) {
          if (state[q] != State::Sharded) return at(i, p, "gathers " + p.params[q].name + ", which is already gathered");
          state[q] = State::InFlight;
          gathered += param_bytes(p, q);
        }
        if (p.memory_limit > 0 && gathered > p.memory_limit)
          return at(i, p, "gathered parameters take " + std::to_string(gathered) + " bytes, over the limit of " + std::to_string(p.memory_limit));
        break;
      case OpKind::Wait: {
        if (in.handle < 0 || in.handle >= static_cast<int>(issued.size()) || issued[in.handle] == kNone)
          return at(i, p, "waits for %" + std::to_string(in.handle) + ", which was never issued");
        if (waited[in.handle]) return at(i, p, "waits for %" + std::to_string(in.handle) + " twice");
        waited[in.handle] = true;
        const Instr& collective = p.instrs[issued[in.handle]];
        if (in.phase != Phase::Step && in.runs_in != collective.runs_in)
          return at(i, p, "waits for %" + std::to_string(in.handle) + " in other micro-batches than it runs in");
        if (collective.kind == OpKind::AllGather)
          for (int q : collective.params) state[q] = State::Resident;
        if (collective.kind == OpKind::OffloadStates || collective.kind == OpKind::ReloadStates)
          for (int q : collective.params) states[q] = collective.kind == OpKind::OffloadStates ? States::Host : States::Device;
        break;
      }
      case OpKind::OffloadStates:
      case OpKind::ReloadStates: {
        bool out = in.kind == OpKind::OffloadStates;
        // Once a step each way: out in the first micro-batch, back in the last.
        MicroBatches once = out ? MicroBatches::First : MicroBatches::Last;
        if (p.micro_batches > 1 && in.runs_in != once)
          return at(i, p, std::string("moves optimizer states in other micro-batches than the ") + (out ? "first" : "last") +
                              " (once a step each way)");
        if (in.phase == Phase::Step) return at(i, p, "copies optimizer states in the step's tail, where the optimizer needs them");
        for (int q : in.params) {
          if (!is_updated[q]) return at(i, p, "moves the optimizer states of " + p.params[q].name + ", which this rank's optimizer does not update");
          if (states[q] != (out ? States::Device : States::Host))
            return at(i, p, (out ? "offloads the optimizer states of " + p.params[q].name + ", which are not on the device"
                                 : "reloads the optimizer states of " + p.params[q].name +
                                       ", which are not on the host (their offload must be waited first)"));
          states[q] = out ? States::Leaving : States::Returning;
        }
        break;
      }
      case OpKind::Release:
        for (int q : in.params) {
          if (state[q] != State::Resident) return at(i, p, "releases " + p.params[q].name + ", which is not gathered");
          state[q] = State::Sharded;
          gathered -= param_bytes(p, q);
        }
        break;
      case OpKind::ReduceScatter:
      case OpKind::Compress:
      case OpKind::AllReduce:
        if (in.phase == Phase::Backward) {
          for (int q : in.params) {
            if (last_backward_use[q] > static_cast<long>(i))
              return at(i, p, "reduces the gradient of " + p.params[q].name + " before its last backward use (instruction " +
                                  std::to_string(last_backward_use[q]) + ")");
            reduced[q] = true;
          }
          reduction_handles.push_back(in.handle);
        }
        break;
      case OpKind::Offload:
        if (stepped) return at(i, p, "copies gradients to the host after the optimizer step");
        for (int q : in.params)
          if (!on_host[q]) on_host[q] = true, ++offloaded;
        [[fallthrough]];
      case OpKind::GradNorm:
      case OpKind::OptimizerStep: {
        // Each reads every reduced gradient: each must be reduced and waited for.
        std::string what = in.kind == OpKind::GradNorm ? "measures the gradient norm"
                           : in.kind == OpKind::Offload ? "copies gradients to the host"
                                                        : "updates parameters";
        stepped = stepped || in.kind == OpKind::OptimizerStep;
        if (in.kind == OpKind::OptimizerStep)
          for (int q : updated)
            if (states[q] != States::Device)
              return at(i, p, "updates " + p.params[q].name + " while its optimizer states are not back on the device (wait for their reload)");
        if (p.sharding.dp > 1 && p.reductions_placed) {
          for (int q : updated)
            if (!reduced[q]) return at(i, p, what + " before the gradient of " + p.params[q].name + " is reduced");
          for (int h : reduction_handles)
            if (!waited[h]) return at(i, p, what + " before waiting for gradient reduction %" + std::to_string(h));
        }
        break;
      }
      case OpKind::Reload:
        if (!stepped) return at(i, p, "copies values to the device before the optimizer step updated them");
        for (int q : in.params) {
          if (!on_host[q]) return at(i, p, "reloads " + p.params[q].name + ", which was not offloaded");
          on_host[q] = false, --offloaded;
        }
        break;
      default: break;
    }
  }
  for (size_t h = 0; h < issued.size(); ++h) {
    if (issued[h] == kNone || waited[h]) continue;
    size_t launch = static_cast<size_t>(issued[h]);
    std::string what = is_collective(p.instrs[launch].kind) ? "collective %" : "copy %";
    return at(launch, p, what + std::to_string(h) + " is never waited");
  }
  for (size_t q = 0; q < n_params; ++q)
    if (sharded && p.gathers_placed && state[q] != State::Sharded) return "end of step: " + p.params[q].name + " is still gathered";
  for (size_t q = 0; q < n_params && offloaded > 0; ++q)
    if (on_host[q]) return "end of step: the updated values of " + p.params[q].name + " never come back to the device";
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
