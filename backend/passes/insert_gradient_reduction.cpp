#include "backend/passes/insert_gradient_reduction.h"

#include <vector>

namespace loom::passes {

using ir::collective;
using ir::Instr;
using ir::OpKind;
using ir::wait_for;

namespace {
constexpr ir::MicroBatches Last = ir::MicroBatches::Last, AllButLast = ir::MicroBatches::AllButLast;

Instr select_drop(int q, const ir::Sharding& s, ir::MicroBatches runs_in) {
  Instr drop;
  drop.group = {ir::Role::Grads, s.grads / s.params};
  drop.kind = OpKind::SelectDrop;
  drop.phase = ir::Phase::Backward;
  drop.params = {q};
  drop.runs_in = runs_in;
  return drop;
}

// The reductions of parameter q's complete gradient (lins.txt §IV-C), appended to `out`; the waits
// (and select & drops) the optimizer step needs first go to `pending`. s_g = 1: one all-reduce
// over every replica. Otherwise a reduce-scatter to the s_p shard owners; accumulating, every
// micro-batch but the last sums over the s_g / s_p gradient peers and keeps its 1/s_g; the last
// sums over the dp / s_p replicas.
void reduce_gradient(ir::Program& p, int q, std::vector<Instr>& out, std::vector<Instr>& pending) {
  const ir::Sharding& s = p.sharding;
  int64_t bytes = ir::param_bytes(p, q);
  if (s.grads == 1) {
    Instr ar = collective(p, OpKind::AllReduce, ir::Phase::Backward, q, {ir::Role::Dp, s.dp}, bytes);
    ar.runs_in = Last;
    pending.push_back(wait_for(ar.handle, ir::Phase::Backward, Last));
    out.push_back(std::move(ar));
    return;
  }
  int64_t shard_bytes = bytes / s.params;
  if (s.params > 1) {
    Instr rs = collective(p, OpKind::ReduceScatter, ir::Phase::Backward, q, {ir::Role::Params, s.params}, bytes);
    int handle = rs.handle;
    out.push_back(std::move(rs));
    out.push_back(wait_for(handle, ir::Phase::Backward));
  }
  // Accumulating, select & drop needs only the s_g / s_p gradient peers' sum.
  if (s.grads > s.params && p.micro_batches > 1) {
    Instr ar = collective(p, OpKind::AllReduce, ir::Phase::Backward, q, {ir::Role::Grads, s.grads / s.params}, shard_bytes);
    ar.runs_in = AllButLast;
    int handle = ar.handle;
    out.push_back(std::move(ar));
    out.push_back(wait_for(handle, ir::Phase::Backward, AllButLast));
    out.push_back(select_drop(q, s, AllButLast));
  }
  if (s.dp / s.params > 1) {
    Instr ar = collective(p, OpKind::AllReduce, ir::Phase::Backward, q, {ir::Role::Replicas, s.dp / s.params}, shard_bytes);
    ar.runs_in = Last;
    pending.push_back(wait_for(ar.handle, ir::Phase::Backward, Last));
    out.push_back(std::move(ar));
  }
  if (s.grads > s.params) pending.push_back(select_drop(q, s, Last));
}

}  // namespace

bool insert_gradient_reduction(ir::Program& p, const PassInputs&) {
  const ir::Sharding& s = p.sharding;
  p.reductions_placed = true;  // one rank has nothing to reduce
  if (s.dp <= 1) return false;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> last_backward_use(p.params.size(), kNone);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Compute && p.instrs[i].phase == ir::Phase::Backward)
      for (int q : p.instrs[i].params) last_backward_use[q] = i;
  // A parameter the rank updates whose gradient no op of its computes (an embedding on a later
  // pipeline stage) is reduced, as zeros, after the last backward compute.
  size_t last_backward_compute = ir::last_backward_compute(p);
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::OptimizerStep && last_backward_compute < p.instrs.size())
      for (int q : in.params)
        if (last_backward_use[q] == kNone) last_backward_use[q] = last_backward_compute;
  // Per instruction, the gradients it completes, in parameter order.
  std::vector<std::vector<int>> completed_at(p.instrs.size());
  for (size_t q = 0; q < p.params.size(); ++q)
    if (last_backward_use[q] != kNone) completed_at[last_backward_use[q]].push_back(static_cast<int>(q));
  std::vector<Instr> out;
  out.reserve(p.instrs.size() + 4 * p.params.size());
  std::vector<Instr> pending;  // waits (and select & drops) to run before the optimizer step
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (p.instrs[i].phase == ir::Phase::Step) {  // the step's tail (norm, update) needs every reduction done
      for (auto& w : pending) out.push_back(std::move(w));
      pending.clear();
    }
    bool backward_compute = p.instrs[i].kind == OpKind::Compute && p.instrs[i].phase == ir::Phase::Backward;
    out.push_back(std::move(p.instrs[i]));
    // After a backward compute op, launch the reductions of the gradients it completed.
    if (!backward_compute) continue;
    for (int q : completed_at[i]) reduce_gradient(p, q, out, pending);
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
