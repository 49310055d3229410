// confirm_best, `loom tune`'s sim+run (issue #16 §2): the simulator ranks every point it
// evaluated, real runs confirm its best few, and the regret says how much slower the simulator's
// choice ran than the fastest of them as measured. Torch-free.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "autotuner/tuner.h"

namespace loom::tune {

struct Confirmed {
  Trial predicted;  // the simulator's trial
  Trial measured;   // the real run's
};

struct Confirmation {
  std::vector<Confirmed> points;  // the simulator's best first
  std::optional<Trial> best;      // the measured best Ok trial among them
  // 1 - (measured objective of the simulator's best point) / (the measured best's): 0 when the
  // simulator's choice ran fastest, 1 when it did not run (failed, timed out, over the limit);
  // none when no confirming run was Ok.
  std::optional<double> regret;
  size_t evaluations = 0;     // real runs made now (not from the database)
  bool budget_spent = false;  // --max-trials stopped them before `top`
};

// Runs the `top` best Ok points of `predicted` with `runs` (options.max_trials counts these runs,
// apart from the evaluations that made `predicted`).
Confirmation confirm_best(const TuneResult& predicted, size_t top, Evaluator& runs, TrialDatabase& db, const TuneOptions& options,
                          const std::function<void(const TuneProgress&)>& progress = nullptr);

}  // namespace loom::tune
