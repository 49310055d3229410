// Successive halving (issue #16 §2), for real runs, whose measurements are noisy and whose
// effort can be scaled: every valid point is measured with the base effort (a few steps), the
// better 1/rate of them (at least one) again with `rate` times the effort, and so on until one
// point is left: the best, as measured with the most effort any point got. Failed, timed-out
// and infeasible points do not survive a rung. Torch-free.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "autotuner/strategy.h"

namespace loom::tune {

// `start_rung(scale)` sets the effort of the measurements that follow (1 for the first rung,
// then rate, rate^2, ...); `measure` measures a point at it. Returns the last rung's best Ok
// trial (a rung where none was Ok, say all timed out, ends the search with the best of the rung
// before), or nothing when no point was Ok. Throws std::invalid_argument for a rate below 2.
std::optional<Trial> successive_halving(const std::vector<Point>& points, const std::function<void(int scale)>& start_rung,
                                        const Measure& measure, int rate = 2);

// The evaluations successive halving makes over `points` points (when every one is Ok).
size_t halving_evaluations(size_t points, int rate = 2);

}  // namespace loom::tune
