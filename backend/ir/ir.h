// Loom's instruction IR: one explicit list of instructions for one training step —
// forward and backward compute ops, and the communication and memory instructions
// placed between them (deepcompile.txt §3-4.1). Passes transform it (backend/passes/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/module_path.h"
#include "backend/ir/op_trace.h"
#include "backend/ir/role.h"

namespace loom::ir {

enum class Phase { Forward, Backward, Step };

enum class OpKind {
  Compute,        // run a module (forward or backward) on gathered parameters
  AllGather,      // gather a parameter (or bucket) from its shards; async, finished by Wait
  Wait,           // wait for the collective `handle`
  Release,        // free a gathered parameter's storage
  ReduceScatter,  // reduce a gradient to its shard owners
  AllReduce,      // reduce a gradient (or its shard) across a group
  SelectDrop,     // keep this rank's part of a reduced gradient, drop the rest (Lins §IV-C)
  Broadcast,      // spread updated parameters inside the optimizer-state group (Lins §IV-C.2)
  OptimizerStep,  // update this rank's shard of parameters and states
  Offload,        // copy the gradients of host-held optimizer slices to the host (before the step)
  Reload,         // copy their updated values back to the device (after the step)
  OffloadStates,  // start copying the optimizer states of `params`' slices to the host (async, copy
                  // stream); its Wait frees them on the device
  ReloadStates,   // allocate those states on the device again, start copying them back (async); its
                  // Wait: they are there
  Compress,       // reduce a gradient to its shard owners with TAGC (a compressed reduce-scatter of its sketch)
  CompressIndex,  // TAGC: OR the index of a gradient's kept entries over the parameter group (all-reduce)
  CompressBound,  // TAGC: agree on the compression's error bound and estimated entries (all-reduce)
  GradNorm,       // the global gradient norm (an all-reduce of squares over ranks holding disjoint parts), then clipping
  LossReduce,     // all-reduce the step's loss over every rank (what the run reports)
  Recompute,      // rerun a checkpoint()ed module's forward in backward, before its ops' backward
  TpAllReduce,    // tensor parallelism (sync): sum a module's output (forward) or input gradient (backward)
  TpAllGather,    // tensor parallelism (sync): gather a module's output along its last dimension
  Send,           // pipeline: this stage's activation to the next stage (forward), its gradient back (backward)
  Recv,           // pipeline: the previous stage's activation (forward), the next stage's gradient (backward)
};

// Whether `path` (of a module or parameter) is `module` or lies below it: "h.0.fc.w" is within
// "h.0", "h.01" is not.
bool within(const std::string& path, const std::string& module);

// Compute and Recompute run a module on its gathered parameters.
inline bool runs_module(OpKind k) { return k == OpKind::Compute || k == OpKind::Recompute; }

const char* op_name(OpKind k);
// The c10d names collective_op returns: one copy each, so a name's address stands for it.
extern const char kAllGatherName[], kReduceScatterName[], kAllReduceName[], kSendName[], kRecvName[];
// The collective a kind runs as, by its c10d name ("all_reduce", "all_gather", ...); null for
// instructions that are not collectives. Lins' broadcast of updated slices runs as one
// all_gather; TAGC's compress as a reduce_scatter of its sketch. Inline: the simulator and the
// verifier ask it of every instruction.
inline const char* collective_op(OpKind k) {
  switch (k) {
    case OpKind::AllGather:
    case OpKind::TpAllGather:
    case OpKind::Broadcast: return kAllGatherName;
    case OpKind::Send: return kSendName;
    case OpKind::Recv: return kRecvName;
    case OpKind::ReduceScatter:
    case OpKind::Compress: return kReduceScatterName;
    case OpKind::AllReduce:
    case OpKind::TpAllReduce:
    case OpKind::CompressIndex:
    case OpKind::CompressBound:
    case OpKind::GradNorm:
    case OpKind::LossReduce: return kAllReduceName;
    default: return nullptr;
  }
}
// Instructions that start work another instruction waits for (a Wait on their handle):
// collectives, and the optimizer-state copies (OffloadStates, ReloadStates).
inline bool issues_handle(OpKind k) { return collective_op(k) != nullptr || k == OpKind::OffloadStates || k == OpKind::ReloadStates; }
const char* phase_name(Phase p);

// The micro-batches of a step an instruction of the forward and backward body runs in: the
// body runs once per micro-batch (gradient accumulation), the step's tail once. Gradients
// are reduced across data-parallel replicas in the last micro-batch only, as DDP's no_sync.
enum class MicroBatches { All, Last, AllButLast, First };
const char* micro_batches_name(MicroBatches m);  // "all", "last", "all_but_last", "first"
// Whether an instruction that runs in `m` runs in micro-batch `index` of `count`.
bool runs_in_micro_batch(MicroBatches m, int64_t index, int64_t count);

// A process group as the IR sees it: a role and a size.
struct GroupRef {
  Role role = Role::None;
  int size = 1;
};

struct Instr {
  OpKind kind = OpKind::Compute;
  Phase phase = Phase::Forward;
  ModulePath module;        // Compute: the module path; Recompute: the checkpointed module
  std::vector<int> params;  // indices into Program::params
  GroupRef group;           // collectives
  int64_t bytes = 0;        // bytes moved (collectives) or freed (Release)
  int handle = -1;          // collectives: the handle they produce; Wait: the one it waits for
  double flops = 0;               // Compute, Recompute: matrix-product FLOPs (backward: twice forward's)
  int64_t activation_bytes = 0;   // Compute, Recompute: bytes saved for backward, which backward frees
  MicroBatches runs_in = MicroBatches::All;  // forward and backward instructions; the step's run once
  // Wait: the bytes it copies out of its collective's flat buffer into the members' own tensors
  // once the collective is done (a bucket's or a padded parameter's gather, data parallelism's
  // averaged gradients): host work of the rank at the wait (passes/mark_unpacks.h).
  int64_t unpack_bytes = 0;
};

// Where the program's rank sits in a mesh (tp x pp; all 1 outside one).
struct MeshPosition {
  int tp = 1, pp = 1;
  int stage = 0, tp_rank = 0;
  int model_parallel() const { return tp * pp; }
};

// The sharding the program implements (lins.txt factors; 1 = replicated).
struct Sharding {
  int dp = 1;
  int params = 1;  // s_p
  int grads = 1;   // s_g
  int optim = 1;   // s_os
};

struct Program {
  std::string model;
  TraceShape shape;  // the micro-batch the compute instructions' FLOPs and activations are for
  int64_t micro_batches = 1;  // how often the forward and backward body runs per step
  MeshPosition mesh;          // a mesh's program is one rank's: its stage's ops and its slices
  Sharding sharding;
  std::vector<TracedParam> params;
  std::vector<Instr> instrs;
  int next_handle = 0;
  int64_t memory_limit = 0;  // bytes of gathered parameters allowed at once; 0: unlimited
  // Guarantees established by passes; the verifier checks each one from then on.
  bool gathers_placed = false;     // every use of a sharded parameter is gathered and waited
  bool reductions_placed = false;  // every gradient is reduced and waited before the step

