// The memory model of one rank's step, instruction by instruction, without time: what the
// simulator's memory timeline follows (simulator.h) and what the memory-aware passes plan with
// (deepcompile.txt's P_mem: proactive_prefetch, selective_unshard, auto_bucket). Resident: the
// model states (less the optimizer states an offload keeps on the host) and the data-parallel
// reducer's buckets; a gathered parameter from its all-gather to its release (GatherBuffers:
// with the executor's output buffer and copies where it makes them); a saved activation
// from its forward (or recompute) to its backward; a sharded gradient's full-size buffer until
// reduced (GradientBuffers); an instruction's workspace while it runs. Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cost/instruction_cost.h"
#include "backend/ir/ir.h"

namespace loom::memory {

// One run of an instruction in a step: the body once per micro-batch (as its runs_in says),
// then the step's tail (micro_batch -1).
struct Run {
  size_t instr = 0;
  int micro_batch = -1;
};
std::vector<Run> runs_of(const ir::Program& p);

// Bytes held for the whole step: the rank's model states on the device and the reducer's buckets.
int64_t resident_bytes(const ir::Program& p, const StateBytes& state_bytes);
// What is in use as the step starts: those, and what `cost` (may be null) says the runtime holds
// beyond the model (a GPU profile's outside_bytes). Where the simulator and the walk begin.
int64_t step_start_bytes(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost);

// Parameter q's bytes padded to a multiple of s_os elements: its gathered output, and its
// full-size gradient buffer, in the sharded executor.
int64_t padded_bytes(const ir::Program& p, int q);

// The bytes an all-gather of `in`'s parameters holds from its launch to its wait: its output
// (their padded full sizes) and, with several members, their shards' concatenated copy it sends.
// A gathered parameter holds its full size from the gather's wait to its release.
int64_t gather_launch_bytes(const ir::Program& p, const ir::Instr& in);
// The most such a gather holds at once: at its wait, with several members or a padded one, the
// members' full storage beside the output (comm::all_gather itself allocates nothing more).
int64_t gather_peak_bytes(const ir::Program& p, const ir::Instr& in);

// What the optimizer step `step` holds while it runs, beyond the model states: LibTorch's AdamW
// updates one parameter at a time, and while it computes the denominator, sqrt(v) / sqrt(1 - b2^t),
// both that square root and the quotient are alive: twice the largest fp32 state slice this rank
// updates on the device (none for the slices offload_optimizer steps on the host).
int64_t optimizer_step_workspace(const ir::Program& p, const ir::Instr& step);

// The bytes a gradient reduce-scatter of `in`'s parameters holds from its launch to its wait:
// its output (their 1/s_p shards), the full-size buffer comm::reduce_scatter's all-to-all
// receives into and, with several members, their gradients' concatenated copy.
int64_t reduction_launch_bytes(const ir::Program& p, const ir::Instr& in);

// How running `in` changes the memory in use: `transient` bytes held while it runs only (its
// workspace), then `change` bytes from its end on (negative: freed).
struct Effect {
  int64_t transient = 0;
  int64_t change = 0;
};

// The sharded executor's gradients (backend/exec/sharded_executor.cpp: every program whose
// optimizer states are sharded, s_os > 1). In each micro-batch a parameter's padded full gradient
// is held from the first backward compute that hands it one until its reductions of that
// micro-batch are done: the wait of a reduce-scatter (or compress) frees it, leaving the 1/s_p
// shard, and where an all-reduce of the shard (or, at s_p = 1, of the full gradient itself)
// follows in the same micro-batch, its wait lands it. A reduction holds its buffers from its
// launch to its wait (reduction_launch_bytes; an all-reduce of several members their
// concatenated copy). Landed, the gradient is kept: after the last micro-batch its optimizer
// slice (1/s_os, until the optimizer step), after an earlier one its 1/s_g part (ZeRO-1 keeps
// the whole gradient), which the last micro-batch adds in where its reduction completes (an
// all-reduce of the full gradient at its launch, a reduce-scatter at its wait). A gradient no
// reduction of the micro-batch runs for (ZeRO-1 before the last) is kept after its last backward
// compute, where the executor adds it in at the program's reduction; one nothing landed (no
// compute handed it one here) at the micro-batch's end, as finish_backward does. So the model
// states hold no gradients between steps (resident_bytes). Autograd also stores each full
// gradient in the parameter's .grad, from its op's backward until the next op's (the executor
// drops it there): held through the reductions the op launches. Stateful: feed it a step's runs
// in order (runs_of: one micro-batch after another).
class GradientBuffers {
 public:
  explicit GradientBuffers(const ir::Program& p);
  // Whether the program's gradients are the sharded executor's (s_os > 1).
  static bool sharded(const ir::Program& p);
  // Bytes `in` allocates (positive) or frees (negative) for gradients, in its run in
  // `micro_batch` (-1: the step's tail).
  int64_t change(const ir::Instr& in, int micro_batch);

