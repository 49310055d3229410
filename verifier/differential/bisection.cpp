#include "verifier/differential/bisection.h"

#include <algorithm>

namespace loom {

Bisection bisect_directives(size_t total, const std::function<std::optional<bool>(size_t)>& verifies) {
  Bisection b;
  b.total = total;
  size_t good = 0, bad = total;
  while (bad - good > 1) {
    size_t mid = (good + bad) / 2;
    // The middle first, then on towards `bad`, then back towards `good`.
    std::vector<size_t> order;
    for (size_t k = mid; k < bad; ++k) order.push_back(k);
    for (size_t k = mid; k-- > good + 1;) order.push_back(k);
    bool decided = false;
    for (size_t k : order) {
      if (std::find(b.unrunnable.begin(), b.unrunnable.end(), k) != b.unrunnable.end()) continue;  // known not to run
      std::optional<bool> ok = verifies(k);
      if (!ok) {
        b.unrunnable.push_back(k);
        continue;
      }
      (*ok ? good : bad) = k;
      decided = true;
      break;
    }
    if (!decided) break;
  }
  b.done = true;
  b.good = good;
  b.bad = bad;
  return b;
}

}  // namespace loom
