// The sharded executor's gradient reductions (sharded_executor_state.h): each gradient from
// autograd's hook into its padded flat buffer, reduced to its shard owners in the program's order
// (or by TAGC), summed over the replicas where the program waits for the sum, and kept as the
// optimizer slice lins.txt §IV-C gives this rank.
#include "backend/exec/sharded_executor_state.h"

#include <algorithm>

#include "backend/instrument/gradient_hooks.h"
#include "backend/instrument/unpack_timer.h"
#include "backend/storage_release.h"
#include "lang/diagnostics.h"

namespace loom {

void ShardedExecutor::State::on_grad(size_t p, const torch::Tensor& grad) {
  instrument::gradient_hook_begins();
  Param& q = params[p];
  if (q.grad_ready)
    throw InternalError("sharded executor: parameter " + program.params[p].name + " received gradient " +
                        std::to_string(q.arrived + 1) + " of a backward whose program hands it " +
                        std::to_string(q.deliveries));
  add_gradient(p, grad);
  if (++q.arrived < q.deliveries) return;  // a recomputation still hands it more
  complete_gradient(p);
  stored_by_autograd.push_back(p);
  if (q.backward_release < program.instrs.size() && runs_now(program.instrs[q.backward_release])) release(p);
  complete_uncomputed();
  launch_reductions();
}

void ShardedExecutor::State::complete_uncomputed(bool backward_over) {
  if (uncomputed.empty() || (!backward_over && (last_computed.empty() || !ready(last_computed)))) return;
  for (size_t q : uncomputed) complete_gradient(q);
}

void ShardedExecutor::State::autograd_returned() {
  drop_autograd_gradients();
  complete_uncomputed(/*backward_over=*/true);
  launch_reductions();
}

void ShardedExecutor::State::drop_autograd_gradients() {
  for (size_t p : stored_by_autograd) params[p].full.mutable_grad() = torch::Tensor();
  stored_by_autograd.clear();
}

void ShardedExecutor::State::add_gradient(size_t p, const torch::Tensor& grad) {
  Param& q = params[p];
  torch::NoGradGuard no_grad;
  if (!q.grad_flat.defined()) q.grad_flat = torch::zeros({q.padded}, q.shard.options());
  if (grad.defined()) q.grad_flat.narrow(0, 0, q.numel).add_(grad.reshape({-1}));
}

void ShardedExecutor::State::complete_gradient(size_t p) {
  if (params[p].grad_ready) return;
  add_gradient(p, torch::Tensor());
  params[p].grad_ready = true;
}

bool ShardedExecutor::State::ready(const std::vector<size_t>& unit) const {
  return std::all_of(unit.begin(), unit.end(), [&](size_t p) { return params[p].grad_ready; });
}

void ShardedExecutor::State::launch_reductions() {
  while (next_reduce < reduce_units.size() && ready(reduce_units[next_reduce])) {
    Reduction r;
    r.unit = next_reduce;
    r.members = reduce_units[next_reduce++];
    for (size_t p : r.members) params[p].reduce_launched = true;
    Param& first = params[r.members[0]];
    if (first.tagc) {
      launch_compressed(first, r);  // a unit of its own, compressed from grad_flat
      in_flight.push_back(std::move(r));
      continue;
    }
    std::vector<torch::Tensor> blocks;
    for (size_t p : r.members) {
      Param& q = params[p];
      q.grad_wire = q.grad_flat.to(reduce_dtype);  // the same tensor when the dtypes agree
      blocks.push_back(q.grad_wire.view({s_p, q.chunk}));
    }
    if (unreduced.count(r.members[0])) {
      first.grad_shard = first.grad_wire.narrow(0, shard_index * first.chunk, first.chunk).clone();  // a test-only fault
    } else if (groups.params) {
      // Rank r's part of the input is every member's chunk r, in member order.
      r.wire = blocks.size() == 1 ? first.grad_wire : torch::cat(blocks, 1).reshape({-1});
      r.out = torch::empty({r.wire.numel() / s_p}, r.wire.options());
      r.work = comm::reduce_scatter(*groups.params, r.wire, r.out);
    } else {
      // s_p = 1: the shard is the whole parameter, and no collective runs here: it stays fp32 (a
      // replica sum casts to the reduce dtype as it launches), so accumulating micro-batches does
      // not round each one's gradient to the wire's dtype first.
      for (size_t p : r.members) params[p].grad_shard = params[p].grad_flat;
    }
    in_flight.push_back(std::move(r));
  }
}

void ShardedExecutor::State::complete_reductions(size_t last) {
  while (!in_flight.empty() && in_flight.front().unit <= last) {
    Reduction r = std::move(in_flight.front());
    in_flight.pop_front();
    r.work.wait();
    // The wire (the full gradient, or its members' concatenated copy) is done with; gloo's worker
    // may still hold it (comm::reduce_scatter), so free its bytes here, where the program does.
    if (r.wire.defined()) free_storage(r.wire);
    if (params[r.members[0]].tagc) finish_compressed(params[r.members[0]], r.out);
    int64_t offset = 0;
    for (size_t p : r.members) {
      Param& q = params[p];
      if (r.out.defined() && !q.tagc) q.grad_shard = r.out.narrow(0, offset, q.chunk);
      offset += q.chunk;
      q.grad_shard = q.grad_shard.to(q.shard.scalar_type());
      q.grad_flat = q.grad_wire = torch::Tensor();
      q.full.mutable_grad() = torch::Tensor();  // the full gradient was only the reduction's input
    }
    keep_gradients(r.unit, r.members, !unreduced.count(r.members[0]));
  }
}

void ShardedExecutor::State::launch_compressed(Param& q, Reduction& r) {
  torch::NoGradGuard no_grad;
  const tagc::Config& c = *q.tagc;
  torch::Tensor g = q.grad_flat.to(torch::kFloat);
  if (q.residual.defined()) g = g + q.residual;
  tagc::Sparsified s = tagc::sparsify(g, c.sparsity);
  q.residual = s.dropped;
  q.threshold = s.threshold;
  torch::Tensor index = tagc::pack_index(s.kept.ne(0));
  comm::all_reduce(*groups.params, index, {comm::ReduceOp::BitwiseOr}).wait();
  q.shard_index_set = tagc::unpack_index(index, q.padded).narrow(0, shard_index * q.chunk, q.chunk);
  // A shard holds at most every rank's kept values.
  int64_t m = tagc::sketch_length(q.chunk, c.ratio, s_p * tagc::kept_count(q.padded, c.sparsity));
  std::vector<torch::Tensor> sketches;
  for (int d = 0; d < s_p; ++d) sketches.push_back(tagc::sketch(s.kept.narrow(0, d * q.chunk, q.chunk), m));
  r.wire = torch::cat(sketches).to(reduce_dtype);
  r.out = torch::empty({m}, r.wire.options());
  r.work = comm::reduce_scatter(*groups.params, r.wire, r.out);
}

void ShardedExecutor::State::finish_compressed(Param& q, const torch::Tensor& summed) {
  torch::NoGradGuard no_grad;
  tagc::Decoded d = tagc::peel(summed.to(torch::kFloat), q.shard_index_set);
  q.grad_shard = d.values;
  q.shard_index_set = torch::Tensor();
  torch::Tensor stats = torch::tensor({q.threshold, static_cast<double>(d.estimated)}, torch::dtype(torch::kDouble)).to(q.shard.device());
  comm::all_reduce(*groups.params, stats).wait();
  if (groups.replicas) comm::all_reduce(*groups.replicas, stats).wait();
  stats = stats.cpu();
  q.bound = stats[0].item<double>() / groups.factors.dp;
  q.estimated = static_cast<int64_t>(stats[1].item<double>());
}

ShardedExecutor::State::Sum ShardedExecutor::State::launch_sum(comm::Group& group, std::vector<size_t> members, std::vector<torch::Tensor> tensors) {
  Sum sum{std::move(members), std::move(tensors), {}, {}};
  sum.wire = sum.tensors.size() == 1 ? sum.tensors[0] : torch::cat(sum.tensors);
  if (sum.wire.scalar_type() != reduce_dtype) sum.wire = sum.wire.to(reduce_dtype);
  sum.work = comm::all_reduce(group, sum.wire);
  return sum;
}

void ShardedExecutor::State::land_sum(Sum& sum) {
  sum.work.wait();
  copy_back(sum);
}

void ShardedExecutor::State::copy_back(Sum& sum) {
  torch::NoGradGuard no_grad;
  if (sum.tensors.size() == 1 && sum.wire.is_same(sum.tensors[0])) return;
  int64_t offset = 0;
  for (const torch::Tensor& t : sum.tensors) {
    t.copy_(sum.wire.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

void ShardedExecutor::State::all_reduce_together(comm::Group& group, const std::vector<torch::Tensor>& tensors) {
  Sum sum = launch_sum(group, {}, tensors);
  land_sum(sum);
}

void ShardedExecutor::State::keep_gradients(size_t unit, const std::vector<size_t>& members, bool reduce) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> shards;
  for (size_t p : members) shards.push_back(params[p].grad_shard);
  if (!last_micro_batch) {
    // Select & drop when s_g > s_p: all-reduce among the s_g / s_p peers first.
    if (m_g > 1 && reduce) all_reduce_together(*groups.grad_peers, shards);
    for (size_t p : members) {
      Param& q = params[p];
      // s_g = s_p: the whole parameter shard's gradient accumulates; else this rank's 1/s_g.
      int64_t part = q.chunk / m_g;
      torch::Tensor mine = m_g == 1 ? q.grad_shard : q.grad_shard.narrow(0, groups.grad_slot * part, part);
      if (q.grad_kept.defined()) q.grad_kept.add_(mine);
      else q.grad_kept = m_g == 1 ? mine : mine.clone();
      q.grad_shard = torch::Tensor();
    }
    return;
  }
  // The last micro-batch: add what this rank kept (each kept part is counted once, by its
  // keeper), all-reduce over the dp / s_p replicas, keep the optimizer slice.
  for (size_t p : members) {
    Param& q = params[p];
    int64_t part = q.chunk / m_g;
    if (q.grad_kept.defined()) q.grad_shard.narrow(0, groups.grad_slot * part, part).add_(q.grad_kept);
    q.grad_kept = torch::Tensor();
  }
  if (groups.replicas && reduce) {
    Sum sum = launch_sum(*groups.replicas, members, std::move(shards));
    if (int handle = replica_sum_handle[unit]; handle >= 0) {
      replica_sums.emplace(handle, std::move(sum));  // kept at the IR's wait for it
      return;
    }
    land_sum(sum);
  }
  keep_slices(members);
}

void ShardedExecutor::State::keep_slices(const std::vector<size_t>& members) {
  torch::NoGradGuard no_grad;
  for (size_t p : members) {
    Param& q = params[p];
    int64_t slice = q.slice.numel();
    if (slice == q.grad_shard.numel()) q.slice_grad = std::move(q.grad_shard);
    else q.slice_grad = q.grad_shard.narrow(0, groups.optim_slot * slice, slice).clone();
    q.grad_shard = torch::Tensor();
  }
}

void ShardedExecutor::State::finish_replica_sum(int handle, bool at_wait) {
  auto it = replica_sums.find(handle);
  Sum& sum = it->second;
  sum.work.wait();
  {
    std::optional<instrument::UnpackTimer> unpacking;
    if (at_wait) unpacking.emplace(unpacked_bytes(sum));
    copy_back(sum);
    keep_slices(sum.members);
  }
  replica_sums.erase(it);
}

int64_t ShardedExecutor::State::unpacked_bytes(const Sum& sum) const {
  int64_t bytes = 0;
  for (size_t p : sum.members) {
    const Param& q = params[p];
    int64_t element = q.shard.element_size();
    if (sum.members.size() > 1) bytes += q.chunk * element;
    if (q.slice.numel() < q.chunk) bytes += q.slice.numel() * element;
  }
  return bytes;
}

void ShardedExecutor::State::plan_reductions() {
  reduce_units.clear();
  completes_unit_at.clear();
  std::unordered_set<int> reduced;
  std::unordered_map<int, size_t> unit_of_handle;  // a reduce-scatter's (or compress's) handle -> its unit
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.phase != ir::Phase::Backward) continue;
    if (in.kind == ir::OpKind::Wait && unit_of_handle.count(in.handle)) completes_unit_at[i] = unit_of_handle[in.handle];
    bool scattered = in.kind == ir::OpKind::ReduceScatter || in.kind == ir::OpKind::Compress;
    if (!scattered && in.kind != ir::OpKind::AllReduce) continue;
    size_t first_new = reduce_units.size();
    std::vector<size_t> unit;
    for (int p : in.params) {
      if (!reduced.insert(p).second) continue;
      if (unreduced.count(p) || params[p].tagc) reduce_units.push_back({static_cast<size_t>(p)});
      else unit.push_back(p);
    }
    if (!unit.empty()) reduce_units.push_back(unit);
    if (reduce_units.size() == first_new) continue;  // a later collective of gradients already reduced
    // A reduce-scatter's units complete at its wait; an all-reduce's (s_p = 1) where it stands.
    if (scattered) unit_of_handle[in.handle] = reduce_units.size() - 1;
    else completes_unit_at.emplace(i, reduce_units.size() - 1);
  }
  if (reduced.size() != params.size())
    throw InternalError("sharded executor: the step reduces " + std::to_string(reduced.size()) + " of " +
                        std::to_string(params.size()) + " gradients");
  plan_replica_sums();
}

void ShardedExecutor::State::plan_replica_sums() {
  replica_sum_handle.assign(reduce_units.size(), -1);
  std::map<std::vector<int>, int> sum_of;  // the parameters of a replicas' all-reduce -> its handle
  std::unordered_set<int> waited;
  for (size_t i : backward_instrs) {
    const ir::Instr& in = program.instrs[i];
    if (in.kind == ir::OpKind::Wait) waited.insert(in.handle);
    if (!ir::sums_over_replicas(in)) continue;
    std::vector<int> members = in.params;
    std::sort(members.begin(), members.end());
    sum_of.emplace(members, in.handle);
  }
  for (size_t u = 0; u < reduce_units.size(); ++u) {
    std::vector<int> members(reduce_units[u].begin(), reduce_units[u].end());
    std::sort(members.begin(), members.end());
    auto it = sum_of.find(members);
    if (it == sum_of.end()) continue;
    if (waited.count(it->second)) replica_sum_handle[u] = it->second;
    sum_of.erase(it);
  }
  for (const auto& [members, handle] : sum_of) {
    bool faulted = std::any_of(members.begin(), members.end(), [&](int p) { return unreduced.count(static_cast<size_t>(p)) > 0; });
    if (faulted) continue;
    std::string names;
    for (int p : members) names += (names.empty() ? "" : ", ") + program.params[static_cast<size_t>(p)].name;
    throw InternalError("sharded executor: the program sums " + names +
                        " over the replicas as one, but reduces them apart: its replica sums must follow its reductions");
  }
}

}  // namespace loom
