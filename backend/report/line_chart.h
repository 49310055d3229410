// A line chart as plain SVG: series over a shared x axis, ticks on both axes, a legend, a title
// and a note. `loom report` draws a run's loss, throughput and peak memory with it, `loom
// simulate --memory-plot` the simulated memory timeline. Torch-free.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace loom::report {

struct ChartSeries {
  std::string name;                               // in the legend (empty: none)
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct LineChart {
  std::string title;
  std::string note;  // a line under the title ("peak 1.2 GiB on stage 0")
  std::string x_label, y_label;
  std::vector<ChartSeries> series;
  bool steps = false;        // each value holds until the next point (memory over time)
  bool y_from_zero = true;   // the y axis starts at 0 rather than at the smallest value
  bool whole_x = false;      // x ticks at whole numbers only (steps)
  std::function<std::string(double)> x_tick, y_tick;  // tick labels; default: 3 significant digits
};

std::string line_chart_svg(const LineChart& chart);

// The SVG document around a body of `width` x `height`: white background, sans-serif text.
std::string svg_document(double width, double height, const std::string& body);
// A colour for the i-th series (a fixed palette, cycled).
const char* series_colour(size_t i);

}  // namespace loom::report
