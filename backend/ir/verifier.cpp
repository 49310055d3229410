#include "backend/ir/verifier.h"

#include <algorithm>
#include <vector>

namespace loom::ir {
namespace {

bool is_collective(OpKind k) { return collective_op(k) != nullptr; }

// A violation at instruction i: "instruction 6 (fwd compute h.0.proj): <what>".
std::string at_instruction(const Program& p, size_t i, const std::string& what) {
  const Instr& in = p.instrs[i];
  return "instruction " + std::to_string(i) + " (" + phase_name(in.phase) + " " + op_name(in.kind) +
         (in.module.empty() ? "" : " " + in.module) + "): " + what;
}

// Where a sharded parameter is: its shard only, its gather in flight, or gathered.
enum class Gathered { Sharded, InFlight, Resident };

// Walks a program in order, one check per instruction kind, keeping what each needs: which
// parameters are gathered, which handles were issued and waited, which gradients reduced, where
// the optimizer states and the updated values are. Each check returns "" or the violation.
class StepChecker {
 public:
  explicit StepChecker(const Program& p);

  std::string check(size_t i);
  // What must hold once every instruction has run.
  std::string check_end() const;

 private:
  enum class States { Device, Leaving, Host, Returning };  // optimizer states (adaptive offloading)
  static constexpr long kNone = -1;

  std::string at(size_t i, const std::string& what) const;
  std::string check_operands(size_t i);
  std::string check_compute(size_t i) const;
  std::string check_gather(size_t i);
  std::string check_wait(size_t i);
  std::string check_state_copy(size_t i);
  std::string check_release(size_t i);
  std::string check_reduction(size_t i);
  std::string check_gradient_reader(size_t i);
  std::string check_reload(size_t i);

  const Program& p;
  const size_t n_params;
  const bool sharded;
  std::vector<Gathered> gathered_state;
  int64_t gathered_bytes = 0;
  std::vector<long> issued;  // per handle (handles are dense): the instruction that issued it, kNone if none
  std::vector<bool> waited;
  std::vector<bool> reduced;
  std::vector<int> reduction_handles;
  std::vector<long> last_backward_use;  // a gradient is complete after it: no reduction before
  std::vector<int> updated;  // the parameters this rank's optimizer step updates (a pipeline stage: its own)
  std::vector<bool> is_updated;
  bool stepped = false;  // the optimizer step has run
  std::vector<bool> on_host;  // updated values offloaded, not yet reloaded
  size_t offloaded = 0;
  std::vector<States> states;
};

StepChecker::StepChecker(const Program& program)
    : p(program),
      n_params(program.params.size()),
      sharded(program.sharding.params > 1),
      gathered_state(n_params, sharded ? Gathered::Sharded : Gathered::Resident),
      reduced(n_params, false),
      last_backward_use(n_params, kNone),
      is_updated(n_params, false),
      on_host(n_params, false),
      states(n_params, States::Device) {
  issued.assign(static_cast<size_t>(handle_count(p)), kNone);
  waited.assign(issued.size(), false);
  auto exists = [&](int q) { return q >= 0 && q < static_cast<int>(n_params); };
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.kind == OpKind::OptimizerStep)
      for (int q : in.params)
        if (exists(q) && !is_updated[q]) is_updated[q] = true, updated.push_back(q);
    if (in.kind == OpKind::Compute && in.phase == Phase::Backward)
      for (int q : in.params)
        if (exists(q)) last_backward_use[q] = static_cast<long>(i);
  }
}

std::string StepChecker::at(size_t i, const std::string& what) const { return at_instruction(p, i, what); }

