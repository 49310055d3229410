// The step-memory check of `loom check --memory-limit` (docs/verify.md). Each pipeline stage's
// program is walked as the simulator's timeline, the runtime's over-limit warning and the
// memory-aware passes walk it (memory_walk.h); a highest stage over the limit is refused with
// its peak, the instruction at it and what would lower it. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cost/memory_model.h"
#include "backend/ir/ir.h"
#include "backend/lower/runtime_plan.h"

namespace loom {

// The highest walk peak over the stages, and where it is.
struct StagePeak {
  int64_t bytes = 0;
  size_t stage = 0;
  size_t instr = 0;
};
StagePeak highest_stage_peak(const std::vector<ir::Program>& stages, const StateBytes& state_bytes);

// What was walked, for the message.
struct CheckedStep {
  int64_t limit = 0;
  int64_t micro_batch = 0, seq = 0, accum = 1;
  std::string draw_command;  // the `loom simulate ... --memory-plot` that draws this step
  // What the user wrote to set the limit and the step's shape, for the error and its hint: the
  // command's flags, or the Python function's arguments.
  std::string limit_name = "--memory-limit", micro_batch_name = "--micro-batch", seq_name = "--seq";
  // The step a check walks under `limit`: `micro_batch` and `accum` as the caller gives them,
  // unless the schedule's batch() set them (`plan`).
  static CheckedStep of(const RuntimePlan& plan, int64_t limit, int64_t micro_batch, int64_t seq, int64_t accum);
  // "1 micro-batch(es) of 4 x 128 tokens"
  std::string describe() const;
};

// The stages' highest peak; throws UserError when it is over `step.limit`, its hint built from
// what `plan` does not do yet (shard the parameters, recompute, offload, a smaller batch).
StagePeak check_step_memory(const std::vector<ir::Program>& stages, const RuntimePlan& plan, const CheckedStep& step,
                            const StateBytes& state_bytes = StateBytes::loom_adamw());

}  // namespace loom
