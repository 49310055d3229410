#include "backend/sim/memory_plot.h"

#include <algorithm>
#include <cstdio>

#include "backend/sim/svg_text.h"
#include "lang/value.h"

namespace loom {

std::string memory_plot_svg(const SimResult& r, const std::string& title) {
  const double width = 800, height = 360, left = 90, right = 20, top = 40, bottom = 50;
  double t_max = std::max(r.step_s, 1e-12);
  double b_max = std::max<double>(static_cast<double>(r.peak_bytes), 1);
  auto x = [&](double t) { return left + (width - left - right) * t / t_max; };
  auto y = [&](double b) { return height - bottom - (height - top - bottom) * b / b_max; };
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  char buf[256];
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\" height=\"360\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"" + std::to_string(left) + "\" y=\"22\" font-size=\"14\">" +
         svg_escaped(title) + "</text>\n";
  std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, height - bottom,
                width - right, height - bottom);
  svg += buf;
  std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, top, left,
                height - bottom);
  svg += buf;
  for (int i = 0; i <= 4; ++i) {
    double b = b_max * i / 4, t = t_max * i / 4;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left - 6, y(b) + 4,
                  format_size(static_cast<int64_t>(b)).c_str());
    svg += buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3g ms</text>\n", x(t), height - bottom + 18,
                  t * 1e3);
    svg += buf;
  }
  for (size_t s = 0; s < r.memory.size(); ++s) {
    // A step line: the bytes hold until the next change.
    std::string points;
    double last = 0;
    for (const MemorySample& m : r.memory[s]) {
      if (!points.empty()) {
        std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x(m.time_s), y(last));
        points += buf;
      }
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x(m.time_s), y(static_cast<double>(m.bytes)));
      points += buf;
      last = static_cast<double>(m.bytes);
    }
    std::snprintf(buf, sizeof buf, "%.1f,%.1f", x(t_max), y(last));
    points += buf;
    const char* colour = colours[s % 6];
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">stage %zu</text>\n", width - right - 60,
                  top + 14.0 * static_cast<double>(s), colour, s);
    svg += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\">peak %s (stage %d)</text>\n", left + 6, y(b_max) - 6,
                format_size(r.peak_bytes).c_str(), r.peak_stage);
  svg += buf;
  return svg + "</svg>\n";
}

}  // namespace loom
