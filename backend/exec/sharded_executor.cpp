#include "backend/exec/sharded_executor.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <unordered_set>

#include "backend/exec/sharded_grad_clip.h"
#include "backend/exec/state_copier.h"
#include "backend/exec/storage_release.h"
#include "backend/instrument/gradient_hooks.h"
#include "backend/instrument/unpack_timer.h"
#include "lang/diagnostics.h"
#include "models/zoo_torch.h"

namespace loom {

struct ShardedExecutor::State {
  // One all-gather in flight: of one parameter, or of a bucket's members as one collective.
  struct Gather {
    std::vector<size_t> members;
    std::vector<int64_t> offsets;  // of each member's shard in the concatenated send buffer
    int64_t length = 0;            // the concatenated shards' length
    torch::Tensor send, buffer;    // buffer: s_p blocks of `length`, in rank order
    bool direct = false;           // one unpadded member gathered straight into its own storage
    comm::Work work;
    bool done = false;
  };
  // One gradient reduction in flight: of one parameter, or of a bucket's members as one.
  struct Reduction {
    size_t unit = 0;  // its index in reduce_units
    std::vector<size_t> members;
    torch::Tensor wire;  // the reduce-scatter's input, alive until it completes
    torch::Tensor out;   // its output: the members' shards (or a compressed member's summed sketch), concatenated
    comm::Work work;
  };
  // Tensors summed over a group as one all-reduce, in flight until it lands back in them: a
  // unit's gradient shards over the dp / s_p replicas stay in flight until the IR's wait for
  // that all-reduce (the step's tail needs them; the rest of backward does not).
  struct Sum {
    std::vector<size_t> members;         // the parameters whose gradient shards these are
    std::vector<torch::Tensor> tensors;  // where the sum lands
    torch::Tensor wire;                  // the all-reduce's buffer (tensors concatenated, or the one)
    comm::Work work;
  };

  struct Param {
    torch::Tensor full;       // the module's parameter; storage present only while gathered
    int64_t numel = 0;
    int64_t padded = 0;       // numel padded to a multiple of s_os
    int64_t chunk = 0;        // parameter shard length: padded / s_p
    torch::Tensor shard;      // this rank's parameter shard
    torch::Tensor slice;      // its optimizer slice: a leaf view into `shard` the optimizer updates
    bool resident = false;
    bool gathering = false;
    std::shared_ptr<Gather> gather;  // while gathering
    // Gradient reduction of the current micro-batch.
    int deliveries = 1;       // the gradients autograd hands it per micro-batch (ir::gradient_deliveries)
    int arrived = 0;          // those handed so far
    bool grad_ready = false;  // all of them are in grad_flat (or the op did not run here: zeros)
    bool reduce_launched = false;
    torch::Tensor grad_flat;   // padded full gradient
    torch::Tensor grad_wire;   // it in the reduction dtype: the reduce-scatter's input
    torch::Tensor grad_shard;  // its output (1/s_p)
    // Kept across micro-batches: 1/s_g of the parameter shard (or all of it when s_g = s_p).
    torch::Tensor grad_kept;
    // After the last micro-batch: the reduced gradient of the optimizer slice (sum over dp ranks).
    torch::Tensor slice_grad;
    // compress(): TAGC's settings, error-feedback accumulator (padded, this rank's dropped
    // values), this shard's index of non-zeros during a reduction, and the last bound.
    std::optional<tagc::Config> tagc;
    torch::Tensor residual, shard_index_set;
    double threshold = 0, bound = 0;
    int64_t estimated = 0;
  };