  int new_handle() { return next_handle++; }
  // One instruction per line: "  12 fwd  all_gather  h.0.mlp.c_fc.weight  params(2)  1.5 MiB  -> %4".
  std::string to_text() const;
  // What `in` acts on, as to_text names it: its module, its parameters, or the handle it waits for.
  std::string subject(const Instr& in) const;
  // Instruction `index` (< instrs.size()) for people, as `loom simulate` names the one at the
  // peak: "182 (fwd compute lm_head)".
  std::string instruction_line(size_t index) const;
  std::string to_json() const;
  bool operator==(const Program& other) const;
};

// The instructions passes insert, built in one place.
// The whole size of parameter `q` in bytes.
int64_t param_bytes(const Program& program, int q);
// The whole sizes of parameters `params` together, in bytes (a bucket's members).
int64_t total_param_bytes(const Program& program, const std::vector<int>& params);
// The elements of parameter `q` one rank's optimizer updates: its 1/s_os slice, rounded up as
// the sharded executor pads.
int64_t optimizer_slice_elements(const Program& program, int q);
// Whether the sharded executor gathers the all-gather `in` straight into its one member's
// storage (the member's 1/s_p shards tile it, unpadded); else its wait copies each member out.
bool gathered_in_place(const Program& program, const Instr& in);
// A collective of one parameter on `group`, with a new handle of `program`.
Instr collective(Program& program, OpKind kind, Phase phase, int q, GroupRef group, int64_t bytes);
// A collective of no parameter (a scalar of the step: the gradient norm, the loss) on `group`.
Instr scalar_collective(Program& program, OpKind kind, Phase phase, GroupRef group);
// The collective `in` issues: its kind's, or null on a group of one rank, where it
// communicates nothing (a data-parallel gradient norm is measured locally).
inline const char* issued_collective(const Instr& in) { return in.group.size > 1 ? collective_op(in.kind) : nullptr; }
// A backward all-reduce of gradients over their replicas (every dp rank, or the dp / s_p
// holders of one shard): data parallelism's bucket sums, the sharded executor's replica sums.
bool sums_over_replicas(const Instr& in);
// A wait for the collective `handle`, in the micro-batches the collective runs in.
Instr wait_for(int handle, Phase phase, MicroBatches runs_in = MicroBatches::All);
// How many times per step `in` runs.
int64_t times_per_step(const Program& program, const Instr& in);
// How many gradients autograd hands each parameter in one micro-batch's backward: one for its
// uses outside every recomputed (checkpoint()ed) module, which the backward sums before the
// parameter sees them, and one per recomputation that uses it, whose nested backward hands its
// own (a tied weight used inside and outside a checkpointed module gets two). 0: none, as for
// a pipeline stage's copy of a module only another stage runs backward. Executors reduce a
// gradient once all of them have arrived.
std::vector<int> gradient_deliveries(const Program& program);
// The index of the program's last backward compute, or instrs.size() where it has none: where
// the gradients of parameters no backward compute uses are complete, as zeros.
size_t last_backward_compute(const Program& program);
// The index of the first instruction at or after `from` of `kind` with handle `handle` (for a
// Wait: the wait of the collective `handle`), or instrs.size() where none. A merged collective
// keeps its first member's handle, so a bucket's collective is found by that.
size_t find_instruction(const Program& program, OpKind kind, int handle, size_t from = 0);
// A backward reduction whose completion can wait: a reduce-scatter, or TAGC's compress (what frees
// a full gradient, and what window_reductions keeps in flight).
bool launches_reduction(const Instr& in);
// A release of parameter `q`'s gathered storage.
Instr release_of(const Program& program, int q, Phase phase);
// Whether a pass moving the all-gather `gather` earlier must stop below `other`: another gather
// or a release of one of its parameters (a tied weight gathered twice in a phase).
bool gather_may_not_pass(const Instr& gather, const Instr& other);
// One more than the largest handle the program holds (its next_handle, or an instruction's past
// it): the size of a table by handle.
int handle_count(const Program& program);
// Whether the pipeline transfer `in` (a Send or Recv) is with the next stage: forward sends and
// backward receives are; the others are with the previous one.
bool with_next_stage(const Instr& in);

}  // namespace loom::ir
