#include "backend/sim/memory_walk.h"

#include <algorithm>

namespace loom::memory {

using ir::Instr;
using ir::OpKind;
using ir::Phase;

std::vector<Run> runs_of(const ir::Program& p) {
  std::vector<Run> runs;
  runs.reserve(p.instrs.size() * static_cast<size_t>(std::max<int64_t>(p.micro_batches, 1)));
  for (int64_t mb = 0; mb < p.micro_batches; ++mb) {
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const Instr& in = p.instrs[i];
      if (in.phase == Phase::Step) continue;
      if (ir::runs_in_micro_batch(in.runs_in, mb, p.micro_batches)) runs.push_back({i, static_cast<int>(mb)});
    }
  }
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == Phase::Step) runs.push_back({i, -1});
  return runs;
}

namespace {

// By parameter: whether its optimizer slice is kept and stepped on the host (offload("optimizer"):
// the parameters its offload instruction names).
std::vector<bool> stepped_on_host(const ir::Program& p) {
  std::vector<bool> on_host(p.params.size(), false);
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::Offload)
      for (int q : in.params) on_host[static_cast<size_t>(q)] = true;
  return on_host;
}

// The bytes of optimizer states the program keeps on the host.
double host_held_states(const ir::Program& p, const StateBytes& state_bytes) {
  std::vector<bool> on_host = stepped_on_host(p);
  double elements = 0;
  for (size_t q = 0; q < on_host.size(); ++q)
    if (on_host[q]) elements += static_cast<double>(p.params[q].numel);
  return elements * state_bytes.optim / p.sharding.optim;
}

// The data-parallel reducer's buckets (unsharded states: backend/exec/gradient_reducer.cpp):
// it keeps a flat buffer for each gradient all-reduce of the backward, for the whole run.
int64_t reduction_buffer_bytes(const ir::Program& p) {
  if (p.sharding.optim > 1) return 0;  // the sharded executor reduces each gradient where it is
  int64_t bytes = 0;
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::AllReduce && in.phase == Phase::Backward && in.group.role == ir::Role::Dp && ir::issued_collective(in))
      bytes += in.bytes;
  return bytes;
}

}  // namespace

int64_t resident_bytes(const ir::Program& p, const StateBytes& state_bytes) {
  double elements = 0;
  for (const ir::TracedParam& q : p.params) elements += static_cast<double>(q.numel);
  const ir::Sharding& f = p.sharding;
  double gradients = GradientBuffers::sharded(p) ? elements * state_bytes.grad / f.grads : 0;  // held from their reductions on
  return static_cast<int64_t>(model_state_bytes(elements, state_bytes, f.params, f.grads, f.optim) - gradients -
                              host_held_states(p, state_bytes)) +
         reduction_buffer_bytes(p);
}

int64_t step_start_bytes(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost) {
  return resident_bytes(p, state_bytes) + (cost ? cost->outside_bytes(p) : 0);
}

int64_t padded_bytes(const ir::Program& p, int q) {
  const ir::TracedParam& t = p.params[static_cast<size_t>(q)];
  int64_t padded = (t.numel + p.sharding.optim - 1) / p.sharding.optim * p.sharding.optim;
  return padded * t.element_bytes;
}

namespace {
// The padded full sizes of `in`'s parameters: a gather's output, a reduction's full gradients.
int64_t padded_total(const ir::Program& p, const Instr& in) {
  int64_t total = 0;
  for (int q : in.params) total += padded_bytes(p, q);
  return total;
}
}  // namespace

int64_t gather_launch_bytes(const ir::Program& p, const Instr& in) {
  int64_t output = padded_total(p, in);
  return output + (in.params.size() > 1 ? output / p.sharding.params : 0);  // and the shards' concatenated copy
}

int64_t reduction_launch_bytes(const ir::Program& p, const Instr& in) {
  int64_t full = padded_total(p, in);
  return full / p.sharding.params + full + (in.params.size() > 1 ? full : 0);
}

int64_t gather_peak_bytes(const ir::Program& p, const Instr& in) {
  return gather_launch_bytes(p, in) + (ir::gathered_in_place(p, in) ? 0 : ir::total_param_bytes(p, in.params));
}

int64_t optimizer_step_workspace(const ir::Program& p, const Instr& step) {
  std::vector<bool> on_host = stepped_on_host(p);
  int64_t largest = 0;
  for (int q : step.params)
    if (!on_host[static_cast<size_t>(q)]) largest = std::max(largest, padded_bytes(p, q) / p.params[static_cast<size_t>(q)].element_bytes / p.sharding.optim);
  return 2 * largest * 4;  // fp32 states
}

