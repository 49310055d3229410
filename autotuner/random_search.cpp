// Random search: every valid point once, in an order the seed decides.
#include <algorithm>
#include <random>

#include "autotuner/strategy.h"

namespace loom::tune {

void random_search(const SearchSpace& space, const Measure& measure, uint64_t seed) {
  std::vector<Point> points = space.points();
  std::mt19937_64 rng(seed);
  std::shuffle(points.begin(), points.end(), rng);
  for (const Point& p : points) measure(p);
}

}  // namespace loom::tune
