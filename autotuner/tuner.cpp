#include "autotuner/tuner.h"

#include <map>

namespace loom::tune {

TuneResult run_tuner(const SearchSpace& space, Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options,
                     const std::function<void(const TuneProgress&)>& progress) {
  TuneResult result;
  result.space_size = space.points(SIZE_MAX, &result.pruned).size();
  std::string context = evaluator.context();
  std::map<std::string, size_t> asked;  // point -> position in result.trials
  Measure measure = [&](const Point& point) -> Trial {
    std::string key = point_text(point);
    if (auto seen = asked.find(key); seen != asked.end()) return result.trials[seen->second];
    Trial trial;
    if (const Trial* known = db.find(context, point)) {
      trial = *known;
    } else {
      if (options.max_trials > 0 && result.evaluations >= options.max_trials) throw BudgetSpent();
      trial = evaluator.evaluate(point);
      ++result.evaluations;
      db.append(context, trial);
    }
    asked[key] = result.trials.size();
    result.trials.push_back(trial);
    if (trial.ok() && (!result.best || trial.objective > result.best->objective)) result.best = trial;
    if (progress) progress({result.trials.size(), result.space_size, &result.trials.back(), result.best ? &*result.best : nullptr});
    return trial;
  };
  try {
    strategy_named(options.strategy)(space, measure, options.seed);
  } catch (const BudgetSpent&) {
    result.budget_spent = true;
  }
  return result;
}

}  // namespace loom::tune
