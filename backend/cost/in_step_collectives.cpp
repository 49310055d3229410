#include "backend/cost/in_step_collectives.h"

#include <algorithm>

namespace loom {

double serial_busy_ms(std::vector<CollectiveSpan> spans) {
  std::sort(spans.begin(), spans.end(), [](const CollectiveSpan& a, const CollectiveSpan& b) { return a.completed_ms < b.completed_ms; });
  double busy = 0, free_at = -1e300;
  for (const CollectiveSpan& s : spans) {
    busy += s.completed_ms - std::max(s.launched_ms, free_at);
    free_at = s.completed_ms;
  }
  return busy;
}

}  // namespace loom
