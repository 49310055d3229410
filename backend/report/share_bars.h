// Each rank's steps as stacked bars (SVG): the share of the step spent in compute, in exposed
// communication and idle, one panel per rank, steps along x. What `loom report --trace` draws.
// Torch-free.
#pragma once

#include <string>
#include <vector>

#include "backend/report/step_shares.h"

namespace loom::report {

std::string step_shares_svg(const std::vector<StepShares>& rows, const std::string& title);

}  // namespace loom::report
