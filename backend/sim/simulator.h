// The step simulator (issue #15 §2): a discrete-event replay of the step's programs under a
// cost model. Each simulated rank has a host that issues its program's instructions in order,
// a compute stream, a collective stream, a copy stream and a transfer stream (a pipeline's sends
// and receives, which do not queue behind the collectives); a collective runs on the collective
// stream from when it is issued (and the stream is free) and its `wait` holds the host until it
// ends; compute holds the host. Symmetric ranks are simulated once: one program per pipeline
// stage (its first data-parallel and tensor-parallel rank), so a 1,024-rank step costs what its
// stages' programs do (simulate_each_rank simulates each rank instead, where a profile measured
// each). A pipeline's send and recv meet (the transfer starts when both sides have issued it),
// and a collective over ranks of several stages starts when every stage has issued it. The
// memory timeline follows the IR: the rank's model states (less the optimizer states an
// offload keeps on the host) and the data-parallel reducer's bucket buffers, gathered parameters
// from their all-gather to their release, saved activations from their forward (or recompute) to
// their backward, sharded gradients' full-size buffers until reduced, and each instruction's
// workspace (InstructionCost::workspace_bytes) while it runs (memory_walk.h). Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cost/instruction_cost.h"
#include "backend/ir/ir.h"

namespace loom {

// One instruction's run on a simulated rank.
struct SimEvent {
  int stage = 0;
  size_t instr = 0;      // index into the stage's program
  int micro_batch = -1;  // -1: the step's tail
  std::string stream;    // "compute", "collective", "copy", "transfer" (a pipeline's sends and receives)
  double start_s = 0, end_s = 0;
};

struct MemorySample {
  double time_s = 0;
  int64_t bytes = 0;
};

struct SimResult {
  double step_s = 0;          // the slowest stage's (or simulated rank's) end
  double compute_s = 0;       // that stage's (or rank's) compute-stream time
  // step_s - compute_s: communication, copies and waiting for other stages not hidden by
  // compute, and on a GPU the kernels waiting for the host's dispatch
  double exposed_comm_s = 0;
  int64_t peak_bytes = 0;     // the largest memory in use on any stage
  int peak_stage = 0;
  size_t peak_instr = 0;      // the instruction at that peak (index into its stage's program)
  std::vector<int64_t> stage_peak_bytes;  // each stage's own peak (a run's metrics give rank 0's)
  int critical_stage = 0;     // the stage whose end is the step's
  int ranks_simulated = 1;    // 1: one representative per stage; else every rank (simulate_each_rank)
  int critical_rank = 0;      // with every rank simulated, the one whose end is the step's
  // The communication breakdown of that stage (or rank): for each kind of transfer, the seconds
  // it kept its stream busy, hidden by compute or not ("all_gather on params", "send on
  // stage_pair", "offload_states"; communication_kind names them).
  std::map<std::string, double> comm_busy_s;
  // The timeline: one rank per stage; with every rank simulated, the critical rank's.
  std::vector<SimEvent> events;
  std::vector<std::vector<MemorySample>> memory;  // per stage, after each change
};

// `stages`: one program per pipeline stage, in stage order (one program without a pipeline).
// `timeline`: record the events and memory samples (for --trace and --memory-plot); without it
// only the totals and the peak. Throws InternalError when the programs cannot complete (a send
// without its recv), UserError when the cost model prices the step at infinity (so does
// simulate_each_rank).
SimResult simulate(const std::vector<ir::Program>& stages, const InstructionCost& cost,
                   const StateBytes& state_bytes = StateBytes::loom_adamw(), bool timeline = true);

// Every rank of a one-stage step simulated, each priced by its own cost (`rank_costs`, by rank:
// a profile's ranks' own op times, Profile::as_timed_on): a collective starts when the last rank
// issues it, so the ranks' waits for whichever is late at each collective are in the step, and
// the step ends with the slowest. Every collective of `program` must span all the ranks (data
// parallelism, the ZeRO stages without sub-groups, tensor parallelism over every rank). The
// timeline is the slowest rank's.
SimResult simulate_each_rank(const ir::Program& program, const std::vector<const InstructionCost*>& rank_costs,
                             const StateBytes& state_bytes = StateBytes::loom_adamw(), bool timeline = true);

// What comm_busy_s files `in` under: a collective or a transfer by its op and group role
// ("reduce_scatter on grads"), a copy by its op ("offload").
std::string communication_kind(const ir::Instr& in);

// The events as a Chrome trace (chrome://tracing, Perfetto): a process per stage, a thread per
// stream, each event named by its instruction as `loom explain` prints it.
std::string sim_trace_json(const SimResult& result, const std::vector<ir::Program>& stages);

}  // namespace loom
