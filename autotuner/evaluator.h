// Evaluators (issue #16 §2): what a point of the search space measures. The simulator
// (sim_evaluator.h) predicts; real runs measure. Each names its context, what a trial depends on
// beyond the knobs, which keys the trial database. Torch-free.
#pragma once

#include <string>

#include "autotuner/trial.h"

namespace loom::tune {

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // What its trials depend on besides the knobs: the evaluator, the schedule, the model, the
  // world, the shapes, the memory limit.
  virtual std::string context() const = 0;
  // Evaluates one point; never throws for a bad point (its trial says Failed or Infeasible).
  virtual Trial evaluate(const Point& point) = 0;
  // Successive halving's rungs: later evaluations take `scale` times the base effort (a real
  // run's steps), and the context says so, so each rung's trials are their own in the database.
  // False where the effort is fixed (the simulator predicts once).
  virtual bool scale_effort(int scale) { return false; }
};

}  // namespace loom::tune
