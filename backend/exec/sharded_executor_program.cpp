// The sharded executor follows its step program (sharded_executor_state.h): forward and backward
// instructions up to each module's compute, gathers launched and waited where the program puts
// them, releases, and adaptive offloading's state copies.
#include "backend/exec/sharded_executor_state.h"

#include <algorithm>

#include "backend/instrument/unpack_timer.h"
#include "backend/storage_release.h"
#include "lang/diagnostics.h"

namespace loom {

void ShardedExecutor::State::follow_program() {
  forward_instrs.clear();
  backward_instrs.clear();
  gathers_by_handle.clear();
  copy_handles.clear();
  completed_by.clear();
  std::vector<int> deliveries = ir::gradient_deliveries(program);
  for (size_t i = 0; i < params.size(); ++i) params[i].deliveries = deliveries[i];
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.phase == ir::Phase::Forward) forward_instrs.push_back(i);
    if (in.phase == ir::Phase::Backward) backward_instrs.push_back(i);
    if (in.kind == ir::OpKind::AllGather) gathers_by_handle[in.handle] = in.params;
    if (in.kind == ir::OpKind::OffloadStates || in.kind == ir::OpKind::ReloadStates) copy_handles.insert(in.handle);
  }
  plan_reductions();
  // A parameter's gradient is complete after its last backward compute.
  std::unordered_map<int, size_t> last_backward_use;
  for (size_t i : backward_instrs)
    if (program.instrs[i].kind == ir::OpKind::Compute)
      for (int p : program.instrs[i].params) last_backward_use[p] = i;
  for (auto& [p, i] : last_backward_use) {
    completed_by[i].push_back(static_cast<size_t>(p));
    params[static_cast<size_t>(p)].backward_release = backward_release_after(i, p);
  }
  for (auto& [i, ps] : completed_by) std::sort(ps.begin(), ps.end());
  uncomputed.clear();
  last_computed.clear();
  for (size_t p = 0; p < params.size(); ++p)
    if (!last_backward_use.count(static_cast<int>(p))) uncomputed.push_back(p);
  size_t last = ir::last_backward_compute(program);
  if (last < program.instrs.size()) last_computed = as_indices(program.instrs[last].params);
}

size_t ShardedExecutor::State::backward_release_after(size_t compute, int p) const {
  for (size_t i = compute + 1; i < program.instrs.size() && program.instrs[i].phase == ir::Phase::Backward; ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.kind == ir::OpKind::Release && std::find(in.params.begin(), in.params.end(), p) != in.params.end()) return i;
  }
  return static_cast<size_t>(-1);
}

bool ShardedExecutor::State::kept_into_next_micro_batch(size_t p) const {
  size_t r = params[p].backward_release;
  return r < program.instrs.size() && program.instrs[r].runs_in == ir::MicroBatches::Last;
}

void ShardedExecutor::State::launch_gather(const std::vector<size_t>& wanted) {
  auto g = std::make_shared<Gather>();
  std::vector<torch::Tensor> shards;
  for (size_t p : wanted) {
    Param& q = params[p];
    if (q.resident || q.gathering) continue;
    g->members.push_back(p);
    g->offsets.push_back(g->length);
    g->length += q.chunk;
    shards.push_back(q.shard);
  }
  if (g->members.empty()) return;
  g->send = shards.size() == 1 ? shards[0] : torch::cat(shards);
  // One member whose shards tile it exactly is gathered into its own storage: no second
  // full-size buffer and no copy.
  Param& first = params[g->members[0]];
  g->direct = g->members.size() == 1 && first.padded == first.numel && !released_early.count(g->members[0]);
  if (g->direct) {
    refill_storage(first.full);
    g->buffer = first.full.data().view({-1});
  } else {
    g->buffer = torch::empty({g->length * s_p}, g->send.options());
  }
  g->work = comm::all_gather(*groups.params, g->send, g->buffer);
  for (size_t p : g->members) {
    params[p].gathering = true;
    params[p].gather = g;
  }
}

void ShardedExecutor::State::finish_gather(size_t p, bool at_wait) {
  Param& q = params[p];
  if (q.resident) return;
  if (!q.gathering) launch_gather({p});
  Gather& g = *q.gather;
  if (!g.done) {
    g.work.wait();
    g.done = true;
  }
  size_t k = std::find(g.members.begin(), g.members.end(), p) - g.members.begin();
  torch::NoGradGuard no_grad;
  if (!g.direct) {  // a direct gather wrote the parameter's own storage already
    std::optional<instrument::UnpackTimer> unpacking;
    if (at_wait) unpacking.emplace(q.numel * q.full.element_size());  // passes/mark_unpacks.h
    refill_storage(q.full);
    if (in_backward && released_early.count(p)) q.full.data().zero_();  // a test-only fault
    else unpack_member(g, k, q);
  }
  q.gather.reset();
  q.gathering = false;
  q.resident = true;
}