std::string StepChecker::check(size_t i) {
  if (std::string problem = check_operands(i); !problem.empty()) return problem;
  switch (p.instrs[i].kind) {
    case OpKind::Recompute:
    case OpKind::Compute: return check_compute(i);
    case OpKind::AllGather: return check_gather(i);
    case OpKind::Wait: return check_wait(i);
    case OpKind::OffloadStates:
    case OpKind::ReloadStates: return check_state_copy(i);
    case OpKind::Release: return check_release(i);
    case OpKind::ReduceScatter:
    case OpKind::Compress:
    case OpKind::AllReduce: return check_reduction(i);
    case OpKind::Offload:
    case OpKind::GradNorm:
    case OpKind::OptimizerStep: return check_gradient_reader(i);
    case OpKind::Reload: return check_reload(i);
    default: return "";
  }
}

// What every instruction must satisfy: parameters that exist, a fresh handle, no unpacking but a wait's.
std::string StepChecker::check_operands(size_t i) {
  const Instr& in = p.instrs[i];
  for (int q : in.params)
    if (q < 0 || q >= static_cast<int>(n_params)) return at(i, "refers to parameter " + std::to_string(q) + ", which does not exist");
  if (issues_handle(in.kind)) {
    if (in.handle < 0 || in.handle >= static_cast<int>(issued.size()) || issued[in.handle] != kNone)
      return at(i, "an asynchronous instruction (a collective or a copy) needs a fresh handle");
    issued[in.handle] = static_cast<long>(i);
  }
  if (in.unpack_bytes < 0 || (in.unpack_bytes > 0 && in.kind != OpKind::Wait))
    return at(i, "unpacks " + std::to_string(in.unpack_bytes) + " bytes: only a wait unpacks, and never a negative number");
  return "";
}

std::string StepChecker::check_compute(size_t i) const {
  const Instr& in = p.instrs[i];
  if (in.kind == OpKind::Recompute && in.phase != Phase::Backward) return at(i, "recomputes outside the backward");
  if (in.runs_in != MicroBatches::All) return at(i, "computes in only some micro-batches");
  if (!p.gathers_placed) return "";
  for (int q : in.params)
    if (gathered_state[q] != Gathered::Resident)
      return at(i, "uses " + p.params[q].name +
                       (gathered_state[q] == Gathered::InFlight ? " before waiting for its gather" : " while it is not gathered"));
  return "";
}

std::string StepChecker::check_gather(size_t i) {
  const Instr& in = p.instrs[i];
  if (!sharded) return at(i, "gathers although parameters are not sharded");
  if (in.bytes != total_param_bytes(p, in.params))  // what the cost model prices it by
    return at(i, "moves " + std::to_string(in.bytes) + " bytes where its parameters hold " + std::to_string(total_param_bytes(p, in.params)));
  for (int q : in.params) {
    if (gathered_state[q] != Gathered::Sharded) return at(i, "gathers " + p.params[q].name + ", which is already gathered");
    gathered_state[q] = Gathered::InFlight;
    gathered_bytes += param_bytes(p, q);
  }
  if (p.memory_limit > 0 && gathered_bytes > p.memory_limit)
    return at(i, "gathered parameters take " + std::to_string(gathered_bytes) + " bytes, over the limit of " + std::to_string(p.memory_limit));
  return "";
}

std::string StepChecker::check_wait(size_t i) {
  const Instr& in = p.instrs[i];
  if (in.handle < 0 || in.handle >= static_cast<int>(issued.size()) || issued[in.handle] == kNone)
    return at(i, "waits for %" + std::to_string(in.handle) + ", which was never issued");
  if (waited[in.handle]) return at(i, "waits for %" + std::to_string(in.handle) + " twice");
  waited[in.handle] = true;
  const Instr& launched = p.instrs[issued[in.handle]];
  if (in.phase != Phase::Step && in.runs_in != launched.runs_in)
    return at(i, "waits for %" + std::to_string(in.handle) + " in other micro-batches than it runs in");
  if (launched.kind == OpKind::AllGather)
    for (int q : launched.params) gathered_state[q] = Gathered::Resident;
  if (launched.kind == OpKind::OffloadStates || launched.kind == OpKind::ReloadStates)
    for (int q : launched.params) states[q] = launched.kind == OpKind::OffloadStates ? States::Host : States::Device;
  return "";
}

