#include "autotuner/confirm.h"

#include <algorithm>

namespace loom::tune {

Confirmation confirm_best(const TuneResult& predicted, size_t top, Evaluator& runs, TrialDatabase& db, const TuneOptions& options,
                          const std::function<void(const TuneProgress&)>& progress) {
  std::vector<Trial> ranked;
  for (const Trial& t : predicted.trials)
    if (t.ok()) ranked.push_back(t);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Trial& a, const Trial& b) { return a.objective > b.objective; });
  ranked.resize(std::min(ranked.size(), top));
  std::vector<Point> points;
  for (const Trial& t : ranked) points.push_back(t.knobs);
  TuneResult measured = measure_points(points, runs, db, options, progress);
  Confirmation c;
  c.evaluations = measured.evaluations;
  c.budget_spent = measured.budget_spent;
  for (size_t i = 0; i < measured.trials.size(); ++i) c.points.push_back({ranked[i], measured.trials[i]});
  c.best = measured.best;
  if (c.best) c.regret = c.points[0].measured.ok() ? 1 - c.points[0].measured.objective / c.best->objective : 1;
  return c;
}

}  // namespace loom::tune