namespace {

// A compute's saved activations (allocated in forward, freed by its backward) and workspace.
Effect compute_effect(const ir::Program& p, const Instr& in, const InstructionCost* cost) {
  bool backward = in.kind == OpKind::Compute && in.phase == Phase::Backward;  // frees what forward saved
  int64_t workspace = cost ? cost->workspace_bytes(p, in) : 0;
  if (in.kind == OpKind::OptimizerStep) workspace += optimizer_step_workspace(p, in);
  int64_t saved = cost ? cost->activation_bytes(p, in) : in.activation_bytes;
  return {workspace, backward ? -saved : saved};
}

}  // namespace

GatherBuffers::GatherBuffers(const ir::Program& p) : p_(p) {
  for (const Instr& in : p.instrs) {
    if (in.kind != OpKind::AllGather || in.handle < 0 || !ir::issued_collective(in)) continue;
    if (static_cast<size_t>(in.handle) >= by_handle_.size()) by_handle_.resize(static_cast<size_t>(in.handle) + 1);
    Gather& g = by_handle_[static_cast<size_t>(in.handle)];
    g.held = gather_launch_bytes(p, in);
    g.full = ir::total_param_bytes(p, in.params);
    g.direct = ir::gathered_in_place(p, in);
  }
}

Effect GatherBuffers::effect(const Instr& in) const {
  bool gathered = in.handle >= 0 && static_cast<size_t>(in.handle) < by_handle_.size() && by_handle_[static_cast<size_t>(in.handle)].held > 0;
  if (in.kind == OpKind::Release) return p_.sharding.params > 1 ? Effect{0, -ir::total_param_bytes(p_, in.params)} : Effect{};  // replicated stay
  if (!gathered) return {};
  const Gather& g = by_handle_[static_cast<size_t>(in.handle)];
  if (in.kind == OpKind::AllGather) return {0, g.held};
  if (in.kind == OpKind::Wait) return g.direct ? Effect{0, g.full - g.held} : Effect{g.full, g.full - g.held};
  return {};
}

StepMemory::StepMemory(const ir::Program& p, const InstructionCost* cost)
    : p_(p), cost_(cost), gathers_(p), gradients_(p), states_(p), tied_(p) {}

Effect StepMemory::effect(const Instr& in, int micro_batch) {
  Effect e = gathers_.effect(in);
  switch (in.kind) {
    case OpKind::Compute:
    case OpKind::Recompute:
    case OpKind::OptimizerStep:
    case OpKind::SelectDrop: {
      Effect c = compute_effect(p_, in, cost_);
      e.transient += c.transient;
      e.change += c.change;
      break;
    }
    default:
      break;
  }
  e.change += gradients_.change(in, micro_batch) + states_.change(in) + tied_.change(in);
  return e;
}

bool GradientBuffers::sharded(const ir::Program& p) { return p.sharding.optim > 1; }

namespace {
// A backward instruction that reduces gradients in the sharded executor: a reduce-scatter (or
// TAGC's compress) among the parameter's shards, or an all-reduce over its replicas or
// gradient peers.
bool reduces_gradients(const Instr& in) {
  if (in.phase != Phase::Backward || in.handle < 0 || !ir::issued_collective(in)) return false;
  if (in.kind == OpKind::ReduceScatter || in.kind == OpKind::Compress) return true;
  return ir::sums_over_replicas(in) || (in.kind == OpKind::AllReduce && in.group.role == ir::Role::Grads);
}
}  // namespace

GradientBuffers::GradientBuffers(const ir::Program& p) : p_(p), active_(sharded(p)) {
  if (!active_) return;
  held_.assign(p.params.size(), false);
  reduced_.assign(p.params.size(), false);
  accumulated_.assign(p.params.size(), 0);
  slice_.assign(p.params.size(), 0);
  reductions_of_.resize(p.params.size());
  last_compute_.assign(p.params.size(), p.instrs.size());
  last_backward_compute_ = ir::last_backward_compute(p);
  by_handle_.resize(static_cast<size_t>(ir::handle_count(p)));
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.kind == OpKind::Compute && in.phase == Phase::Backward)
      for (int q : in.params) last_compute_[static_cast<size_t>(q)] = i;
    if (!reduces_gradients(in)) continue;
    Reduction& r = by_handle_[static_cast<size_t>(in.handle)];
    r.params = in.params.empty() ? nullptr : &in.params;
    r.at = i;
    if (in.kind == OpKind::AllReduce) r.launch = in.params.size() > 1 ? padded_total(p, in) / p.sharding.params : 0;
    else r.launch = reduction_launch_bytes(p, in);
    for (int q : in.params) reductions_of_[static_cast<size_t>(q)].push_back(i);
  }
  for (size_t q = 0; q < p.params.size(); ++q)
    if (last_compute_[q] == p.instrs.size() && !reductions_of_[q].empty()) {
      uncomputed_.push_back(static_cast<int>(q));
      last_compute_[q] = last_backward_compute_;  // completed there, as zeros
    }
}