  ir::Program program;
  ShardGroups groups;
  torch::Dtype reduce_dtype = torch::kFloat;
  nn::CallInterceptor* inner = nullptr;
  int s_p = 1, m_g = 1, m_os = 1;
  int shard_index = 0;  // which 1/s_p shard of every parameter this rank holds
  std::vector<Param> params;
  std::vector<torch::Tensor> optimized;
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> params_of;
  std::unordered_map<const torch::nn::Module*, std::string> path_of;
  std::vector<size_t> forward_instrs;  // indices of the program's forward instructions
  size_t cursor = 0;                   // next forward instruction to execute
  std::vector<size_t> backward_instrs; // indices of the program's backward instructions
  std::unordered_map<size_t, std::vector<size_t>> completed_by;  // backward compute -> parameters whose gradient it completes
  size_t backward_cursor = 0;          // next backward instruction to execute
  bool in_backward = false;            // module calls now are recomputations (checkpoint())
  bool last_micro_batch = true;        // this backward ends the step's accumulation
  int64_t micro_batch = 0, micro_batches = 1;  // which micro-batch of the step runs
  StateCopier* copier = nullptr;       // adaptive offloading's copies (attach_state_copier)
  std::unordered_set<int> copy_handles;  // the handles of the program's state copies
  std::deque<Reduction> in_flight;     // reductions launched and not yet completed, in launch order
  std::vector<size_t> stored_by_autograd;  // parameters whose complete gradient autograd stores in .grad
  std::vector<std::vector<size_t>> reduce_units;  // parameters reduced together (a bucket, or one), in reduction order
  // Where the program completes each unit (its reduce-scatter's wait; for s_p = 1 its first
  // all-reduce): backward instruction index -> unit. The window of reductions in flight is the
  // program's (window_reductions pass).
  std::unordered_map<size_t, size_t> completes_unit_at;
  // Each unit's all-reduce over the replicas (its handle; -1 where the program waits for none,
  // and the sum is waited for at once).
  std::vector<int> replica_sum_handle;
  std::map<int, Sum> replica_sums;  // in flight, by handle
  size_t next_reduce = 0;              // the next unit of reduce_units to launch
  std::map<int, std::vector<int>> gathers_by_handle;
  std::unordered_set<size_t> unreduced, released_early;  // test-only faults (inject_faults)

  // What the executor derives from its program (at construction and at replace_program,
  // between steps): the phases' instructions, the gathers and copies by handle, the reduction
  // units and where each gradient is complete.
  void follow_program() {
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
    for (auto& [p, i] : last_backward_use) completed_by[i].push_back(static_cast<size_t>(p));
    for (auto& [i, ps] : completed_by) std::sort(ps.begin(), ps.end());
  }

