// `loom tune --plot`: the objective over two knobs as an SVG heatmap, as Slapo's Fig. 10 draws
// its space (issue #16 §3). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "autotuner/trial.h"

namespace loom::tune {

struct HeatmapAxes {
  std::string x, y;  // the knobs along each axis
  std::string title;
  const Trial* chosen = nullptr;  // the sweep's best, outlined (default: the trials' highest objective)
};

// One cell per pair of the two knobs' values, for every value a point of the space or a trial
// takes (numbers in increasing order, other values in the order met; a point without one of the
// knobs, declared in a branch it did not take, is left out). A cell is coloured by the best Ok
// objective among the trials with those two values (the best over the other knobs), and labelled
// with it; one without an Ok trial is crossed, in red when one of its trials was over the memory
// limit, in grey when they failed or timed out; one that no trial measured is left blank; one no
// point of the space has (a constraint pruned it) is hatched. The chosen trial's cell is
// outlined. Throws std::invalid_argument when an axis names no knob of the points.
std::string tune_heatmap_svg(const std::vector<Trial>& trials, const std::vector<Point>& space, const HeatmapAxes& axes);

}  // namespace loom::tune
