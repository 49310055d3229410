#include "backend/report/share_bars.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "backend/report/line_chart.h"
#include "backend/report/svg_text.h"

namespace loom::report {
namespace {

constexpr double kWidth = 800, kLeft = 70, kRight = 20, kTop = 56, kPanel = 120, kGap = 34;
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#dddddd"};  // compute, exposed communication, idle
constexpr const char* kNames[] = {"compute", "exposed communication", "idle"};

std::string text(double x, double y, const std::string& s, const char* anchor = "start", const char* fill = "black") {
  char buf[160];
  std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\">", x, y, anchor, fill);
  return buf + svg_escaped(s) + "</text>\n";
}

std::string rect(double x, double y, double w, double h, const char* fill, const char* cls) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n", cls, x, y, w, h,
                fill);
  return buf;
}

// One rank's panel, its top at `top`: a bar per step, 0% at the bottom, 100% at the top.
std::string panel(const std::vector<const StepShares*>& steps, double top) {
  double plot = kWidth - kLeft - kRight, slot = plot / static_cast<double>(std::max<size_t>(steps.size(), 1));
  double bar = std::max(1.0, slot * 0.8);
  std::string body;
  double sums[3] = {0, 0, 0}, total = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const StepShares& s = *steps[k];
    double parts[3] = {s.compute_ms, s.exposed_comm_ms, s.idle_ms};
    double whole = std::max(1e-9, parts[0] + parts[1] + parts[2]);
    double y = top + kPanel;
    for (int c = 0; c < 3; ++c) {
      double h = kPanel * parts[c] / whole;
      y -= h;
      body += rect(kLeft + slot * static_cast<double>(k) + (slot - bar) / 2, y, bar, h, kColours[c],
                   c == 0 ? "compute" : c == 1 ? "exposed" : "idle");
      sums[c] += parts[c];
    }
    total += whole;
  }
  for (int pct : {0, 50, 100}) body += text(kLeft - 6, top + kPanel * (1 - pct / 100.0) + 4, std::to_string(pct) + "%", "end");
  char label[160];
  std::snprintf(label, sizeof label, "rank %d: compute %.0f%%, exposed communication %.0f%%, idle %.0f%% of %zu steps", steps[0]->rank,
                100 * sums[0] / total, 100 * sums[1] / total, 100 * sums[2] / total, steps.size());
  body += text(kLeft, top - 6, label);
  if (steps.size() <= 40)  // a step number under each bar while they are readable
    for (size_t k = 0; k < steps.size(); ++k)
      body += text(kLeft + slot * (static_cast<double>(k) + 0.5), top + kPanel + 13, std::to_string(steps[k]->step), "middle");
  else
    body += text(kLeft, top + kPanel + 13, "steps " + std::to_string(steps.front()->step) + " to " + std::to_string(steps.back()->step));
  return body;
}

}  // namespace

std::string step_shares_svg(const std::vector<StepShares>& rows, const std::string& title) {
  std::map<int, std::vector<const StepShares*>> by_rank;
  for (const StepShares& s : rows) by_rank[s.rank].push_back(&s);
  std::string body = text(kLeft, 20, title);
  for (int c = 0; c < 3; ++c) {
    double x = kLeft + 190.0 * c;
    body += rect(x, 30, 12, 12, kColours[c], "legend") + text(x + 18, 40, kNames[c]);
  }
  double top = kTop + 20;
  for (auto& [rank, steps] : by_rank) {
    body += panel(steps, top);
    top += kPanel + kGap;
  }
  return svg_document(kWidth, top, body);
}

}  // namespace loom::report
