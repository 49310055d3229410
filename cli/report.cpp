// loom report: a run's metrics (and trace) as SVG plots a person looks at: loss, tokens/s and
// peak memory over the steps, and where each rank's step time went.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/cost/sample_statistics.h"
#include "backend/report/line_chart.h"
#include "backend/report/run_metrics.h"
#include "backend/report/share_bars.h"
#include "backend/report/step_shares.h"
#include "backend/train/output_paths.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::string metrics, trace, out;
};

void write_file(const fs::path& path, const std::string& text) {
  write_output_file(path.string(), {text}, "--out", "free space, or choose an --out directory you can write to");
}

// One chart of a metric over the steps.
report::LineChart over_steps(const std::vector<report::MetricsRow>& rows, const std::string& title, const std::string& y_label,
                             double (*value)(const report::MetricsRow&)) {
  report::LineChart chart;
  chart.title = title;
  chart.x_label = "step";
  chart.whole_x = true;
  chart.x_tick = [](double step) { return std::to_string(static_cast<long long>(step)); };
  chart.y_label = y_label;
  report::ChartSeries series{"", {}};
  for (const report::MetricsRow& r : rows)
    if (std::isfinite(value(r))) series.points.push_back({static_cast<double>(r.step), value(r)});
  chart.series.push_back(std::move(series));
  return chart;
}

std::vector<std::string> metric_plots(const std::vector<report::MetricsRow>& rows, const fs::path& out) {
  report::LineChart loss = over_steps(rows, "Loss", "loss", [](const report::MetricsRow& r) { return r.loss; });
  loss.y_from_zero = false;
  char note[160];
  std::snprintf(note, sizeof note, "step %lld: %.4g, step %lld: %.4g", static_cast<long long>(rows.front().step), rows.front().loss,
                static_cast<long long>(rows.back().step), rows.back().loss);
  loss.note = note;
  report::LineChart speed = over_steps(rows, "Throughput", "tokens/s", [](const report::MetricsRow& r) { return r.tokens_per_s; });
  std::vector<double> tokens;
  for (const report::MetricsRow& r : rows) tokens.push_back(r.tokens_per_s);
  std::snprintf(note, sizeof note, "median %.4g tokens/s over %zu steps", median(tokens), rows.size());
  speed.note = note;
  report::LineChart memory = over_steps(rows, "Peak memory per step (rank 0)", "bytes",
                                        [](const report::MetricsRow& r) { return static_cast<double>(r.peak_bytes); });
  int64_t peak = 0;
  for (const report::MetricsRow& r : rows) peak = std::max(peak, r.peak_bytes);
  memory.note = "peak " + format_size(peak);
  memory.y_tick = [](double bytes) { return format_size(static_cast<int64_t>(bytes)); };
  std::vector<std::string> written;
  for (auto& [name, chart] : std::vector<std::pair<std::string, report::LineChart*>>{
           {"loss.svg", &loss}, {"throughput.svg", &speed}, {"memory.svg", &memory}}) {
    write_file(out / name, report::line_chart_svg(*chart));
    written.push_back((out / name).string());
  }
  return written;
}

// The step-time shares from the trace: the plot, and a line per rank on stdout.
std::string share_plot(const std::string& trace_path, const fs::path& out) {
  std::ifstream in(trace_path);
  if (!in) throw UserError(SourceRange{}, "cannot read the trace '" + trace_path + "'", "pass the file `loom run --trace` wrote");
  nlohmann::json trace = nlohmann::json::parse(in, nullptr, false);
  if (trace.is_discarded()) throw UserError(SourceRange{}, trace_path + " is not JSON", "pass the file `loom run --trace` wrote");
  std::vector<report::StepShares> rows = report::step_shares(trace, trace_path);
  std::map<int, report::StepShares> sums;
  for (const report::StepShares& s : rows) {
    report::StepShares& t = sums[s.rank];
    t.step_ms += s.step_ms, t.compute_ms += s.compute_ms, t.exposed_comm_ms += s.exposed_comm_ms, t.idle_ms += s.idle_ms;
  }
  std::printf("%-6s %10s %10s %12s %8s\n", "rank", "step ms", "compute", "exposed comm", "idle");
  for (auto& [rank, t] : sums) {
    double n = 0;
    for (const report::StepShares& s : rows) n += s.rank == rank;
    std::printf("%-6d %10.1f %9.1f%% %11.1f%% %7.1f%%\n", rank, t.step_ms / n, 100 * t.compute_ms / t.step_ms,
                100 * t.exposed_comm_ms / t.step_ms, 100 * t.idle_ms / t.step_ms);
  }
  fs::path file = out / "step_time.svg";
  write_file(file, report::step_shares_svg(rows, "Where each rank's step time went (" + trace_path + ")"));
  return file.string();
}

int report_run(const ReportOptions& o) {
  try {
    std::vector<report::MetricsRow> rows = report::read_metrics(o.metrics);
    std::error_code error;
    fs::create_directories(o.out, error);
    if (error || !fs::is_directory(o.out))
      throw UserError(SourceRange{}, "cannot create the --out directory '" + o.out + "'" + (error ? ": " + error.message() : ""),
                      "choose a directory you can write to");
    std::vector<std::string> written = metric_plots(rows, o.out);
    if (!o.trace.empty()) written.push_back(share_plot(o.trace, o.out));
    std::cout << "loom report: " << rows.size() << " steps; wrote";
    for (const std::string& w : written) std::cout << " " << w;
    std::cout << "\n";
    return kOk;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUsageError;
  }
}

}  // namespace

void add_report(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* c = app.add_subcommand("report", "Plot a run: loss, tokens/s and peak memory over the steps, and with --trace where "
                                             "each rank's step time went (SVG files; see docs/running.md)");
  c->add_option("metrics", o->metrics, "the file `loom run --metrics` wrote")->required();
  c->add_option("--trace", o->trace, "the file `loom run --trace` wrote: adds step_time.svg, each rank's compute, exposed "
                                     "communication and idle per step");
  c->add_option("--out", o->out, "directory for the SVG files (created if missing)")->required();
  c->callback([&run, o] { run = [o] { return report_run(*o); }; });
}

}  // namespace loom::cli
