// The simulated memory timeline as an SVG line chart (`loom simulate --memory-plot`): bytes in
// use on each stage's representative rank over the step, the peak marked. Torch-free.
#pragma once

#include <string>

#include "backend/sim/simulator.h"

namespace loom {

std::string memory_plot_svg(const SimResult& result, const std::string& title);

}  // namespace loom