  // One all-gather of the given parameters' shards (those not resident or in flight already;
  // every rank skips the same ones).
  void launch_gather(const std::vector<size_t>& wanted) {
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

  // `at_wait`: the program's wait for the gather (its unpacking is timed as the wait's; a gather
  // finished at need or for a checkpoint is not the program's).
  void finish_gather(size_t p, bool at_wait = false) {
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

  // Copies member k of gather `g` out of its output into `q`'s storage, in one pass: rank r's
  // block holds every member's shard r, so the member's padded tensor is row r of its column.
  void unpack_member(const Gather& g, size_t k, Param& q) {
    torch::Tensor shards = g.buffer.view({s_p, g.length}).narrow(1, g.offsets[k], q.chunk);
    torch::Tensor full = q.full.data().view({-1});
    int64_t whole_rows = q.numel / q.chunk, rest = q.numel - whole_rows * q.chunk;  // the padding lies in the last shard
    if (whole_rows > 0) full.narrow(0, 0, whole_rows * q.chunk).view({whole_rows, q.chunk}).copy_(shards.narrow(0, 0, whole_rows));
    if (rest > 0) full.narrow(0, whole_rows * q.chunk, rest).copy_(shards[whole_rows].narrow(0, 0, rest));
  }

  void release(size_t p) {
    Param& q = params[p];
    if (!q.resident || s_p == 1) return;  // replicated parameters (ZeRO-1/2) stay resident
    free_storage(q.full);
    q.resident = false;
  }

  // Executes forward instructions up to and including the compute of `module` ("" = to the end).
  // A compute this rank skips (an expert no token was routed to) is passed over with its
  // gathers, waits and releases: the collectives follow the IR, never the data, so every rank
  // issues the same ones. Modules must run in the traced order, possibly with gaps.
  void run_forward_until(const std::string& module) {
    if (!module.empty() && find_compute(forward_instrs, cursor, module) == forward_instrs.size())
      throw InternalError("sharded executor: module `" + module +
                          "` ran where the traced step does not expect it (out of the traced order)");
    while (cursor < forward_instrs.size()) {
      const ir::Instr& in = program.instrs[forward_instrs[cursor++]];
      switch (in.kind) {
        case ir::OpKind::AllGather:
          launch_gather(as_indices(in.params));
          break;
        case ir::OpKind::Wait:
          wait_for(in);
          break;
        case ir::OpKind::OffloadStates:
        case ir::OpKind::ReloadStates:
          copy_states(in);
          break;
        case ir::OpKind::Release:
          for (int p : in.params) release(p);
          break;
        case ir::OpKind::Compute:
          if (in.module == module) return;
          break;
        default: break;
      }
    }
  }

  // Before `module`'s backward: the IR's backward gathers and waits up to its compute, so the
  // gathers of the ops that follow are in flight while this one computes (backward prefetch).
  // Reductions and releases follow the gradients themselves (on_grad). When the op is not
  // where the IR expects it, nothing is skipped past: its parameters are gathered at need,
  // which every rank does alike.
  void run_backward_until(const std::string& module) {
    drop_autograd_gradients();
    size_t target = find_compute(backward_instrs, backward_cursor, module);
    if (target < backward_instrs.size()) run_backward_through(target);
  }

  // A checkpoint() recomputation of the module holding `module` begins: the IR's backward
  // instructions up to its `recompute`, which gather what it uses. A compute on the way means
  // no recompute is due here: nothing runs, and parameters are gathered at need.
  void run_backward_to_recompute(const std::string& module) {
    for (size_t i = backward_cursor; i < backward_instrs.size(); ++i) {
      const ir::Instr& in = program.instrs[backward_instrs[i]];
      if (in.kind == ir::OpKind::Compute) return;
      if (in.kind == ir::OpKind::Recompute && ir::within(module, in.module)) {
        run_backward_through(i);
        return;
      }
    }
  }

  // The position in `instrs` (indices into the program), from `from` on, of the compute of
  // `module`; instrs.size() when there is none.
  size_t find_compute(const std::vector<size_t>& instrs, size_t from, const std::string& module) const {
    for (; from < instrs.size(); ++from) {
      const ir::Instr& in = program.instrs[instrs[from]];
      if (in.kind == ir::OpKind::Compute && in.module == module) break;
    }
    return from;
  }

  // Executes backward instructions up to and including index `last` of backward_instrs. A
  // compute passed over before `last` did not run on this rank: the gradients it would have
  // completed are zeros, reduced at this point, as a rank that ran it reduces them here.
  void run_backward_through(size_t last) {
    for (; backward_cursor <= last && backward_cursor < backward_instrs.size(); ++backward_cursor) {
      size_t index = backward_instrs[backward_cursor];
      const ir::Instr& in = program.instrs[index];
      if (auto unit = completes_unit_at.find(index); unit != completes_unit_at.end()) {
        complete_reductions(unit->second);  // where the program completes this reduction
      } else if (in.kind == ir::OpKind::AllGather) {
        launch_gather(as_indices(in.params));
      } else if (in.kind == ir::OpKind::Wait) {
        wait_for(in);
      } else if (in.kind == ir::OpKind::OffloadStates || in.kind == ir::OpKind::ReloadStates) {
        copy_states(in);
      } else if (in.kind == ir::OpKind::Compute && backward_cursor < last) {
        auto it = completed_by.find(index);
        if (it == completed_by.end()) continue;
        for (size_t p : it->second) complete_gradient(p);
        launch_reductions();
      }
    }
  }

  void wait_for(const ir::Instr& wait) {
    if (replica_sums.count(wait.handle)) {  // handles are unique: no gather or copy has it
      finish_replica_sum(wait.handle, /*at_wait=*/true);
      return;
    }
    if (copy_handles.count(wait.handle)) {
      if (ir::runs_in_micro_batch(wait.runs_in, micro_batch, micro_batches)) attached_copier().wait(wait.handle);
      return;
    }
    auto it = gathers_by_handle.find(wait.handle);
    if (it == gathers_by_handle.end()) return;
    for (int p : it->second) finish_gather(p, /*at_wait=*/true);
  }

  // An offload_states or reload_states, in the micro-batches it runs in.
  void copy_states(const ir::Instr& in) {
    if (!ir::runs_in_micro_batch(in.runs_in, micro_batch, micro_batches)) return;
    if (in.kind == ir::OpKind::OffloadStates) attached_copier().offload(in.handle, in.params);
    else attached_copier().reload(in.handle, in.params);
  }

  StateCopier& attached_copier() {
    if (!copier) throw InternalError("sharded executor: the program moves optimizer states, but no state copier is attached");
    return *copier;
  }

  void on_grad(size_t p, const torch::Tensor& grad) {
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
    // Its gradient is complete, so no backward op needs the gathered weight any more.
    release(p);
    launch_reductions();
  }

  // Autograd stores each full gradient the hook returns in the parameter's .grad, beside the
  // copy in grad_flat; by the next op's backward it has, and the copy is all the reduction needs.
  void drop_autograd_gradients() {
    for (size_t p : stored_by_autograd) params[p].full.mutable_grad() = torch::Tensor();
    stored_by_autograd.clear();
  }

  // Adds `grad` (undefined: nothing, a zero gradient) to parameter p's padded flat gradient.
  void add_gradient(size_t p, const torch::Tensor& grad) {
    Param& q = params[p];
    torch::NoGradGuard no_grad;
    if (!q.grad_flat.defined()) q.grad_flat = torch::zeros({q.padded}, q.shard.options());
    if (grad.defined()) q.grad_flat.narrow(0, 0, q.numel).add_(grad.reshape({-1}));
  }

  // Parameter p's gradient is what has arrived (zeros where nothing has): it may be reduced.
  void complete_gradient(size_t p) {
    if (params[p].grad_ready) return;
    add_gradient(p, torch::Tensor());
    params[p].grad_ready = true;
  }

  static std::vector<size_t> as_indices(const std::vector<int>& ps) { return {ps.begin(), ps.end()}; }

  bool ready(const std::vector<size_t>& unit) const {
    return std::all_of(unit.begin(), unit.end(), [&](size_t p) { return params[p].grad_ready; });
  }

  // Reductions launch in one fixed order on every rank (collectives must match across ranks):
  // a unit once all of its members' gradients are complete.
  void launch_reductions() {
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
        for (size_t p : r.members) params[p].grad_shard = params[p].grad_wire;  // s_p = 1: the shard is the whole parameter
      }
      in_flight.push_back(std::move(r));
    }
  }