// An offload_states or reload_states: once a step each way, out in the first micro-batch, back in the last.
std::string StepChecker::check_state_copy(size_t i) {
  const Instr& in = p.instrs[i];
  bool out = in.kind == OpKind::OffloadStates;
  MicroBatches once = out ? MicroBatches::First : MicroBatches::Last;
  if (p.micro_batches > 1 && in.runs_in != once)
    return at(i, std::string("moves optimizer states in other micro-batches than the ") + (out ? "first" : "last") + " (once a step each way)");
  if (in.phase == Phase::Step) return at(i, "copies optimizer states in the step's tail, where the optimizer needs them");
  for (int q : in.params) {
    if (!is_updated[q]) return at(i, "moves the optimizer states of " + p.params[q].name + ", which this rank's optimizer does not update");
    if (states[q] != (out ? States::Device : States::Host))
      return at(i, out ? "offloads the optimizer states of " + p.params[q].name + ", which are not on the device"
                       : "reloads the optimizer states of " + p.params[q].name + ", which are not on the host (their offload must be waited first)");
    states[q] = out ? States::Leaving : States::Returning;
  }
  return "";
}

std::string StepChecker::check_release(size_t i) {
  for (int q : p.instrs[i].params) {
    if (gathered_state[q] != Gathered::Resident) return at(i, "releases " + p.params[q].name + ", which is not gathered");
    gathered_state[q] = Gathered::Sharded;
    gathered_bytes -= param_bytes(p, q);
  }
  return "";
}

// A reduce-scatter, compress or all-reduce in backward reduces gradients, each once it is complete.
std::string StepChecker::check_reduction(size_t i) {
  const Instr& in = p.instrs[i];
  if (in.phase != Phase::Backward) return "";
  for (int q : in.params) {
    if (last_backward_use[q] > static_cast<long>(i))
      return at(i, "reduces the gradient of " + p.params[q].name + " before its last backward use (instruction " +
                       std::to_string(last_backward_use[q]) + ")");
    reduced[q] = true;
  }
  reduction_handles.push_back(in.handle);
  return "";
}

// An offload of gradients, the gradient norm and the optimizer step each read every reduced
// gradient: each must be reduced and waited for.
std::string StepChecker::check_gradient_reader(size_t i) {
  const Instr& in = p.instrs[i];
  if (in.kind == OpKind::Offload) {
    if (stepped) return at(i, "copies gradients to the host after the optimizer step");
    for (int q : in.params)
      if (!on_host[q]) on_host[q] = true, ++offloaded;
  }
  std::string what = in.kind == OpKind::GradNorm ? "measures the gradient norm"
                     : in.kind == OpKind::Offload ? "copies gradients to the host"
                                                  : "updates parameters";
  stepped = stepped || in.kind == OpKind::OptimizerStep;
  if (in.kind == OpKind::OptimizerStep)
    for (int q : updated)
      if (states[q] != States::Device)
        return at(i, "updates " + p.params[q].name + " while its optimizer states are not back on the device (wait for their reload)");
  if (p.sharding.dp > 1 && p.reductions_placed) {
    for (int q : updated)
      if (!reduced[q]) return at(i, what + " before the gradient of " + p.params[q].name + " is reduced");
    for (int h : reduction_handles)
      if (!waited[h]) return at(i, what + " before waiting for gradient reduction %" + std::to_string(h));
  }
  return "";
}

std::string StepChecker::check_reload(size_t i) {
  if (!stepped) return at(i, "copies values to the device before the optimizer step updated them");
  for (int q : p.instrs[i].params) {
    if (!on_host[q]) return at(i, "reloads " + p.params[q].name + ", which was not offloaded");
    on_host[q] = false, --offloaded;
  }
  return "";
}

