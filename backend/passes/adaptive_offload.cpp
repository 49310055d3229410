#include "backend/passes/adaptive_offload.h"

#include <algorithm>

#include "backend/sim/memory_walk.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;
using ir::Phase;

struct Fragment {
  int param = 0;
  int64_t bytes = 0;  // B_os: the states of its 1/s_os slice
  int handle = -1;    // its offload's
};

// The fragments of the parameters this rank's optimizer step updates, in its order.
std::vector<Fragment> fragments_of(const ir::Program& p, const StateBytes& state_bytes) {
  std::vector<Fragment> found;
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::OptimizerStep)
      for (int q : in.params) found.push_back({q, ir::optimizer_slice_elements(p, q) * static_cast<int64_t>(state_bytes.optim)});
  return found;
}

Instr state_copy(ir::Program& p, OpKind kind, const Fragment& f, Phase phase, ir::MicroBatches runs_in) {
  Instr in;
  in.kind = kind;
  in.phase = phase;
  in.params = {f.param};
  in.bytes = f.bytes;
  in.handle = p.new_handle();
  in.runs_in = runs_in;
  return in;
}

size_t first_of_phase(const ir::Program& p, Phase phase) {
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == phase) return i;
  return p.instrs.size();
}

size_t end_of_phase(const ir::Program& p, Phase phase) {
  size_t end = first_of_phase(p, phase);
  while (end < p.instrs.size() && p.instrs[end].phase == phase) ++end;
  return end;
}

// The executor runs a backward op's releases and reduction launches inside the op (its
// gradient hooks), so no copy or wait can run between them: whether instruction i is one.
bool inside_backward_op(const ir::Program& p, size_t i) {
  const Instr& in = p.instrs[i];
  if (in.phase != Phase::Backward) return false;
  bool launch = in.handle >= 0 && (in.kind == OpKind::ReduceScatter || in.kind == OpKind::AllReduce || in.kind == OpKind::Compress);
  return in.kind == OpKind::Release || launch;
}
// Where to place something needed before instruction i: before the op that i runs inside of.
size_t before_op_of(const ir::Program& p, size_t i) {
  size_t at = i;
  while (at > 0 && inside_backward_op(p, at)) --at;
  return at < i && p.instrs[at].kind == OpKind::Compute ? at : i;
}
// Where to place something from instruction i on: after the op that i runs inside of.
size_t after_op_of(const ir::Program& p, size_t i) {
  if (i == 0 || !inside_backward_op(p, i) || before_op_of(p, i) == i) return i;
  while (i < p.instrs.size() && inside_backward_op(p, i)) ++i;
  return i;
}

// Algorithm 2, forward: the offloads at the start, each wait before the first instruction whose
// memory, less what was freed before it, is above the limit.
void offload_in_forward(ir::Program& p, std::vector<Fragment>& offloaded, const std::vector<int64_t>& around, int64_t limit) {
  std::vector<Instr> out;
  for (Fragment& f : offloaded) {
    out.push_back(state_copy(p, OpKind::OffloadStates, f, Phase::Forward, ir::MicroBatches::First));
    f.handle = out.back().handle;
  }
  // Where each wait goes (before that instruction); left over only where rounding kept one from
  // the loop: every copy is waited regardless, at the end of the backward.
  size_t last_body = first_of_phase(p, Phase::Step);
  std::vector<size_t> wait_at;
  int64_t freed = 0;  // M^-
  for (size_t i = 0; i < last_body && wait_at.size() < offloaded.size(); ++i)
    while (wait_at.size() < offloaded.size() && around[i] - freed > limit) {
      wait_at.push_back(before_op_of(p, i));
      freed += offloaded[wait_at.size() - 1].bytes;
    }
  while (wait_at.size() < offloaded.size()) wait_at.push_back(last_body);
  size_t next = 0;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    for (; next < wait_at.size() && wait_at[next] == i; ++next)
      out.push_back(ir::wait_for(offloaded[next].handle, i < last_body ? p.instrs[i].phase : Phase::Backward, ir::MicroBatches::First));
    out.push_back(p.instrs[i]);
  }
  p.instrs = std::move(out);
}

// Where the offload of `f` was waited: its reload comes after.
size_t waited_at(const ir::Program& p, const Fragment& f) {
  return ir::find_instruction(p, OpKind::Wait, f.handle);
}

// §4.4: each reload at the earliest backward instruction from which the memory, with the
// fragment back, stays within the limit to the end of the step; its wait ends the backward.
void reload_in_backward(ir::Program& p, const std::vector<Fragment>& offloaded, const MemoryPlanning& m) {
  std::vector<int> reload_handles;
  for (const Fragment& f : offloaded) {
    std::vector<int64_t> around = memory::memory_around_each(p, m.state_bytes, m.cost.get());
    size_t begin = std::max(first_of_phase(p, Phase::Backward), waited_at(p, f) + 1), end = end_of_phase(p, Phase::Backward);
    size_t at = end;
    int64_t highest_after = 0;  // the most memory from instruction i to the end of the step
    for (size_t i = p.instrs.size(); i-- > begin;) {
      highest_after = std::max(highest_after, around[i]);
      if (i < end && highest_after + f.bytes <= m.limit) at = i;
    }
    at = std::min(after_op_of(p, at), end);
    Instr reload = state_copy(p, OpKind::ReloadStates, f, Phase::Backward, ir::MicroBatches::Last);
    reload_handles.push_back(reload.handle);
    p.instrs.insert(p.instrs.begin() + static_cast<long>(at), reload);
  }
  size_t end = end_of_phase(p, Phase::Backward);
  std::vector<Instr> waits;
  for (int h : reload_handles) waits.push_back(ir::wait_for(h, Phase::Backward, ir::MicroBatches::Last));
  p.instrs.insert(p.instrs.begin() + static_cast<long>(end), waits.begin(), waits.end());
}

}  // namespace

bool offload_is_adaptive(const PassInputs& inputs) { return inputs.offload && inputs.offload_automatic && inputs.memory.limit > 0; }

bool adaptive_offload(ir::Program& p, const PassInputs& inputs) {
  if (!offload_is_adaptive(inputs) || p.sharding.optim <= 1) return false;
  const MemoryPlanning& m = inputs.memory;
  std::vector<int64_t> around = memory::memory_around_each(p, m.state_bytes, m.cost.get());
  int64_t peak = around.empty() ? 0 : *std::max_element(around.begin(), around.end());
  std::vector<Fragment> offloaded;
  int64_t freed = 0;
  for (const Fragment& f : fragments_of(p, m.state_bytes))
    if (peak - freed > m.limit) {
      offloaded.push_back(f);
      freed += f.bytes;
    }
  if (offloaded.empty()) return false;
  offload_in_forward(p, offloaded, around, m.limit);
  reload_in_backward(p, offloaded, m);
  return true;
}

}  // namespace loom::passes
