#include "backend/report/line_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/report/svg_text.h"

namespace loom::report {
namespace {

constexpr double kWidth = 800, kHeight = 360, kLeft = 90, kRight = 20, kTop = 52, kBottom = 50;

std::string three_digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// printf into a string (arguments as printf takes them: strings as .c_str()).
template <typename... Args>
std::string format(const char* pattern, Args... args) {
  int n = std::snprintf(nullptr, 0, pattern, args...);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::snprintf(out.data(), out.size(), pattern, args...);
  out.pop_back();
  return out;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  // An empty or flat range widened so that the axis has a length.
  void settle() {
    if (lo > hi) lo = 0, hi = 1;
    if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) hi = lo + std::max(1e-12, std::abs(lo) * 0.1 + 1e-12);
  }
};

}  // namespace

const char* series_colour(size_t i) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"};
  return colours[i % 8];
}

std::string svg_document(double width, double height, const std::string& body) {
  return format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height) +
         body + "</svg>\n";
}

std::string line_chart_svg(const LineChart& c) {
  Range xs, ys;
  for (const ChartSeries& s : c.series)
    for (auto [x, y] : s.points) xs.add(x), ys.add(y);
  if (c.y_from_zero) ys.add(0);
  xs.settle(), ys.settle();
  auto px = [&](double x) { return kLeft + (kWidth - kLeft - kRight) * (x - xs.lo) / (xs.hi - xs.lo); };
  auto py = [&](double y) { return kHeight - kBottom - (kHeight - kTop - kBottom) * (y - ys.lo) / (ys.hi - ys.lo); };
  auto x_tick = c.x_tick ? c.x_tick : three_digits;
  auto y_tick = c.y_tick ? c.y_tick : three_digits;

  std::string body = format("<text x=\"%.1f\" y=\"20\" font-size=\"14\">%s</text>\n", kLeft, svg_escaped(c.title).c_str());
  if (!c.note.empty())
    body += format("<text x=\"%.1f\" y=\"38\" fill=\"#555\">%s</text>\n", kLeft, svg_escaped(c.note).c_str());
  double x0 = kLeft, x1 = kWidth - kRight, y0 = kHeight - kBottom, y1 = kTop;
  body += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x0, y0, x1, y0);
  body += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x0, y0, x0, y1);
  double last_x = -std::numeric_limits<double>::infinity();
  for (int i = 0; i <= 4; ++i) {
    double y = ys.lo + (ys.hi - ys.lo) * i / 4, x = xs.lo + (xs.hi - xs.lo) * i / 4;
    if (i > 0) body += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0 + 1, py(y), x1, py(y));
    body += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", x0 - 6, py(y) + 4, y_tick(y).c_str());
    if (c.whole_x) x = std::round(x);
    if (x <= last_x) continue;  // whole numbers closer than a tick apart
    last_x = x;
    body += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px(x), y0 + 18, x_tick(x).c_str());
  }
  body += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", (x0 + x1) / 2, kHeight - 12,
                 svg_escaped(c.x_label).c_str());
  double mid = (y0 + y1) / 2;
  body += format("<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">%s</text>\n", mid, mid,
                 svg_escaped(c.y_label).c_str());
  for (size_t i = 0; i < c.series.size(); ++i) {
    const ChartSeries& s = c.series[i];
    const char* colour = series_colour(i);
    std::string points;
    for (size_t k = 0; k < s.points.size(); ++k) {
      auto [x, y] = s.points[k];
      if (c.steps && k > 0) points += format("%.1f,%.1f ", px(x), py(s.points[k - 1].second));
      points += format("%.1f,%.1f ", px(x), py(y));
    }
    if (c.steps && !s.points.empty()) points += format("%.1f,%.1f", px(xs.hi), py(s.points.back().second));
    body += format("<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n", colour,
                   points.c_str());
    if (s.points.size() == 1)  // a single point draws no line: mark it
      body += format("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(s.points[0].first), py(s.points[0].second), colour);
    if (!s.name.empty())
      body += format("<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" text-anchor=\"end\">%s</text>\n", x1, y1 + 14.0 * static_cast<double>(i),
                     colour, svg_escaped(s.name).c_str());
  }
  return svg_document(kWidth, kHeight, body);
}

}  // namespace loom::report
