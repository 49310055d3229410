#include "autotuner/heatmap.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "backend/report/svg_text.h"

namespace loom::tune {
namespace {

const Value* knob_of(const Point& p, const std::string& name) {
  for (const auto& [n, v] : p)
    if (n == name) return &v;
  return nullptr;
}

// Every value knob `name` takes in `points`: numbers in increasing order, others as met.
std::vector<Value> axis_values(const std::vector<const Point*>& points, const std::string& name) {
  std::vector<Value> values;
  for (const Point* p : points)
    if (const Value* v = knob_of(*p, name); v && std::find(values.begin(), values.end(), *v) == values.end()) values.push_back(*v);
  if (values.empty()) throw std::invalid_argument("no point has knob '" + name + "' beside the other axis's");
  if (std::all_of(values.begin(), values.end(), [](const Value& v) { return v.is_number(); }))
    std::sort(values.begin(), values.end(), [](const Value& a, const Value& b) { return a.as_number() < b.as_number(); });
  return values;
}

size_t index_of(const std::vector<Value>& values, const Value& v) {
  return static_cast<size_t>(std::find(values.begin(), values.end(), v) - values.begin());
}

struct Cell {
  bool in_space = false, measured = false, ok = false, infeasible = false;
  double best = 0;
};

// A colour from dark blue (0) through teal and green to yellow (1), as viridis runs.
std::string colour(double f) {
  static const double stops[][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  f = std::clamp(f, 0.0, 1.0) * 4;
  int i = std::min(3, static_cast<int>(f));
  double t = f - i;
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(stops[i][0] + t * (stops[i + 1][0] - stops[i][0])),
                static_cast<int>(stops[i][1] + t * (stops[i + 1][1] - stops[i][1])),
                static_cast<int>(stops[i][2] + t * (stops[i + 1][2] - stops[i][2])));
  return buf;
}

// 1234567 -> "1.23M": the objective in a cell.
std::string short_number(double v) {
  char buf[32];
  if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The grid of cells: the two axes' values and what the trials say of each pair.
struct Grid {
  std::vector<Value> xs, ys;
  std::vector<std::vector<Cell>> cells;  // [y][x]
  double lo = 0, hi = 0;                 // the Ok objectives' range
  const Trial* best = nullptr;

  Grid(const std::vector<Trial>& trials, const std::vector<Point>& space, const HeatmapAxes& axes) : axes_(axes) {
    std::vector<const Point*> points;  // those with both knobs
    for (const Point& p : space)
      if (placed(p)) points.push_back(&p);
    for (const Trial& t : trials)
      if (placed(t.knobs)) points.push_back(&t.knobs);
    xs = axis_values(points, axes.x), ys = axis_values(points, axes.y);
    cells.assign(ys.size(), std::vector<Cell>(xs.size()));
    for (const Point& p : space)
      if (placed(p)) at(p).in_space = true;
    for (const Trial& t : trials)
      if (placed(t.knobs)) add(t);
    if (axes.chosen && placed(axes.chosen->knobs)) best = axes.chosen;
  }
  bool placed(const Point& p) const { return knob_of(p, axes_.x) && knob_of(p, axes_.y); }
  size_t column(const Point& p) const { return index_of(xs, *knob_of(p, axes_.x)); }
  size_t row(const Point& p) const { return index_of(ys, *knob_of(p, axes_.y)); }
  Cell& at(const Point& p) { return cells[row(p)][column(p)]; }
  double shade(double objective) const { return hi > lo ? (objective - lo) / (hi - lo) : 1; }

 private:
  const HeatmapAxes& axes_;
  void add(const Trial& t) {
    Cell& c = at(t.knobs);
    c.measured = true;
    c.infeasible = c.infeasible || t.status == TrialStatus::Infeasible;
    if (!t.ok()) return;
    c.best = c.ok ? std::max(c.best, t.objective) : t.objective;
    c.ok = true;
    lo = best ? std::min(lo, t.objective) : t.objective;
    hi = best ? std::max(hi, t.objective) : t.objective;
    if (!best || t.objective > best->objective) best = &t;
  }
};

// The drawing: cells of cw x ch from (left, top), the first y value at the bottom.
struct Canvas {
  double left = 120, top = 50, cw = 0, ch = 0;
  size_t rows = 0;
  std::string svg;
  double x(size_t column) const { return left + column * cw; }
  double y(size_t row) const { return top + (rows - 1 - row) * ch; }
  template <class... Args>
  void add(const char* format, Args... args) {
    size_t at = svg.size();
    svg.resize(at + static_cast<size_t>(std::snprintf(nullptr, 0, format, args...)) + 1);
    std::snprintf(&svg[at], svg.size() - at, format, args...);
    svg.pop_back();  // snprintf's terminating zero
  }
};

void draw_cell(Canvas& k, const Grid& g, size_t r, size_t c) {
  const Cell& cell = g.cells[r][c];
  double x = k.x(c), y = k.y(r);
  std::string fill = cell.ok ? colour(g.shade(cell.best)) : !cell.in_space ? "url(#pruned)" : "white";
  const char* kind = cell.ok ? "ok" : cell.infeasible ? "infeasible" : cell.measured ? "failed" : cell.in_space ? "unmeasured" : "pruned";
  k.add("<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#999\"/>\n", kind, x, y, k.cw,
        k.ch, fill.c_str());
  if (cell.ok) {
    k.add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>\n", x + k.cw / 2, y + k.ch / 2 + 4,
          g.shade(cell.best) > 0.6 ? "black" : "white", short_number(cell.best).c_str());
  } else if (cell.measured) {  // a cross: red over the limit, grey failed
    k.add("<path d=\"M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f L%.1f,%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", x + 6, y + 6, x + k.cw - 6,
          y + k.ch - 6, x + k.cw - 6, y + 6, x + 6, y + k.ch - 6, cell.infeasible ? "#d62728" : "#888");
  }
}

void draw_axes(Canvas& k, const Grid& g, const HeatmapAxes& axes) {
  double bottom = k.top + k.ch * g.ys.size();
  for (size_t c = 0; c < g.xs.size(); ++c)
    k.add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", k.x(c) + k.cw / 2, bottom + 16,
          svg_escaped(g.xs[c].to_source()).c_str());
  for (size_t r = 0; r < g.ys.size(); ++r)
    k.add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", k.left - 6, k.y(r) + k.ch / 2 + 4, svg_escaped(g.ys[r].to_source()).c_str());
  k.add("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">%s</text>\n", k.left + k.cw * g.xs.size() / 2, bottom + 40,
        svg_escaped(axes.x).c_str());
  double middle = k.top + k.ch * g.ys.size() / 2;
  k.add("<text x=\"20\" y=\"%.1f\" font-size=\"13\" transform=\"rotate(-90 20 %.1f)\" text-anchor=\"middle\">%s</text>\n", middle, middle,
        svg_escaped(axes.y).c_str());
}

// The colour scale's ends, then what the marks mean.
void draw_legend(Canvas& k, const Grid& g) {
  double lx = k.left + k.cw * g.xs.size() + 20;
  for (int i = 0; i < 5; ++i)
    k.add("<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", lx, k.top + 16.0 * (4 - i), colour(i / 4.0).c_str());
  k.add("<text x=\"%.1f\" y=\"%.1f\">%s tok/s/rank</text>\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 20, k.top + 11,
        short_number(g.hi).c_str(), lx + 20, k.top + 75, short_number(g.lo).c_str());
  const char* marks[][2] = {{"#d62728", "crossed: over the memory limit"}, {"#888", "crossed: failed"}, {"black", "hatched: pruned"},
                            {"black", "blank: not measured"}, {"black", "outlined: the best"}};
  for (int i = 0; i < 5; ++i) k.add("<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n", lx, k.top + 110 + 18.0 * i, marks[i][0], marks[i][1]);
}

}  // namespace

