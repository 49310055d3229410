#include "backend/sim/step_memory_check.h"

#include "backend/sim/memory_walk.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {
namespace {

// What would lower the step's memory that `plan` does not do yet, as a hint.
std::string lower_memory_hint(const RuntimePlan& plan, const CheckedStep& step) {
  std::vector<std::string> ways;
  const ir::Sharding& f = plan.factors;
  if (f.params < f.dp || f.grads < f.dp || f.optim < f.dp) ways.push_back("shard more (sch.zero(stage=3), or shard_states)");
  if (plan.checkpoint.empty()) ways.push_back("checkpoint() the blocks");
  if (!plan.offload && f.optim > 1) ways.push_back("offload(\"optimizer\", budget=auto)");
  ways.push_back(plan.micro_batch > 0 ? "a smaller micro-batch in the schedule's batch(), or a smaller " + step.seq_name
                                      : "a smaller " + step.micro_batch_name + " or " + step.seq_name);
  std::string hint;
  for (size_t i = 0; i < ways.size(); ++i) hint += (i == 0 ? "" : i + 1 == ways.size() ? ", or " : ", ") + ways[i];
  return hint + "; `" + step.draw_command + "` draws where the memory goes";
}

}  // namespace

CheckedStep CheckedStep::of(const RuntimePlan& plan, int64_t limit, int64_t micro_batch, int64_t seq, int64_t accum) {
  CheckedStep step;
  step.limit = limit;
  step.micro_batch = plan.micro_batch_or(micro_batch);
  step.seq = seq;
  step.accum = plan.accum_or(accum);
  return step;
}

std::string CheckedStep::describe() const {
  return std::to_string(accum) + " micro-batch(es) of " + std::to_string(micro_batch) + " x " + std::to_string(seq) + " tokens";
}

StagePeak highest_stage_peak(const std::vector<ir::Program>& stages, const StateBytes& state_bytes) {
  StagePeak highest;
  for (size_t s = 0; s < stages.size(); ++s) {
    // No instruction costs: the workspaces only a profile measures are not known here.
    memory::WalkPeak peak = memory::walk_peak(stages[s], state_bytes, nullptr);
    if (peak.bytes > highest.bytes) highest = {peak.bytes, s, peak.instr};
  }
  return highest;
}

StagePeak check_step_memory(const std::vector<ir::Program>& stages, const RuntimePlan& plan, const CheckedStep& step,
                            const StateBytes& state_bytes) {
  StagePeak peak = highest_stage_peak(stages, state_bytes);
  if (peak.bytes <= step.limit) return peak;
  const ir::Program& p = stages[peak.stage];
  std::string where = (stages.size() > 1 ? "stage " + std::to_string(peak.stage) + ", " : "") + "instruction " + p.instruction_line(peak.instr);
  throw UserError(SourceRange{},
                  "the step needs " + format_size(peak.bytes) + " per rank at its peak, above " + step.limit_name + " " + format_size(step.limit) +
                      ": " + where + ", at " + step.describe() + " (" + format_size(memory::resident_bytes(p, state_bytes)) +
                      " of it held all step: the model states on the device and the gradient reducer's buffers; the rest gathered "
                      "parameters, gradients and saved activations, as `loom simulate` walks the step)",
                  lower_memory_hint(plan, step));
}

}  // namespace loom