int64_t GradientBuffers::drop_autograd() {
  int64_t bytes = 0;
  for (int q : autograd_) bytes -= ir::param_bytes(p_, q);
  autograd_.clear();
  return bytes;
}

const GradientBuffers::Reduction* GradientBuffers::reduction_of(const Instr& in) const {
  if (in.handle < 0 || static_cast<size_t>(in.handle) >= by_handle_.size()) return nullptr;
  const Reduction& r = by_handle_[static_cast<size_t>(in.handle)];
  return r.params ? &r : nullptr;
}

bool GradientBuffers::last(int micro_batch) const { return micro_batch == p_.micro_batches - 1; }

bool GradientBuffers::reduced_again(int q, size_t after, int micro_batch) const {
  for (size_t i : reductions_of_[static_cast<size_t>(q)])
    if (i > after && ir::runs_in_micro_batch(p_.instrs[i].runs_in, micro_batch, p_.micro_batches)) return true;
  return false;
}

int64_t GradientBuffers::add_accumulated(int q) {
  int64_t freed = accumulated_[static_cast<size_t>(q)];
  accumulated_[static_cast<size_t>(q)] = 0;
  return -freed;
}

int64_t GradientBuffers::land(int q, bool last_micro_batch) {
  size_t k = static_cast<size_t>(q);
  int64_t bytes = 0;
  if (held_[k]) bytes -= padded_bytes(p_, q);  // at s_p = 1 the full gradient is what the all-reduce summed
  held_[k] = false;
  if (reduced_[k]) bytes -= padded_bytes(p_, q) / p_.sharding.params;
  reduced_[k] = false;
  if (last_micro_batch) {
    bytes += add_accumulated(q);
    slice_[k] = padded_bytes(p_, q) / p_.sharding.optim;
    bytes += slice_[k];
  } else if (accumulated_[k] == 0) {  // accumulated into from here on
    accumulated_[k] = padded_bytes(p_, q) / p_.sharding.grads;
    bytes += accumulated_[k];
  }
  return bytes;
}

int64_t GradientBuffers::end_micro_batch(bool last_micro_batch) {
  int64_t bytes = drop_autograd();
  for (size_t q = 0; q < held_.size(); ++q)
    if (held_[q] || reduced_[q]) bytes += land(static_cast<int>(q), last_micro_batch);
  return bytes;
}

int64_t GradientBuffers::hold(int q, size_t at, int micro_batch) {
  size_t k = static_cast<size_t>(q);
  int64_t bytes = 0;
  if (!held_[k]) {
    held_[k] = true;
    bytes += padded_bytes(p_, q);
  }
  // No reduction of q runs in this micro-batch (ZeRO-1 before the last): the executor adds
  // the gradient into what it keeps where the program's reduction stands, after its last use.
  if (at == last_compute_[k] && !reduced_again(q, at, micro_batch)) bytes += land(q, last(micro_batch));
  return bytes;
}

int64_t GradientBuffers::hand_gradients(const Instr& compute, int micro_batch) {
  int64_t bytes = 0;
  size_t at = static_cast<size_t>(&compute - p_.instrs.data());
  for (int q : compute.params) {
    autograd_.push_back(q);
    bytes += ir::param_bytes(p_, q) + hold(q, at, micro_batch);
  }
  if (at != last_backward_compute_) return bytes;
  for (int q : uncomputed_) bytes += hold(q, at, micro_batch);
  return bytes;
}

int64_t GradientBuffers::launch(const Reduction& r, int micro_batch) {
  int64_t bytes = r.launch;
  if (last(micro_batch) && p_.instrs[r.at].kind == OpKind::AllReduce)  // the full gradient it sums has the earlier ones' added
    for (int q : *r.params)
      if (held_[static_cast<size_t>(q)]) bytes += add_accumulated(q);
  return bytes;
}