  // Completes, in launch order, the reductions in flight up to unit `last` (every one by default).
  // A unit the program completes before its gradients are all here (a rank that has not run an
  // op yet) launches later and completes at a later wait, or at the end of backward.
  void complete_reductions(size_t last = SIZE_MAX) {
    while (!in_flight.empty() && in_flight.front().unit <= last) {
      Reduction r = std::move(in_flight.front());
      in_flight.pop_front();
      r.work.wait();
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

  // TAGC (tagc.txt Algorithm 1) in place of q's reduce-scatter: error feedback and
  // sparsification, the index OR-reduced over the parameter group, and each shard's count
  // sketch reduced to its owner (one reduce-scatter of the s_p sketches into r.out).
  void launch_compressed(Param& q, Reduction& r) {
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

  // The owner peels its summed sketch; the bound (thresholds summed over every dp rank,
  // averaged as the gradient will be) and the estimated entries are agreed on by all ranks.
  void finish_compressed(Param& q, const torch::Tensor& summed) {
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

  // Starts the all-reduce of the tensors as one collective in the reduction dtype.
  Sum launch_sum(comm::Group& group, std::vector<size_t> members, std::vector<torch::Tensor> tensors) {
    Sum sum{std::move(members), std::move(tensors), {}, {}};
    sum.wire = sum.tensors.size() == 1 ? sum.tensors[0] : torch::cat(sum.tensors);
    if (sum.wire.scalar_type() != reduce_dtype) sum.wire = sum.wire.to(reduce_dtype);
    sum.work = comm::all_reduce(group, sum.wire);
    return sum;
  }

  // Waits for a sum and puts it in its tensors.
  static void land_sum(Sum& sum) {
    sum.work.wait();
    copy_back(sum);
  }

  // A finished sum into its tensors, where it was summed in a buffer of its own.
  static void copy_back(Sum& sum) {
    torch::NoGradGuard no_grad;
    if (sum.tensors.size() == 1 && sum.wire.is_same(sum.tensors[0])) return;
    int64_t offset = 0;
    for (const torch::Tensor& t : sum.tensors) {
      t.copy_(sum.wire.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  }

  // All-reduces the tensors as one collective in the reduction dtype, in place.
  void all_reduce_together(comm::Group& group, const std::vector<torch::Tensor>& tensors) {
    Sum sum = launch_sum(group, {}, tensors);
    land_sum(sum);
  }

  // What a rank keeps of reduction unit `unit`'s gradient shards (lins.txt §IV-C); `reduce` is
  // false only for a test-only fault. A bucket's members travel in one collective.
  void keep_gradients(size_t unit, const std::vector<size_t>& members, bool reduce) {
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

  // The optimizer slices of the members' summed gradient shards: the shard itself where the
  // slice is all of it (s_os = s_p), else a copy of this rank's part, so the rest can go.
  void keep_slices(const std::vector<size_t>& members) {
    torch::NoGradGuard no_grad;
    for (size_t p : members) {
      Param& q = params[p];
      int64_t slice = q.slice.numel();
      if (slice == q.grad_shard.numel()) q.slice_grad = std::move(q.grad_shard);
      else q.slice_grad = q.grad_shard.narrow(0, groups.optim_slot * slice, slice).clone();
      q.grad_shard = torch::Tensor();
    }
  }

  // Lands the replicas' sum `handle`, in flight, where the IR waits for it (one not launched yet,
  // by a rank that has not run the unit's op, launches later and finish_backward lands it). At
  // the program's wait (`at_wait`) the copies are timed as its unpacking (passes/mark_unpacks.h):
  // a bucket's sum back into its members' shards, and each optimizer slice kept out of its shard.
  // (A lone shard's sum in another dtype, --reduce-dtype, is copied back too, but the IR does
  // not know the dtype: that copy is timed without bytes.)
  void finish_replica_sum(int handle, bool at_wait) {
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

  // The bytes finish_replica_sum copies, as the IR counts them.
  int64_t unpacked_bytes(const Sum& sum) const {
    int64_t bytes = 0;
    for (size_t p : sum.members) {
      const Param& q = params[p];
      int64_t element = q.shard.element_size();
      if (sum.members.size() > 1) bytes += q.chunk * element;
      if (q.slice.numel() < q.chunk) bytes += q.slice.numel() * element;
    }
    return bytes;
  }

  // Reduction units in the order of the IR's first backward reduction of each parameter; a
  // test-only unreduced parameter is a unit of its own.
  void plan_reductions() {
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

  // Each unit's all-reduce over the replicas (dp / s_p of them; for s_p = 1 every dp rank) is
  // the IR's of exactly its parameters, waited for where the IR waits for it. An IR sum that no
  // unit reduces together would be issued apart from the program: refused (a test-only
  // unreduced parameter, a unit of its own, excepted).
  void plan_replica_sums() {
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
};

namespace {

struct RegatherHolder : torch::CustomClassHolder {
  ShardedExecutor* executor;
  const torch::nn::Module* module;
};

// Identity in forward; in backward, re-gathers the module's parameters before its own backward runs.
struct RegatherBeforeBackward : public torch::autograd::Function<RegatherBeforeBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& out,
                               c10::intrusive_ptr<RegatherHolder> holder) {
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return out.view_as(out);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<RegatherHolder>(ctx->saved_data["holder"].toCapsule());
    holder->executor->before_backward(holder->module);
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

ShardedExecutor::ShardedExecutor(torch::nn::Module& model, ir::Program program, ShardGroups groups, nn::CallInterceptor* inner,
                                 torch::Dtype reduce_dtype)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.reduce_dtype = reduce_dtype;
  s.program = std::move(program);
  s.groups = std::move(groups);
  s.inner = inner;
  const ir::Sharding& f = s.groups.factors;
  if (f.optim < 2)
    throw InternalError("sharded executor: nothing is sharded (s_os = " + std::to_string(f.optim) + ")");
  s.s_p = f.params;
  s.m_g = f.grads / f.params;
  s.m_os = f.optim / f.params;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < s.program.params.size(); ++i) index[s.program.params[i].name] = i;
  s.params.resize(s.program.params.size());
  for (auto& m : parameters_by_module(model)) {
    // Another pipeline stage's module: none of its parameters is the program's, nor its calls.
    if (std::none_of(m.names.begin(), m.names.end(), [&](const std::string& name) { return index.count(name); })) continue;
    std::vector<size_t> mine;
    for (size_t j = 0; j < m.names.size(); ++j) {
      auto it = index.find(m.names[j]);
      if (it == index.end()) throw InternalError("sharded executor: parameter " + m.names[j] + " is not in the traced step");
      if (!s.params[it->second].full.defined()) s.params[it->second].full = m.tensors[j];
      mine.push_back(it->second);
    }
    s.params_of[m.module] = mine;
    s.path_of[m.module] = m.path;
  }
  s.shard_index = s.groups.params ? s.groups.params->rank() : 0;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < s.params.size(); ++i) {
    State::Param& q = s.params[i];
    if (!q.full.defined()) throw InternalError("sharded executor: traced parameter " + s.program.params[i].name + " not found in the model");
    q.numel = q.full.numel();
    q.padded = (q.numel + f.optim - 1) / f.optim * f.optim;
    q.chunk = q.padded / s.s_p;
    torch::Tensor padded = torch::zeros({q.padded}, q.full.options().requires_grad(false));
    padded.narrow(0, 0, q.numel).copy_(q.full.detach().reshape({-1}));
    int64_t slice = q.chunk / s.m_os;
    if (s.s_p == 1) {
      // Replicated (ZeRO-1/2): the parameter becomes a view into its padded flat copy, so the
      // optimizer slice updates it in place and no second copy exists.
      q.shard = padded;
      q.full.set_(padded.storage(), 0, q.full.sizes(), q.full.strides());
      q.resident = true;
    } else {
      q.shard = padded.narrow(0, s.shard_index * q.chunk, q.chunk).clone();
      free_storage(q.full);
    }
    q.slice = q.shard.narrow(0, s.groups.optim_slot * slice, slice).requires_grad_(true);
    s.optimized.push_back(q.slice);
    State* state = s_.get();
    q.full.register_hook([state, i](torch::Tensor grad) {
      state->on_grad(i, grad);
      return grad;
    });
  }
  s.follow_program();
}

void ShardedExecutor::replace_program(ir::Program program) {
  State& s = *s_;
  const ir::Sharding &now = s.program.sharding, &then = program.sharding;
  bool same_sharding = now.dp == then.dp && now.params == then.params && now.grads == then.grads && now.optim == then.optim;
  bool same_params = program.params.size() == s.program.params.size() &&
                     std::equal(program.params.begin(), program.params.end(), s.program.params.begin(),
                                [](const ir::TracedParam& a, const ir::TracedParam& b) { return a.name == b.name && a.numel == b.numel; });
  if (!same_sharding || !same_params)
    throw InternalError("sharded executor: a replacing program must have the same parameters and sharding");
  bool idle = s.in_flight.empty() && s.replica_sums.empty() && std::none_of(s.params.begin(), s.params.end(), [&](const State::Param& q) {
                return q.gathering || (q.resident && s.s_p > 1);
              });
  if (!idle) throw InternalError("sharded executor: the program is replaced while a gather or reduction is under way");
  s.program = std::move(program);
  s.follow_program();
}

ShardedExecutor::~ShardedExecutor() = default;

const std::vector<torch::Tensor>& ShardedExecutor::optimized() const { return s_->optimized; }

const ShardGroups& ShardedExecutor::groups() const { return s_->groups; }

const std::vector<size_t>& ShardedExecutor::params_of(const torch::nn::Module* module) const {
  static const std::vector<size_t> none;
  auto it = s_->params_of.find(module);
  return it == s_->params_of.end() ? none : it->second;
}

void ShardedExecutor::before_backward(const torch::nn::Module* module) {
  auto it = s_->path_of.find(module);
  if (it != s_->path_of.end()) s_->run_backward_until(it->second);
  for (size_t p : params_of(module)) s_->finish_gather(p);
}

void ShardedExecutor::gather_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->finish_gather(p);
}

void ShardedExecutor::release_all() {
  for (size_t p = 0; p < s_->params.size(); ++p) s_->release(p);
}

void ShardedExecutor::attach_state_copier(StateCopier* copier) { s_->copier = copier; }

bool ShardedExecutor::moves_optimizer_states() const { return !s_->copy_handles.empty(); }

void ShardedExecutor::begin_forward(int64_t micro_batch, int64_t micro_batches) {
  s_->micro_batch = micro_batch;
  s_->micro_batches = micro_batches;
  s_->last_micro_batch = micro_batch == micro_batches - 1;
  s_->cursor = 0;
  s_->backward_cursor = 0;
  s_->next_reduce = 0;
  s_->in_backward = false;
  for (auto& q : s_->params) {
    q.grad_ready = q.reduce_launched = false;
    q.arrived = 0;
    q.grad_flat = torch::Tensor();
  }
}

void ShardedExecutor::finish_forward() {
  s_->run_forward_until("");
  s_->in_backward = true;
}

torch::Tensor ShardedExecutor::intercept(torch::nn::Module& module, const std::vector<torch::Tensor>& inputs,
                                         const nn::Forward& forward) {
  auto run = [&] { return s_->inner ? s_->inner->intercept(module, inputs, forward) : forward(inputs); };
  auto it = s_->path_of.find(&module);
  if (it == s_->path_of.end()) return run();
  // In forward, the IR's instructions up to this op; in backward, a checkpoint() recomputation:
  // the IR's instructions up to its recompute (gathers at need past it, alike on every rank).
  if (!s_->in_backward) s_->run_forward_until(it->second);
  else s_->run_backward_to_recompute(it->second);
  for (size_t p : s_->params_of[&module]) s_->finish_gather(p);  // the IR waited already; a no-op then
  torch::Tensor out = run();
  if (!torch::GradMode::is_enabled() || !out.requires_grad()) return out;
  auto holder = c10::make_intrusive<RegatherHolder>();
  holder->executor = this;
  holder->module = &module;
  return RegatherBeforeBackward::apply(out, holder);
}

void ShardedExecutor::finish_backward() {
  State& s = *s_;
  s.drop_autograd_gradients();
  // The backward ops after the last one that ran did not run here: their zeros, in IR order.
  if (!s.backward_instrs.empty()) s.run_backward_through(s.backward_instrs.size() - 1);
  // Parameters that received no gradient contribute zeros, in the same order on every rank.
  for (const auto& unit : s.reduce_units)
    for (size_t p : unit) s.complete_gradient(p);
  s.launch_reductions();
  s.complete_reductions();
  while (!s.replica_sums.empty()) s.finish_replica_sum(s.replica_sums.begin()->first, /*at_wait=*/false);
  // A gather the IR launched for an op whose backward did not run completes before its buffer goes.
  for (size_t p = 0; p < s.params.size(); ++p) {
    if (s.params[p].gathering) s.finish_gather(p);
    s.release(p);
  }
}

void ShardedExecutor::average_gradients() {
  State& s = *s_;
  torch::NoGradGuard no_grad;
  for (auto& q : s.params) {
    if (!q.slice_grad.defined()) q.slice_grad = torch::zeros({q.slice.numel()}, q.shard.options());
    q.slice.mutable_grad() = q.slice_grad.div_(static_cast<double>(s.groups.factors.dp));
    q.slice_grad = torch::Tensor();
  }
}

double ShardedExecutor::clip_gradients(double max_norm) {
  // The s_os ranks of one optimizer block hold every element once.
  return clip_sharded_grad_norm(s_->optimized, s_->groups.optim_block.get(), max_norm);
}

void ShardedExecutor::drop_gradients() {
  for (auto& q : s_->params) q.slice.mutable_grad() = torch::Tensor();
}

void ShardedExecutor::publish() {
  State& s = *s_;
  if (!s.groups.optim_peers) return;
  torch::NoGradGuard no_grad;
  // A shard is its optim_peers' slices in their ranks' order, this rank's slice a view of its
  // own place: each gathers into the shard itself, which needs no buffer and no copy beyond
  // what the program's broadcasts say.
  std::vector<comm::Work> works(s.params.size());
  for (size_t p = 0; p < s.params.size(); ++p)
    works[p] = comm::all_gather(*s.groups.optim_peers, s.params[p].slice.detach(), s.params[p].shard);
  for (comm::Work& work : works) work.wait();
}

void ShardedExecutor::inject_faults(const std::vector<std::string>& unreduced, const std::vector<std::string>& released_early) {
  State& s = *s_;
  for (size_t p = 0; p < s.params.size(); ++p)
    for (auto& name : unreduced)
      if (s.program.params[p].name == name) s.unreduced.insert(p);
  for (auto& [module, path] : s.path_of)
    for (auto& wanted : released_early)
      if (path == wanted)
        for (size_t p : s.params_of[module]) s.released_early.insert(p);
  s.plan_reductions();
}

void ShardedExecutor::compress(const std::map<std::string, tagc::Config>& wanted) {
  State& s = *s_;
  if (s.s_p == 1 && !wanted.empty())
    throw InternalError("sharded executor: compress() needs sharded parameters (s_p > 1)");
  for (size_t p = 0; p < s.params.size(); ++p) {
    auto it = wanted.find(s.program.params[p].name);
    if (it != wanted.end()) s.params[p].tagc = it->second;
  }
  // The IR's compress instructions and these settings must name the same parameters.
  for (const ir::Instr& in : s.program.instrs)
    if (in.kind == ir::OpKind::Compress)
      for (int p : in.params)
        if (!s.params[p].tagc)
          throw InternalError("sharded executor: the IR compresses " + s.program.params[p].name + ", which has no TAGC settings");
  for (size_t p = 0; p < s.params.size(); ++p)
    if (s.params[p].tagc && std::none_of(s.program.instrs.begin(), s.program.instrs.end(), [&](const ir::Instr& in) {
          return in.kind == ir::OpKind::Compress && in.params == std::vector<int>{static_cast<int>(p)};
        }))
      throw InternalError("sharded executor: " + s.program.params[p].name + " has TAGC settings, but the IR does not compress it");
  s.plan_reductions();
}

std::vector<ShardedExecutor::CompressionBound> ShardedExecutor::compression_bounds() const {
  std::vector<CompressionBound> out;
  for (size_t p = 0; p < s_->params.size(); ++p)
    if (s_->params[p].tagc) out.push_back({s_->program.params[p].name, s_->params[p].bound, s_->params[p].estimated});
  return out;
}

std::map<std::string, torch::Tensor> ShardedExecutor::compression_residuals() const {
  std::map<std::string, torch::Tensor> out;
  for (size_t p = 0; p < s_->params.size(); ++p)
    if (s_->params[p].tagc && s_->params[p].residual.defined()) out[s_->program.params[p].name] = s_->params[p].residual;
  return out;
}

void ShardedExecutor::restore_compression_residuals(const std::map<std::string, torch::Tensor>& residuals) {
  for (size_t p = 0; p < s_->params.size(); ++p) {
    auto it = residuals.find(s_->program.params[p].name);
    if (it == residuals.end() || !s_->params[p].tagc) continue;
    if (it->second.numel() != s_->params[p].padded)
      throw UserError(SourceRange{}, "the checkpoint's TAGC accumulator of " + it->first + " has " + std::to_string(it->second.numel()) +
                                         " entries, this run's " + std::to_string(s_->params[p].padded),
                      "resume with the sharding the checkpoint was written with");
    s_->params[p].residual = it->second.to(s_->params[p].shard.device());
  }
}

std::vector<OptimizedRange> ShardedExecutor::optimized_ranges() const {
  const State& s = *s_;
  std::vector<OptimizedRange> out;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const State::Param& q = s.params[i];
    int64_t offset = s.shard_index * q.chunk + s.groups.optim_slot * q.slice.numel();
    out.push_back({s.program.params[i].name, q.numel, offset, q.slice});
  }
  return out;
}

}  // namespace loom
