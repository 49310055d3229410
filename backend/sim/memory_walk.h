// The memory model of one rank's step, instruction by instruction, without time: what the
// simulator's memory timeline follows (simulator.h) and what the memory-aware passes plan with
// (deepcompile.txt's P_mem: proactive_prefetch, selective_unshard, auto_bucket). Resident: the
// model states (less the optimizer states an offload keeps on the host) and the data-parallel
// reducer's buckets; a gathered parameter from its all-gather to its release; a saved activation
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

// Bytes an all-gather of `in`'s parameters adds beyond their shards (and their release frees).
int64_t gathered_bytes(const ir::Program& p, const ir::Instr& in);

// How running `in` changes the memory in use: `transient` bytes held while it runs only (its
// workspace), then `change` bytes from its end on (negative: freed).
struct Effect {
  int64_t transient = 0;
  int64_t change = 0;
};
// `cost` may be null (no workspace known).
Effect effect_of(const ir::Program& p, const ir::Instr& in, const InstructionCost* cost);

// The sharded executor's full-size gradient buffers (backend/exec/sharded_executor.cpp), where
// gradients are sharded (s_g > 1, so the model states count only a 1/s_g shard of them): a
// parameter's padded full gradient from the first backward compute that hands it one until the
// wait of the reduction that consumes it, and a reduction of several parameters' concatenated
// copy from its launch to that wait. Stateful: feed it a step's runs in order.
class GradientBuffers {
 public:
  explicit GradientBuffers(const ir::Program& p);
  // Bytes `in` allocates (positive) or frees (negative) for gradients, in this run of it.
  int64_t change(const ir::Instr& in);

 private:
  const ir::Program& p_;
  bool active_ = false;
  std::vector<bool> held_;                    // by parameter: its full gradient is allocated
  std::vector<std::vector<int>> reduced_by_;  // by handle: the parameters a reduction consumes
  std::vector<int64_t> wire_by_;              // by handle: its concatenated copy's bytes (0: none)
  int64_t full_bytes(int q) const;
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

// Per instruction, the most memory in use from just before it until its end, over every run of
// it in the step: what an all-gather moved above it would add to (DeepCompile's P_mem, taken as
// the peak around the operator rather than only before it, so a moved buffer that lives across
// a release or a backward's workspace is counted where it is high).
std::vector<int64_t> memory_around_each(const ir::Program& p, const StateBytes& state_bytes, const InstructionCost* cost);

}  // namespace loom::memory
