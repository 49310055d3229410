// ShardedExecutor::State, the sharded executor's state and its interpreter of the step program,
// private to the executor's three files: sharded_executor.cpp (the executor's interface and the
// autograd node that runs backward's instructions), sharded_executor_program.cpp (following the
// program: its gathers, waits, releases and state copies, forward and backward) and
// sharded_executor_reductions.cpp (each gradient's reduction, from autograd's hook to the
// optimizer slice it lands in).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/types.h>

#include "backend/exec/sharded_executor.h"
#include "backend/exec/state_copier.h"

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
    // The program's backward release of it, after its last backward compute (npos: none).
    size_t backward_release = static_cast<size_t>(-1);
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
  // Parameters no backward compute of this rank uses (a pipeline stage's copy of an embedding
  // another stage computes with): their gradients are zeros, complete, as the program reduces
  // them, once those of the last backward compute's parameters are (insert_gradient_reduction).
  std::vector<size_t> uncomputed;
  std::vector<size_t> last_computed;  // the last backward compute's parameters
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
  void follow_program();

  // One all-gather of the given parameters' shards (those not resident or in flight already;
  // every rank skips the same ones).
  void launch_gather(const std::vector<size_t>& wanted);

  // `at_wait`: the program's wait for the gather (its unpacking is timed as the wait's; a gather
  // finished at need or for a checkpoint is not the program's).
  void finish_gather(size_t p, bool at_wait = false);

  // Copies member k of gather `g` out of its output into `q`'s storage, in one pass: rank r's
  // block holds every member's shard r, so the member's padded tensor is row r of its column.
  void unpack_member(const Gather& g, size_t k, Param& q);

  void release(size_t p);

  // Executes forward instructions up to and including the compute of `module` ("" = to the end).
  // A compute this rank skips (an expert no token was routed to) is passed over with its
  // gathers, waits and releases: the collectives follow the IR, never the data, so every rank
  // issues the same ones. Modules must run in the traced order, possibly with gaps.
  void run_forward_until(const std::string& module);

  // Before `module`'s backward: the IR's backward gathers and waits up to its compute, so the
  // gathers of the ops that follow are in flight while this one computes (backward prefetch).
  // Reductions follow the gradients themselves (on_grad), and so does each parameter's release
  // (the IR's, once nothing can need the parameter: see on_grad). When the op is not
  // where the IR expects it, nothing is skipped past: its parameters are gathered at need,
  // which every rank does alike.
  void run_backward_until(const std::string& module);

  // A checkpoint() recomputation of the module holding `module` begins: the IR's backward
  // instructions up to its `recompute`, which gather what it uses. A compute on the way means
  // no recompute is due here: nothing runs, and parameters are gathered at need.
  void run_backward_to_recompute(const std::string& module);

  // The position in `instrs` (indices into the program), from `from` on, of the compute of
  // `module`; instrs.size() when there is none.
  size_t find_compute(const std::vector<size_t>& instrs, size_t from, const std::string& module) const;

  // Executes backward instructions up to and including index `last` of backward_instrs. A
  // compute passed over before `last` did not run on this rank: the gradients it would have
  // completed are zeros, reduced at this point, as a rank that ran it reduces them here.
  void run_backward_through(size_t last);

  void wait_for(const ir::Instr& wait);

  // The index of the program's first release of parameter p after instruction `compute` (its
  // last backward compute), in backward; npos when there is none.
  size_t backward_release_after(size_t compute, int p) const;

  // Whether `in` runs in this micro-batch (its runs_in: a parameter unsharded across the
  // micro-batches is gathered in the first and released in the last).
  bool runs_now(const ir::Instr& in) const;

  // An offload_states or reload_states, in the micro-batches it runs in.
  void copy_states(const ir::Instr& in);

  StateCopier& attached_copier();

  // Autograd hands parameter p a gradient. With its last one the gradient is complete: its
  // reductions launch when their turn comes, and the program's backward release of p runs now,
  // if it runs in this micro-batch: no later op needs p, so the release commutes with the
  // reduction waits the program puts before it, and the untraced work between two ops (an
  // activation's backward) does not run with p still held, as the memory walk has it.
  void on_grad(size_t p, const torch::Tensor& grad);

  // Whether the program keeps p gathered into the next micro-batch (its backward release runs
  // in the last micro-batch only: keep_gathered).
  bool kept_into_next_micro_batch(size_t p) const;

  // Completes the uncomputed gradients once the last backward compute's are complete (or
  // `backward_over`: autograd has returned, so every compute this rank runs has run).
  void complete_uncomputed(bool backward_over = false);
  // Autograd has returned from the micro-batch's backward: its copies of the gradients go, the
  // uncomputed ones are complete (where the last compute had no parameters to say so) and the
  // reductions that are ready launch.
  void autograd_returned();

  // Autograd stores each full gradient the hook returns in the parameter's .grad, beside the
  // copy in grad_flat; by the next op's backward it has, and the copy is all the reduction needs.
  void drop_autograd_gradients();

  // Adds `grad` (undefined: nothing, a zero gradient) to parameter p's padded flat gradient.
  void add_gradient(size_t p, const torch::Tensor& grad);

  // Parameter p's gradient is what has arrived (zeros where nothing has): it may be reduced.
  void complete_gradient(size_t p);

  static std::vector<size_t> as_indices(const std::vector<int>& ps) { return {ps.begin(), ps.end()}; }

  bool ready(const std::vector<size_t>& unit) const;

  // Reductions launch in one fixed order on every rank (collectives must match across ranks):
  // a unit once all of its members' gradients are complete.
  void launch_reductions();

  // Completes, in launch order, the reductions in flight up to unit `last` (every one by default).
  // A unit the program completes before its gradients are all here (a rank that has not run an
  // op yet) launches later and completes at a later wait, or at the end of backward.
  void complete_reductions(size_t last = SIZE_MAX);

  // TAGC (tagc.txt Algorithm 1) in place of q's reduce-scatter: error feedback and
  // sparsification, the index OR-reduced over the parameter group, and each shard's count
  // sketch reduced to its owner (one reduce-scatter of the s_p sketches into r.out).
  void launch_compressed(Param& q, Reduction& r);

  // The owner peels its summed sketch; the bound (thresholds summed over every dp rank,
  // averaged as the gradient will be) and the estimated entries are agreed on by all ranks.
  void finish_compressed(Param& q, const torch::Tensor& summed);

  // Starts the all-reduce of the tensors as one collective in the reduction dtype.
  Sum launch_sum(comm::Group& group, std::vector<size_t> members, std::vector<torch::Tensor> tensors);

  // Waits for a sum and puts it in its tensors.
  static void land_sum(Sum& sum);

  // A finished sum into its tensors, where it was summed in a buffer of its own.
  static void copy_back(Sum& sum);

  // All-reduces the tensors as one collective in the reduction dtype, in place.
  void all_reduce_together(comm::Group& group, const std::vector<torch::Tensor>& tensors);

  // What a rank keeps of reduction unit `unit`'s gradient shards (lins.txt §IV-C); `reduce` is
  // false only for a test-only fault. A bucket's members travel in one collective.
  void keep_gradients(size_t unit, const std::vector<size_t>& members, bool reduce);

  // The optimizer slices of the members' summed gradient shards: the shard itself where the
  // slice is all of it (s_os = s_p), else a copy of this rank's part, so the rest can go.
  void keep_slices(const std::vector<size_t>& members);

  // Lands the replicas' sum `handle`, in flight, where the IR waits for it (one not launched yet,
  // by a rank that has not run the unit's op, launches later and finish_backward lands it). At
  // the program's wait (`at_wait`) the copies are timed as its unpacking (passes/mark_unpacks.h):
  // a bucket's sum back into its members' shards, and each optimizer slice kept out of its shard.
  // (A lone shard's sum in another dtype, --reduce-dtype, is copied back too, but the IR does
  // not know the dtype: that copy is timed without bytes.)
  void finish_replica_sum(int handle, bool at_wait);

  // The bytes finish_replica_sum copies, as the IR counts them.
  int64_t unpacked_bytes(const Sum& sum) const;

  // Reduction units in the order of the IR's first backward reduction of each parameter; a
  // test-only unreduced parameter is a unit of its own.
  void plan_reductions();

  // Each unit's all-reduce over the replicas (dp / s_p of them; for s_p = 1 every dp rank) is
  // the IR's of exactly its parameters, waited for where the IR waits for it. An IR sum that no
  // unit reduces together would be issued apart from the program: refused (a test-only
  // unreduced parameter, a unit of its own, excepted).
  void plan_replica_sums();
};

}  // namespace loom
