#include "backend/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace loom {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  int64_t decay_steps = std::max<int64_t>(1, steps - warmup);
  double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay_steps));
  double floor = peak * min_ratio;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace loom