std::string StepChecker::check_end() const {
  for (size_t h = 0; h < issued.size(); ++h) {
    if (issued[h] == kNone || waited[h]) continue;
    size_t launch = static_cast<size_t>(issued[h]);
    std::string what = is_collective(p.instrs[launch].kind) ? "collective %" : "copy %";
    return at(launch, what + std::to_string(h) + " is never waited");
  }
  for (size_t q = 0; q < n_params; ++q)
    if (sharded && p.gathers_placed && gathered_state[q] != Gathered::Sharded) return "end of step: " + p.params[q].name + " is still gathered";
  for (size_t q = 0; q < n_params && offloaded > 0; ++q)
    if (on_host[q]) return "end of step: the updated values of " + p.params[q].name + " never come back to the device";
  return "";
}

// Under accumulation the body runs once per micro-batch, each instruction in the micro-batches
// its runs_in names; a parameter unsharded across them (keep_gathered) is gathered in the first
// and released in the last. StepChecker reads the program once; this follows the gathered state
// through every micro-batch's run: each use finds its parameters gathered, each gather finds
// them sharded, each release gathered, and the step ends with all of them sharded.
std::string check_gathers_by_micro_batch(const Program& p) {
  if (p.micro_batches <= 1 || p.sharding.params <= 1 || !p.gathers_placed) return "";
  // Where every gather, wait and release runs in every micro-batch, each repeats StepChecker's one pass.
  bool some_once = std::any_of(p.instrs.begin(), p.instrs.end(), [](const Instr& in) {
    bool gathering = in.kind == OpKind::AllGather || in.kind == OpKind::Wait || in.kind == OpKind::Release;
    return gathering && in.phase != Phase::Step && in.runs_in != MicroBatches::All;
  });
  if (!some_once) return "";
  std::vector<Gathered> state(p.params.size(), Gathered::Sharded);
  std::vector<long> gather_of(static_cast<size_t>(handle_count(p)), -1);  // by handle: its gather's instruction
  auto at = [&](size_t i, int64_t mb, const std::string& what) {
    return at_instruction(p, i, what + " in micro-batch " + std::to_string(mb + 1) + " of " + std::to_string(p.micro_batches));
  };
  for (int64_t mb = 0; mb < p.micro_batches; ++mb) {
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      if (in.phase == Phase::Step || !runs_in_micro_batch(in.runs_in, mb, p.micro_batches)) continue;
      if (in.kind == OpKind::AllGather) {
        for (int q : in.params)
          if (state[q] != Gathered::Sharded) return at(i, mb, "gathers " + p.params[q].name + ", which is already gathered");
        for (int q : in.params) state[q] = Gathered::InFlight;
        gather_of[in.handle] = static_cast<long>(i);
      } else if (in.kind == OpKind::Wait && in.handle < static_cast<int>(gather_of.size()) && gather_of[in.handle] >= 0) {
        for (int q : p.instrs[gather_of[in.handle]].params) state[q] = Gathered::Resident;
        gather_of[in.handle] = -1;
      } else if (in.kind == OpKind::Release || runs_module(in.kind)) {
        for (int q : in.params)
          if (state[q] != Gathered::Resident)
            return at(i, mb, (in.kind == OpKind::Release ? "releases " : "uses ") + p.params[q].name +
                                 (state[q] == Gathered::InFlight ? " before waiting for its gather" : " while it is not gathered"));
        if (in.kind == OpKind::Release)
          for (int q : in.params) state[q] = Gathered::Sharded;
      }
    }
  }
  for (size_t q = 0; q < p.params.size(); ++q)
    if (state[q] != Gathered::Sharded) return "end of step: " + p.params[q].name + " is still gathered after the last micro-batch";
  return "";
}

}  // namespace

std::string verify(const Program& p) {
  StepChecker checker(p);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (std::string problem = checker.check(i); !problem.empty()) return problem;
  if (std::string problem = checker.check_end(); !problem.empty()) return problem;
  return check_gathers_by_micro_batch(p);
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
