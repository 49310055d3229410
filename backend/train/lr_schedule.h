// The learning-rate schedule: linear warmup, then cosine decay to a floor. Torch-free.
#pragma once

#include <cstdint>

namespace loom {

struct LrSchedule {
  double peak = 3e-3;
  double min_ratio = 0.1;  // the floor is peak * min_ratio
  int64_t warmup = 10;
  int64_t steps = 50;

  // The learning rate of optimizer step `step` (0-based).
  double at(int64_t step) const;
};

}  // namespace loom
