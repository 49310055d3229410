#include "autotuner/successive_halving.h"

#include <algorithm>
#include <stdexcept>

namespace loom::tune {
namespace {

// The points a rung of `n` keeps: the better 1/rate, at least one.
size_t survivors(size_t n, int rate) { return std::max<size_t>(1, (n + static_cast<size_t>(rate) - 1) / static_cast<size_t>(rate)); }

}  // namespace

std::optional<Trial> successive_halving(const std::vector<Point>& points, const std::function<void(int scale)>& start_rung,
                                        const Measure& measure, int rate) {
  if (rate < 2) throw std::invalid_argument("successive halving keeps 1/rate of a rung: rate must be at least 2");
  std::vector<Point> candidates = points;
  std::optional<Trial> earlier;  // the best of the rung before
  for (int scale = 1;; scale *= rate) {
    start_rung(scale);
    std::vector<Trial> ok;
    for (const Point& p : candidates) {
      Trial t = measure(p);
      if (t.ok()) ok.push_back(t);
    }
    if (ok.empty()) return earlier;  // nothing ran at this effort (time-outs): the rung before says
    std::stable_sort(ok.begin(), ok.end(), [](const Trial& a, const Trial& b) { return a.objective > b.objective; });
    size_t keep = std::min(survivors(candidates.size(), rate), ok.size());
    if (keep == 1) return ok[0];
    earlier = ok[0];
    candidates.clear();
    for (size_t i = 0; i < keep; ++i) candidates.push_back(ok[i].knobs);
  }
}

size_t halving_evaluations(size_t points, int rate) {
  if (rate < 2) throw std::invalid_argument("successive halving keeps 1/rate of a rung: rate must be at least 2");
  size_t total = 0;
  for (size_t n = points; n > 0; n = survivors(n, rate)) {
    total += n;
    if (survivors(n, rate) == 1) break;
  }
  return total;
}

}  // namespace loom::tune
