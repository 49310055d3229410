#include "backend/sim/memory_walk.h"

#include <algorithm>

namespace loom::memory {

using ir::Instr;
using ir::OpKind;
using ir::Phase;

std::vector<Run> runs_of(const ir::Program& p) {
  std::vector<Run> runs;
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

// The bytes of optimizer states the program keeps on the host (offload("optimizer")): those of
// the parameters its offload instruction names.
double host_held_states(const ir::Program& p, const StateBytes& state_bytes) {
  double elements = 0;
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::Offload)
      for (int q : in.params) elements += static_cast<double>(p.params[static_cast<size_t>(q)].numel);
  return elements * state_bytes.optim / p.sharding.optim;
}

// The data-parallel reducer's buckets (unsharded states: backend/exec/gradient_reducer.cpp):
// it keeps a flat buffer for each gradient all-reduce of the backward, for the whole run.
int64_t reduction_buffer_bytes(const ir::Program& p) {
  if (p.sharding.optim > 1) return 0;  // the sharded executor reduces each gradient where it is
  int64_t bytes = 0;
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::AllReduce && in.phase == Phase::Backward && in.group.role == "dp" && ir::issued_collective(in))
      bytes += in.bytes;
  return bytes;
}

}  // namespace

int64_t resident_bytes(const ir::Program& p, const StateBytes& state_bytes) {
  double elements = 0;
  for (const ir::TracedParam& q : p.params) elements += static_cast<double>(q.numel);
  const ir::Sharding& f = p.sharding;
  return static_cast<int64_t>(model_state_bytes(elements, state_bytes, f.params, f.grads, f.optim) - host_held_states(p, state_bytes)) +
         reduction_buffer_bytes(p);
}

int64_t gathered_bytes(const ir::Program& p, const Instr& in) {
  int64_t bytes = 0;
  for (int q : in.params) bytes += ir::param_bytes(p, q) - ir::param_bytes(p, q) / p.sharding.params;
  return bytes;
}

Effect effect_of(const ir::Program& p, const Instr& in, const InstructionCost* cost) {
  switch (in.kind) {
    case OpKind::Release:
      return {0, -gathered_bytes(p, in)};
    case OpKind::AllGather:
      return {0, ir::issued_collective(in) ? gathered_bytes(p, in) : 0};
    case OpKind::Compute:
    case OpKind::Recompute:
    case OpKind::OptimizerStep:
    case OpKind::SelectDrop: {
      int64_t workspace = cost ? cost->workspace_bytes(p, in) : 0;
      bool frees = in.kind == OpKind::Compute && in.phase == Phase::Backward;  // backward frees what forward saved
      return {workspace, frees ? -in.activation_bytes : in.activation_bytes};
    }
    default:
      return {};
  }
}

GradientBuffers::GradientBuffers(const ir::Program& p) : p_(p), active_(p.sharding.grads > 1 && p.sharding.optim > 1) {
  if (!active_) return;
  held_.assign(p.params.size(), false);
  int handles = p.next_handle;
  for (const Instr& in : p.instrs) handles = std::max(handles, in.handle + 1);
  reduced_by_.resize(static_cast<size_t>(std::max(handles, 0)));
  wire_by_.assign(reduced_by_.size(), 0);
  for (const Instr& in : p.instrs) {
    bool reduction = in.phase == Phase::Backward && (in.kind == OpKind::ReduceScatter || in.kind == OpKind::Compress);
    if (!reduction || in.handle < 0) continue;
    reduced_by_[static_cast<size_t>(in.handle)] = in.params;
    if (in.params.size() > 1)
      for (int q : in.params) wire_by_[static_cast<size_t>(in.handle)] += full_bytes(q);
  }
}

int64_t GradientBuffers::full_bytes(int q) const {
  const ir::TracedParam& t = p_.params[static_cast<size_t>(q)];
  int64_t padded = (t.numel + p_.sharding.optim - 1) / p_.sharding.optim * p_.sharding.optim;
  return padded * t.element_bytes;
}

int64_t GradientBuffers::change(const Instr& in) {
  if (!active_) return 0;
  int64_t bytes = 0;
  if (in.kind == OpKind::Compute && in.phase == Phase::Backward) {
    for (int q : in.params)
      if (!held_[static_cast<size_t>(q)]) {
        held_[static_cast<size_t>(q)] = true;
        bytes += full_bytes(q);
      }
  } else if (in.handle >= 0 && static_cast<size_t>(in.handle) < reduced_by_.size()) {
    size_t h = static_cast<size_t>(in.handle);
    if (in.kind == OpKind::Wait) {
      for (int q : reduced_by_[h])
        if (held_[static_cast<size_t>(q)]) {
          held_[static_cast<size_t>(q)] = false;
          bytes -= full_bytes(q);
        }
      if (!reduced_by_[h].empty()) bytes -= wire_by_[h];
    } else if (!reduced_by_[h].empty()) {
      bytes += wire_by_[h];  // the reduction's launch
    }
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
  int64_t in_use = resident_bytes(p, state_bytes);
  GradientBuffers gradients(p);
  StateCopies states(p);
  for (const Run& run : runs_of(p)) {
    Effect e = effect_of(p, p.instrs[run.instr], cost);
    e.change += gradients.change(p.instrs[run.instr]) + states.change(p.instrs[run.instr]);
    int64_t high = std::max({in_use, in_use + e.transient, in_use + e.change});
    around[run.instr] = std::max(around[run.instr], high);
    in_use += e.change;
  }
  return around;
}

}  // namespace loom::memory
