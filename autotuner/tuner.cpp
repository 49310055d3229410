#include "autotuner/tuner.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "autotuner/successive_halving.h"

namespace loom::tune {
namespace {

// One sweep's bookkeeping: each point measured once per rung (from the database, or evaluated
// and appended to it), progress reported after each, the best Ok trial kept: that of the
// deepest rung that has one (a rung's runs take more steps than the one before, so they count
// over its; a rung cut short by --max-trials, or where nothing ran, keeps the one before).
class Sweep {
 public:
  Sweep(Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options, const std::function<void(const TuneProgress&)>& progress,
        TuneResult& result)
      : evaluator_(evaluator), db_(db), options_(options), progress_(progress), result_(result), context_(evaluator.context()) {}

  Trial measure(const Point& point) {
    std::string key = point_text(point);
    if (auto seen = asked_.find(key); seen != asked_.end()) return result_.trials[seen->second];
    Trial trial;
    if (const Trial* known = db_.find(context_, point)) {
      trial = *known;
    } else {
      if (options_.max_trials > 0 && result_.evaluations >= options_.max_trials) throw BudgetSpent();
      trial = evaluator_.evaluate(point);
      ++result_.evaluations;
      db_.append(context_, trial);
    }
    asked_[key] = result_.trials.size();
    result_.trials.push_back(trial);
    if (trial.ok() && (!rung_best_ || trial.objective > rung_best_->objective)) rung_best_ = trial;
    result_.best = rung_best_ ? rung_best_ : earlier_best_;
    if (progress_) progress_({result_.trials.size(), planned, &result_.trials.back(), result_.best ? &*result_.best : nullptr});
    return trial;
  }

  // Successive halving's next rung: `scale` times the base effort, every point measured afresh.
  void start_rung(int scale) {
    if (!evaluator_.scale_effort(scale) && scale > 1)
      throw std::invalid_argument("successive halving needs an evaluator whose effort scales (real runs), not one that predicts once");
    context_ = evaluator_.context();
    asked_.clear();
    if (rung_best_) earlier_best_ = rung_best_;
    rung_best_.reset();
  }

  size_t planned = 0;  // the evaluations the progress lines count to

 private:
  Evaluator& evaluator_;
  TrialDatabase& db_;
  const TuneOptions& options_;
  const std::function<void(const TuneProgress&)>& progress_;
  TuneResult& result_;
  std::string context_;
  std::map<std::string, size_t> asked_;  // point -> position in result_.trials, this rung
  std::optional<Trial> rung_best_, earlier_best_;  // this rung's best; the deepest earlier rung's
};

}  // namespace

TuneResult run_tuner(const SearchSpace& space, Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options,
                     const std::function<void(const TuneProgress&)>& progress) {
  TuneResult result;
  std::vector<Point> points = space.points(SIZE_MAX, &result.pruned);
  result.space_size = points.size();
  Sweep sweep(evaluator, db, options, progress, result);
  bool halving = options.strategy == "successive-halving";
  sweep.planned = halving ? halving_evaluations(points.size(), options.halving_rate) : points.size();
  try {
    if (halving) {
      successive_halving(points, [&](int scale) { sweep.start_rung(scale); }, [&](const Point& p) { return sweep.measure(p); },
                         options.halving_rate);
    } else {
      strategy_named(options.strategy)(space, [&](const Point& p) { return sweep.measure(p); }, options.seed);
    }
  } catch (const BudgetSpent&) {
    result.budget_spent = true;
  }
  return result;
}

TuneResult measure_points(const std::vector<Point>& points, Evaluator& evaluator, TrialDatabase& db, const TuneOptions& options,
                          const std::function<void(const TuneProgress&)>& progress) {
  TuneResult result;
  result.space_size = points.size();
  Sweep sweep(evaluator, db, options, progress, result);
  sweep.planned = points.size();
  try {
    for (const Point& p : points) sweep.measure(p);
  } catch (const BudgetSpent&) {
    result.budget_spent = true;
  }
  return result;
}

}  // namespace loom::tune