int64_t GradientBuffers::finish(const Reduction& r, int micro_batch) {
  int64_t bytes = -r.launch;
  for (int q : *r.params) {
    size_t k = static_cast<size_t>(q);
    if (!reduced_again(q, r.at, micro_batch)) {
      bytes += land(q, last(micro_batch));
      continue;
    }
    if (p_.instrs[r.at].kind == OpKind::AllReduce) continue;  // summed in place, reduced further
    if (last(micro_batch)) bytes += add_accumulated(q);
    if (held_[k]) bytes -= padded_bytes(p_, q);  // the full gradient was the reduce-scatter's input
    held_[k] = false;
    if (!reduced_[k]) bytes += padded_bytes(p_, q) / p_.sharding.params;
    reduced_[k] = true;
  }
  return bytes;
}

int64_t GradientBuffers::change(const Instr& in, int micro_batch) {
  if (!active_) return 0;
  int64_t bytes = 0;
  if (micro_batch != micro_batch_) {  // runs_of: one micro-batch's runs after another's, then the tail
    bytes += end_micro_batch(last(micro_batch_));
    micro_batch_ = micro_batch;
  }
  bool compute = in.kind == OpKind::Compute && in.phase == Phase::Backward;
  const Reduction* reduction = reduction_of(in);
  bool launches = reduction && in.kind != OpKind::Wait;
  if (compute || !launches) bytes += drop_autograd();  // the op's reductions launch inside it
  if (compute) return bytes + hand_gradients(in, micro_batch);
  if (in.kind == OpKind::OptimizerStep) {
    for (int64_t& slice : slice_) {
      bytes -= slice;
      slice = 0;
    }
  } else if (reduction) {
    bytes += launches ? launch(*reduction, micro_batch) : finish(*reduction, micro_batch);
  }
  return bytes;
}

TiedGradients::TiedGradients(const ir::Program& p) : p_(p) {
  if (GradientBuffers::sharded(p)) return;
  constexpr size_t none = static_cast<size_t>(-1);
  uses_.assign(p.params.size(), {none, none});
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.kind != OpKind::Compute || in.phase != Phase::Backward) continue;
    for (int q : in.params) {
      auto& [first, last] = uses_[static_cast<size_t>(q)];
      if (first == none) first = i;
      last = i;
    }
  }
}

int64_t TiedGradients::change(const Instr& in) const {
  if (uses_.empty() || in.kind != OpKind::Compute || in.phase != Phase::Backward) return 0;
  size_t i = static_cast<size_t>(&in - p_.instrs.data());
  int64_t bytes = 0;
  for (int q : in.params) {
    auto [first, last] = uses_[static_cast<size_t>(q)];
    if (first == last) continue;
    if (i == first) bytes += ir::param_bytes(p_, q);  // held in autograd's input buffer
    if (i == last) bytes -= ir::param_bytes(p_, q);   // summed into .grad
  }
  return bytes;
}

StateCopies::StateCopies(const ir::Program& p) {
  for (const Instr& in : p.instrs) {
    if (in.kind != OpKind::OffloadStates || in.handle < 0) continue;
    if (static_cast<size_t>(in.handle) >= freed_by_wait_.size()) freed_by_wait_.resize(static_cast<size_t>(in.handle) + 1, 0);
    freed_by_wait_[static_cast<size_t>(in.handle)] = in.bytes;
  }
}

int64_t StateCopies::change(const Instr& in) const {
  if (in.kind == OpKind::ReloadStates) return in.bytes;
  if (in.kind == OpKind::Wait && in.handle >= 0 && static_cast<size_t>(in.handle) < freed_by_wait_.size())
    return -freed_by_wait_[static_cast<size_t>(in.handle)];
  return 0;
}

std::vector<int64_t> memory_around_each(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost) {
  std::vector<int64_t> around(p.instrs.size(), 0);
  int64_t in_use = step_start_bytes(p, state_bytes, cost);
  StepMemory memory(p, cost);
  for (const Run& run : runs_of(p)) {
    Effect e = memory.effect(p.instrs[run.instr], run.micro_batch);
    int64_t high = std::max({in_use, in_use + e.transient, in_use + e.change});
    around[run.instr] = std::max(around[run.instr], high);
    in_use += e.change;
  }
  return around;
}

WalkPeak walk_peak(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost) {
  std::vector<int64_t> around = memory_around_each(p, state_bytes, cost);
  WalkPeak peak;
  for (size_t i = 0; i < around.size(); ++i)
    if (around[i] > peak.bytes) peak = {around[i], i};
  return peak;
}

}  // namespace loom::memory
