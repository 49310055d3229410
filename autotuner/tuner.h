// The tuner (issue #16): a strategy walks the search space, each point measured by the
// evaluator unless the trial database already holds it, every new trial appended to the
// database as it ends. The C++ API behind `loom tune`. Torch-free.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autotuner/database.h"
#include "autotuner/evaluator.h"
#include "autotuner/strategy.h"

namespace loom::tune {

struct TuneOptions {
  std::string strategy = "coordinate-descent";  // or "successive-halving" (successive_halving.h)
  uint64_t seed = 0;
  size_t max_trials = 0;  // new evaluations at most (0: no limit); points in the database are free
  int halving_rate = 2;   // successive halving: 1/rate of a rung survives, with rate times the effort
};

// After each point the strategy asks for: how far the sweep is.
struct TuneProgress {
  size_t index = 0;    // 1-based, over the points asked for (successive halving: over every rung's)
  size_t planned = 0;  // the valid points (successive halving: its evaluations over all rungs)
  const Trial* trial = nullptr;
  const Trial* best = nullptr;  // the best Ok trial so far, if any
};

struct TuneResult {
  size_t space_size = 0;
  size_t pruned = 0;        // points a constraint removed
  size_t evaluations = 0;   // new evaluations (not from the database)
  bool budget_spent = false;
  std::vector<Trial> trials;  // each distinct point once (once per rung), in the order the strategy asked for them
  std::optional<Trial> best;  // the Ok trial with the highest objective (successive halving: of its deepest rung with one)
};

TuneResult run_tuner(const SearchSpace& space, Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options,
                     const std::function<void(const TuneProgress&)>& progress = nullptr);

// Measures `points` in their order, as run_tuner measures a strategy's (the database first,
// --max-trials counted): the real runs that confirm the simulator's best points (confirm.h).
TuneResult measure_points(const std::vector<Point>& points, Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options,
                          const std::function<void(const TuneProgress&)>& progress = nullptr);

}  // namespace loom::tune
