#include "backend/sim/memory_plot.h"

#include <cstdio>

#include "backend/report/line_chart.h"
#include "lang/value.h"

namespace loom {

std::string memory_plot_svg(const SimResult& r, const std::string& title) {
  report::LineChart chart;
  chart.title = title;
  chart.note = "peak " + format_size(r.peak_bytes) + " (stage " + std::to_string(r.peak_stage) + ")";
  chart.x_label = "time in the step";
  chart.y_label = "bytes in use";
  chart.steps = true;  // the bytes hold until the next change
  chart.x_tick = [](double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
    return std::string(buf);
  };
  chart.y_tick = [](double bytes) { return format_size(static_cast<int64_t>(bytes)); };
  for (size_t s = 0; s < r.memory.size(); ++s) {
    report::ChartSeries series{"stage " + std::to_string(s), {}};
    for (const MemorySample& m : r.memory[s]) series.points.push_back({m.time_s, static_cast<double>(m.bytes)});
    if (!series.points.empty()) series.points.push_back({r.step_s, series.points.back().second});  // to the step's end
    chart.series.push_back(std::move(series));
  }
  return report::line_chart_svg(chart);
}

}  // namespace loom
