// Randomized coordinate descent (slapo.txt §3.4 and §5.4, after Nesterov [40]): one knob at a
// time in a random order, moved to its best value while the others stay. Along a knob the
// search walks from the current value in one direction (chosen at random) while the objective
// improves, and in the other if the first step did not; a knob's values are taken as ordered,
// as a batch size or a checkpoint ratio is, so the walk finds the best of a unimodal line
// without measuring all of it.
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "autotuner/strategy.h"

namespace loom::tune {
namespace {

double score(const Trial& t) { return t.ok() ? t.objective : -std::numeric_limits<double>::infinity(); }

class Descent {
 public:
  Descent(const SearchSpace& space, const Measure& measure, uint64_t seed) : space_(space), measure_(measure), rng_(seed) {}

  void run() {
    std::vector<Point> points = space_.points();
    std::shuffle(points.begin(), points.end(), rng_);
    // From the first feasible point in a random order: a walk from an infeasible one has no
    // objective to improve on.
    size_t start = 0;
    while (start < points.size() && !(current_ = measure_(points[start])).ok()) ++start;
    if (start == points.size()) return;
    // Until a pass improves nothing, and a restarted one (a new order) does not either.
    for (int quiet_passes = 0; quiet_passes < 2;) quiet_passes = pass() ? 0 : quiet_passes + 1;
  }

 private:
  const SearchSpace& space_;
  const Measure& measure_;
  std::mt19937_64 rng_;
  Trial current_;

  // One knob after another, in a random order; whether any moved.
  bool pass() {
    std::vector<size_t> order(current_.knobs.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    bool moved = false;
    for (size_t k : order) moved = along(k) || moved;
    return moved;
  }

  // Walks knob k from its current value; moves to the best point found. Whether it moved.
  bool along(size_t k) {
    std::optional<SearchSpace::Resolved> here = space_.resolve(values_of(current_.knobs));
    if (!here || k >= here->domains.size()) return false;
    const std::vector<Value>& domain = here->domains[k];
    std::string name = current_.knobs[k].first;  // a copy: walking replaces current_
    auto at = std::find(domain.begin(), domain.end(), current_.knobs[k].second);
    if (at == domain.end()) return false;
    int start = static_cast<int>(at - domain.begin());
    int first = std::uniform_int_distribution<int>(0, 1)(rng_) ? 1 : -1;
    bool moved = walk(name, domain, start, first);
    if (!moved) moved = walk(name, domain, start, -first);
    return moved;
  }

  // The valid point nearest `values` with `moved` kept: `values` itself unless a constraint
  // prunes it, else the other knobs moved the fewest steps along their domains (a step along
  // one knob projected back into the space: where the constraint couples two knobs, as batch
  // size and checkpointing do, the walk follows the boundary instead of stopping at it).
  std::optional<Point> project(const std::map<std::string, Value>& values, const std::string& moved) const {
    if (auto r = space_.resolve(values)) return r->point;
    std::optional<SearchSpace::Resolved> here = space_.resolve(values_of(current_.knobs));
    if (!here) return std::nullopt;
    size_t widest = 0;
    for (const auto& d : here->domains) widest = std::max(widest, d.size());
    for (size_t step = 1; step < widest; ++step)
      for (size_t j = 0; j < here->point.size(); ++j) {
        const auto& [other, value] = here->point[j];
        if (other == moved) continue;
        const std::vector<Value>& domain = here->domains[j];
        auto at = std::find(domain.begin(), domain.end(), values.at(other));
        if (at == domain.end()) continue;
        size_t i = static_cast<size_t>(at - domain.begin());
        for (size_t candidate : {i - step, i + step}) {  // i - step wraps above the domain when step > i
          if (candidate >= domain.size()) continue;
          std::map<std::string, Value> nearby = values;
          nearby[other] = domain[candidate];
          if (auto r = space_.resolve(nearby)) return r->point;
        }
      }
    return std::nullopt;
  }

  bool walk(const std::string& name, const std::vector<Value>& domain, int start, int direction) {
    bool moved = false;
    for (int j = start + direction; j >= 0 && j < static_cast<int>(domain.size()); j += direction) {
      std::map<std::string, Value> values = values_of(current_.knobs);
      values[name] = domain[static_cast<size_t>(j)];
      std::optional<Point> there = project(values, name);
      if (!there) continue;  // nothing valid near it: step over it
      Trial t = measure_(*there);
      if (score(t) <= score(current_)) break;
      current_ = std::move(t);
      moved = true;
    }
    return moved;
  }
};

}  // namespace

void coordinate_descent(const SearchSpace& space, const Measure& measure, uint64_t seed) { Descent(space, measure, seed).run(); }

}  // namespace loom::tune
