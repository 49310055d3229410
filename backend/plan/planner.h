// `loom plan`'s search (issue #15 §4): every point of the plan space is written as a schedule,
// lowered on the model's traced shapes (no weights) to one program per pipeline stage, and
// simulated on a cluster's cost model; plans whose simulated peak memory exceeds the limit are
// dropped, the rest ranked by simulated tokens per second per rank (by step time among plans that
// process the same tokens per step). Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cost/instruction_cost.h"
#include "backend/ir/op_trace.h"
#include "backend/plan/plan_space.h"
#include "lang/module_tree.h"

namespace loom {

struct PlannerOptions {
  int world = 1;
  int local_world = 1;
  int64_t micro_batch = 1, seq = 1, accum = 1;
  int64_t memory_limit = 0;  // bytes per rank; 0: the cluster device's memory
  std::string checkpoint = "none";
  // The replace() implementation every attention module runs ("": the model's own); the trace
  // given to plan_parallelism must be taken with replacements_of(tree, attention).
  std::string attention;
  // How sharded parameters are gathered ahead: MemoryAware plans DeepCompile's passes within
  // memory_limit on the cluster's instruction times, as `loom simulate --cluster` plans them.
  PlanPrefetch prefetch = PlanPrefetch::BlockAhead;
  bool grad_norm = true;
  int threads = 0;  // plans evaluated at once; 0: one per core
};

struct PlannedStep {
  PlanPoint point;
  std::string schedule;  // the .sched text that runs it
  double step_s = 0, compute_s = 0, exposed_comm_s = 0;
  int64_t peak_bytes = 0;
  std::map<std::string, double> comm_busy_s = {};  // the communication breakdown (SimResult::comm_busy_s)
  double mfu = 0;                    // model FLOPs per device per second over the device's peak at the plan's precision
  double tokens_per_s_per_rank = 0;
};

struct PlanReport {
  std::vector<PlannedStep> feasible;  // best first
  size_t configurations = 0;          // points of the space: evaluated, refused, or dropped for their states alone
  size_t evaluated = 0;               // points lowered and simulated
  size_t over_memory = 0;             // points dropped for their simulated peak, or for their model states alone
  size_t over_memory_by_states = 0;   // of those, the ones dropped for their states, unsimulated
  // What the over_memory points were found to need, for a message: the least simulated peak
  // among them, and the least model states among those dropped for their states alone, unsimulated
  // (their peaks would be higher); 0 where there is none of the kind.
  int64_t least_simulated_peak = 0, least_state_bytes = 0;
  size_t refused = 0;                 // points the language or lowering refused (a split that does not fit)
  std::string first_refusal;          // why the first of them was
};

// `progress` is called after each point with (done, total), from the thread that evaluated it
// (one call at a time).
PlanReport plan_parallelism(std::shared_ptr<const ModuleTree> tree, const ir::OpTrace& trace, const ClusterCost& cost,
                            const PlannerOptions& options, const std::function<void(size_t, size_t)>& progress = {});

}  // namespace loom