void ShardedExecutor::State::unpack_member(const Gather& g, size_t k, Param& q) {
  torch::Tensor shards = g.buffer.view({s_p, g.length}).narrow(1, g.offsets[k], q.chunk);
  torch::Tensor full = q.full.data().view({-1});
  int64_t whole_rows = q.numel / q.chunk, rest = q.numel - whole_rows * q.chunk;  // the padding lies in the last shard
  if (whole_rows > 0) full.narrow(0, 0, whole_rows * q.chunk).view({whole_rows, q.chunk}).copy_(shards.narrow(0, 0, whole_rows));
  if (rest > 0) full.narrow(0, whole_rows * q.chunk, rest).copy_(shards[whole_rows].narrow(0, 0, rest));
}

void ShardedExecutor::State::release(size_t p) {
  Param& q = params[p];
  if (!q.resident || s_p == 1) return;  // replicated parameters (ZeRO-1/2) stay resident
  free_storage(q.full);
  q.resident = false;
}

void ShardedExecutor::State::run_forward_until(const std::string& module) {
  if (!module.empty() && find_compute(forward_instrs, cursor, module) == forward_instrs.size())
    throw InternalError("sharded executor: module `" + module +
                        "` ran where the traced step does not expect it (out of the traced order)");
  while (cursor < forward_instrs.size()) {
    const ir::Instr& in = program.instrs[forward_instrs[cursor++]];
    switch (in.kind) {
      case ir::OpKind::AllGather:
        if (runs_now(in)) launch_gather(as_indices(in.params));
        break;
      case ir::OpKind::Wait:
        wait_for(in);
        break;
      case ir::OpKind::OffloadStates:
      case ir::OpKind::ReloadStates:
        copy_states(in);
        break;
      case ir::OpKind::Release:
        if (runs_now(in))
          for (int p : in.params) release(p);
        break;
      case ir::OpKind::Compute:
        if (in.module == module) return;
        break;
      default: break;
    }
  }
}

void ShardedExecutor::State::run_backward_until(const std::string& module) {
  drop_autograd_gradients();
  size_t target = find_compute(backward_instrs, backward_cursor, module);
  if (target < backward_instrs.size()) run_backward_through(target);
}

void ShardedExecutor::State::run_backward_to_recompute(const std::string& module) {
  for (size_t i = backward_cursor; i < backward_instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[backward_instrs[i]];
    if (in.kind == ir::OpKind::Compute) return;
    if (in.kind == ir::OpKind::Recompute && ir::within(module, in.module)) {
      run_backward_through(i);
      return;
    }
  }
}

size_t ShardedExecutor::State::find_compute(const std::vector<size_t>& instrs, size_t from, const std::string& module) const {
  for (; from < instrs.size(); ++from) {
    const ir::Instr& in = program.instrs[instrs[from]];
    if (in.kind == ir::OpKind::Compute && in.module == module) break;
  }
  return from;
}

void ShardedExecutor::State::run_backward_through(size_t last) {
  for (; backward_cursor <= last && backward_cursor < backward_instrs.size(); ++backward_cursor) {
    size_t index = backward_instrs[backward_cursor];
    const ir::Instr& in = program.instrs[index];
    if (auto unit = completes_unit_at.find(index); unit != completes_unit_at.end()) {
      complete_reductions(unit->second);  // where the program completes this reduction
    } else if (in.kind == ir::OpKind::AllGather) {
      if (runs_now(in)) launch_gather(as_indices(in.params));
    } else if (in.kind == ir::OpKind::Wait) {
      wait_for(in);
    } else if (in.kind == ir::OpKind::OffloadStates || in.kind == ir::OpKind::ReloadStates) {
      copy_states(in);
    } else if (in.kind == ir::OpKind::Release) {
      if (runs_now(in))
        for (int p : in.params) release(p);
    } else if (in.kind == ir::OpKind::Compute && backward_cursor < last) {
      auto it = completed_by.find(index);
      if (it == completed_by.end()) continue;
      // A compute passed over (an expert no token chose): its parameters' gradients are zeros.
      for (size_t p : it->second) complete_gradient(p);
      complete_uncomputed();
      launch_reductions();
    }
  }
}

void ShardedExecutor::State::wait_for(const ir::Instr& wait) {
  if (replica_sums.count(wait.handle)) {  // handles are unique: no gather or copy has it
    finish_replica_sum(wait.handle, /*at_wait=*/true);
    return;
  }
  if (copy_handles.count(wait.handle)) {
    if (runs_now(wait)) attached_copier().wait(wait.handle);
    return;
  }
  auto it = gathers_by_handle.find(wait.handle);
  if (it == gathers_by_handle.end() || !runs_now(wait)) return;
  for (int p : it->second) finish_gather(p, /*at_wait=*/true);
}

bool ShardedExecutor::State::runs_now(const ir::Instr& in) const {
  return ir::runs_in_micro_batch(in.runs_in, micro_batch, micro_batches);
}

void ShardedExecutor::State::copy_states(const ir::Instr& in) {
  if (!runs_now(in)) return;
  if (in.kind == ir::OpKind::OffloadStates) attached_copier().offload(in.handle, in.params);
  else attached_copier().reload(in.handle, in.params);
}

StateCopier& ShardedExecutor::State::attached_copier() {
  if (!copier) throw InternalError("sharded executor: the program moves optimizer states, but no state copier is attached");
  return *copier;
}

}  // namespace loom
