// Exhaustive search: Slapo's default (slapo.txt §3.4).
#include "autotuner/strategy.h"

namespace loom::tune {

void exhaustive(const SearchSpace& space, const Measure& measure, uint64_t) {
  space.for_each_point([&](const Point& p) {
    measure(p);
    return true;
  });
}

}  // namespace loom::tune