std::string tune_heatmap_svg(const std::vector<Trial>& trials, const std::vector<Point>& space, const HeatmapAxes& axes) {
  Grid g(trials, space, axes);
  Canvas k;
  k.rows = g.ys.size();
  k.cw = std::min(90.0, 600.0 / g.xs.size());
  k.ch = std::min(50.0, 400.0 / g.ys.size());
  k.add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
        "<defs><pattern id=\"pruned\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\"><path d=\"M0,6 L6,0\" stroke=\"#bbb\"/>"
        "</pattern></defs>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        k.left + k.cw * g.xs.size() + 230, k.top + k.ch * g.ys.size() + 60);
  k.svg += "<text x=\"" + std::to_string(static_cast<int>(k.left)) + "\" y=\"24\" font-size=\"14\">" + svg_escaped(axes.title) + "</text>\n";
  for (size_t r = 0; r < g.ys.size(); ++r)
    for (size_t c = 0; c < g.xs.size(); ++c) draw_cell(k, g, r, c);
  if (g.best)
    k.add("<rect class=\"best\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\" stroke-width=\"3\"/>\n",
          k.x(g.column(g.best->knobs)), k.y(g.row(g.best->knobs)), k.cw, k.ch);
  draw_axes(k, g, axes);
  draw_legend(k, g);
  return k.svg + "</svg>\n";
}

}  // namespace loom::tune
