// The simulator as an evaluator (`loom tune --evaluator sim`): each point's schedule is
// lowered on the traced model (at the micro-batch the point's batch() sets) and its step
// replayed under a cluster's cost model (docs/simulate.md); the objective is the predicted
// tokens per second per rank, and a predicted peak above the memory limit is infeasible.
// Torch-free: the caller supplies the schedule evaluation and the tracer.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "autotuner/evaluator.h"
#include "backend/cost/instruction_cost.h"
#include "backend/ir/op_trace.h"
#include "lang/replacements.h"
#include "lang/schedule.h"

namespace loom::tune {

struct SimShape {
  std::string model;
  int world = 1;
  int64_t seq = 128;
  int64_t micro_batch = 4;  // the command line's: a point's batch() overrides it
  int64_t accum = 1;
  // Bytes per rank; -1: 90% of the cluster device's memory, the limit a GPU run plans within; 0: all of it.
  int64_t memory_limit = -1;
};

// The schedule at a point: evaluated with those knob values (throws UserError where it breaks).
using ScheduleAt = std::function<std::unique_ptr<Schedule>(const std::map<std::string, Value>& knobs)>;
// The model traced at one micro-batch's shape, with a point's replace()s applied.
using Tracer = std::function<ir::OpTrace(const ir::TraceShape& shape, const std::vector<ModuleReplacement>& replacements)>;

class SimEvaluator : public Evaluator {
 public:
  SimEvaluator(std::string schedule_key, ScheduleAt schedule_at, Tracer tracer, std::unique_ptr<ClusterCost> cost, SimShape shape);
  std::string context() const override;
  Trial evaluate(const Point& point) override;

 private:
  std::string schedule_key_;
  ScheduleAt schedule_at_;
  Tracer tracer_;
  std::shared_ptr<ClusterCost> cost_;  // the evaluator's own (ClusterCost is one per thread); the passes plan with it too
  SimShape shape_;
  std::map<std::string, ir::OpTrace> traces_;  // by micro-batch and replacements
  const ir::OpTrace& trace_at(int64_t micro_batch, const std::vector<ModuleReplacement>& replacements);
};

}  // namespace loom::tune