 private:
  struct Reduction {
    const std::vector<int>* params = nullptr;  // its instruction's; null: no reduction
    size_t at = 0;       // its instruction
    int64_t launch = 0;  // what it holds from its launch to its wait
  };
  const ir::Program& p_;
  bool active_ = false;
  int micro_batch_ = 0;           // of the runs fed so far (-1: the step's tail)
  std::vector<bool> held_;        // by parameter: its full gradient is allocated
  std::vector<bool> reduced_;     // by parameter: its reduced 1/s_p shard waits for an all-reduce
  std::vector<int64_t> accumulated_;  // by parameter: the earlier micro-batches' part, until the last one's is reduced
  std::vector<int64_t> slice_;        // by parameter: its optimizer slice's gradient, until the optimizer step
  std::vector<Reduction> by_handle_;
  std::vector<std::vector<size_t>> reductions_of_;  // by parameter: its backward reductions' instructions
  std::vector<size_t> last_compute_;                 // by parameter: its last backward compute
  // Parameters the rank reduces whose gradient no backward compute hands (a pipeline stage's
  // copy of an embedding another stage computes with): the executor completes them as zeros
  // of their full size after the last backward compute (complete_uncomputed).
  std::vector<int> uncomputed_;
  size_t last_backward_compute_;  // ir::last_backward_compute
  std::vector<int> autograd_;     // parameters whose full gradient autograd holds in .grad
  int64_t drop_autograd();        // frees those (negative bytes)
  const Reduction* reduction_of(const ir::Instr& in) const;  // the backward reduction `in` launches or waits for
  bool last(int micro_batch) const;  // the step's last micro-batch
  bool reduced_again(int q, size_t after, int micro_batch) const;  // another reduction of q follows in it
  int64_t hand_gradients(const ir::Instr& compute, int micro_batch);  // a backward compute's gradients arrive
  int64_t hold(int q, size_t at, int micro_batch);   // q's full gradient is allocated by the compute at `at`
  int64_t launch(const Reduction& r, int micro_batch);                // a reduction starts
  int64_t finish(const Reduction& r, int micro_batch);                // its wait
  int64_t land(int q, bool last_micro_batch);        // q's gradient is reduced: keep its part
  int64_t add_accumulated(int q);        // the earlier micro-batches' part is added in: freed
  int64_t end_micro_batch(bool last_micro_batch);    // what no reduction landed is kept
};

// Autograd's input buffer where gradients are not sharded (they are resident, in .grad): a
// parameter that several backward computes use (a tied embedding and head) has its first use's
// gradient held by autograd from that backward until the last use's, where the two are summed
// into .grad. (Sharded, GradientBuffers holds the full gradient from the first use already.)
// Measured on gpt2 at world 1: the embedding's backward starts 147 MiB, one gradient of it, above
// the resident states. Stateful: feed it a step's runs in order.
class TiedGradients {
 public:
  explicit TiedGradients(const ir::Program& p);
  // Bytes `in` allocates (positive) or frees (negative), in this run of it.
  int64_t change(const ir::Instr& in) const;

 private:
  const ir::Program& p_;
  std::vector<std::pair<size_t, size_t>> uses_;  // by parameter: its first and last backward compute (equal: one use)
};

// Optimizer states on the move (adaptive offloading, OffloadStates / ReloadStates): the wait of
// an offload frees its states on the device; a reload allocates them again at its launch.
class StateCopies {
 public:
  explicit StateCopies(const ir::Program& p);
  // Bytes `in` allocates (positive) or frees (negative) for optimizer states.
  int64_t change(const ir::Instr& in) const;

 private:
  std::vector<int64_t> freed_by_wait_;  // by handle: the bytes an offload's wait frees
};

// The sharded executor's gathered parameters (backend/exec/sharded_executor.cpp): an all-gather
// allocates its output at its launch. One member whose shards tile it exactly is gathered into
// its own storage, so its wait changes nothing; otherwise the wait refills every member's full
// storage while the output is still held (the transient), then frees the output and the sent
// copy. A release frees the full storage.
class GatherBuffers {
 public:
  explicit GatherBuffers(const ir::Program& p);
  Effect effect(const ir::Instr& in) const;

 private:
  struct Gather {
    int64_t held = 0;    // gather_launch_bytes
    int64_t full = 0;    // its members' full sizes
    bool direct = false;
  };
  const ir::Program& p_;
  std::vector<Gather> by_handle_;
};

// Everything a step allocates and frees, run by run: gathered parameters, saved activations
// and workspaces, gradient buffers and offloaded states. What the simulator and the memory walk
// both follow. Stateful: feed it a step's runs in order.
class StepMemory {
 public:
  // `cost` may be null (no workspace known).
  StepMemory(const ir::Program& p, const InstructionCost* cost);
  // `in`'s run in `micro_batch` (-1: the step's tail).
  Effect effect(const ir::Instr& in, int micro_batch);

 private:
  const ir::Program& p_;
  const InstructionCost* cost_;
  GatherBuffers gathers_;
  GradientBuffers gradients_;
  StateCopies states_;
  TiedGradients tied_;
};

// Per instruction, the most memory in use from just before it until its end, over every run of
// it in the step: what an all-gather moved above it would add to (DeepCompile's P_mem, taken as
// the peak around the operator rather than only before it, so a moved buffer that lives across
// a release or a backward's workspace is counted where it is high).
std::vector<int64_t> memory_around_each(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost);

// The walk's highest point: the most memory in use around any instruction (the step's predicted
// peak) and the first instruction at which it is reached.
struct WalkPeak {
  int64_t bytes = 0;
  size_t instr = 0;
};
WalkPeak walk_peak(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost);

}  // namespace loom::memory
