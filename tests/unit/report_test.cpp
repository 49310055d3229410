// loom report's parts: where a step's time went, read from a trace; the metrics file read back;
// the charts drawn from them.
#include <doctest/doctest.h>

#include <cmath>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "backend/report/line_chart.h"
#include "backend/report/run_metrics.h"
#include "backend/report/share_bars.h"
#include "backend/report/step_shares.h"
#include "lang/diagnostics.h"

using namespace loom;

namespace {

nlohmann::json span(int pid, const char* cat, const char* name, double ts, double dur) {
  return {{"ph", "X"}, {"pid", pid}, {"tid", 0}, {"cat", cat}, {"name", name}, {"ts", ts}, {"dur", dur}};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a step's time: compute inside the phases, exposed communication while waiting, idle the rest") {
  // Rank 0, step 7 over 1,000 us: forward 100-400 with a 100 us wait inside it, backward 400-800,
  // a 20 us wait between backward and the optimizer (850-950), a collective on the other track.
  nlohmann::json events = nlohmann::json::array();
  events.push_back(span(0, "step", "step 7", 0, 1000));
  events.push_back(span(0, "phase", "forward", 100, 300));
  events.push_back(span(0, "wait", "wait for all_gather", 200, 100));
  events.push_back(span(0, "phase", "backward", 400, 400));
  events.push_back(span(0, "wait", "wait for reduce_scatter", 820, 20));
  events.push_back(span(0, "phase", "optimizer", 850, 100));
  events.push_back({{"ph", "X"}, {"pid", 0}, {"tid", 1}, {"cat", "collective"}, {"name", "all_gather"}, {"ts", 150}, {"dur", 150}});
  // Rank 1: one step all compute.
  events.push_back(span(1, "step", "step 7", 0, 500));
  events.push_back(span(1, "phase", "forward", 0, 500));
  std::vector<report::StepShares> rows = report::step_shares({{"traceEvents", events}}, "t.json");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].rank == 0);
  CHECK(rows[0].step == 7);
  CHECK(rows[0].step_ms == doctest::Approx(1.0));
  CHECK(rows[0].compute_ms == doctest::Approx(0.7));         // 300 + 400 + 100 us of phases, less the 100 us wait inside
  CHECK(rows[0].exposed_comm_ms == doctest::Approx(0.12));   // both waits
  CHECK(rows[0].idle_ms == doctest::Approx(0.18));           // 0-100, 800-820, 840-850 and 950-1000 us
  CHECK(rows[1].compute_ms == doctest::Approx(0.5));
  CHECK(rows[1].idle_ms == doctest::Approx(0.0));
  std::string svg = report::step_shares_svg(rows, "t");
  CHECK(count(svg, "class=\"compute\"") == 2);  // a bar per rank and step
  CHECK(count(svg, "class=\"exposed\"") == 2);
  CHECK(svg.find("rank 0: compute 70%, exposed communication 12%, idle 18% of 1 steps") != std::string::npos);
}

TEST_CASE("a trace without steps is refused with what to pass instead") {
  nlohmann::json sim = {{"traceEvents", {span(0, "compute", "h.0", 0, 10)}}};
  CHECK_THROWS_WITH_AS(report::step_shares(sim, "sim.json"), "sim.json has no steps: its trace has no \"step\" spans", UserError);
  CHECK_THROWS_WITH_AS(report::step_shares(nlohmann::json(3), "x.json"), "x.json is not a Chrome trace (no traceEvents list)",
                       UserError);
  nlohmann::json typed = {{"traceEvents", {{{"ph", "X"}, {"ts", "0"}, {"dur", 1}, {"pid", 0}, {"name", "step 1"}}}}};
  CHECK_THROWS_WITH_AS(report::step_shares(typed, "t.json"),
                       doctest::Contains("t.json: trace event 0 is not a span (ts and dur numbers, pid an integer"), UserError);
}

TEST_CASE("the metrics file read back, and what is not one") {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("loom_report_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "m.jsonl") << "{\"step\":1,\"loss\":5.5,\"tokens_per_s\":100,\"step_ms\":20,\"peak_mem_bytes\":1048576}\n"
                                 << "{\"step\":2,\"loss\":\"nan\",\"tokens_per_s\":110,\"step_ms\":18,\"peak_mem_bytes\":2097152}\n";
  std::vector<report::MetricsRow> rows = report::read_metrics((dir / "m.jsonl").string());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].loss == 5.5);
  CHECK(std::isnan(rows[1].loss));
  CHECK(rows[1].peak_bytes == 2097152);
  std::ofstream(dir / "bad.jsonl") << "{\"step\":1,\"loss\":5.5,\"tokens_per_s\":100,\"step_ms\":20,\"peak_mem_bytes\":1}\nnot json\n";
  CHECK_THROWS_WITH_AS(report::read_metrics((dir / "bad.jsonl").string()),
                       ((dir / "bad.jsonl").string() + ":2 is not a metrics row (a JSON object with step, loss, tokens_per_s and "
                                                       "peak_mem_bytes)").c_str(),
                       UserError);
  // A row with its fields of the wrong type says which (it was nlohmann's type_error, an internal error).
  std::ofstream(dir / "typed.jsonl") << "{\"step\":\"1\",\"loss\":5.5,\"tokens_per_s\":100,\"peak_mem_bytes\":1}\n";
  CHECK_THROWS_WITH_AS(report::read_metrics((dir / "typed.jsonl").string()),
                       ((dir / "typed.jsonl").string() + ":1: `step` is \"1\", not an integer").c_str(), UserError);
  std::ofstream(dir / "empty.jsonl") << "\n";
  CHECK_THROWS_WITH_AS(report::read_metrics((dir / "empty.jsonl").string()), ((dir / "empty.jsonl").string() + " holds no steps").c_str(),
                       UserError);
  CHECK_THROWS_WITH_AS(report::read_metrics((dir / "none.jsonl").string()),
                       ("cannot read the metrics file '" + (dir / "none.jsonl").string() + "'").c_str(), UserError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a line chart: a polyline per series through its points, ticks on both axes") {
  report::LineChart c;
  c.title = "Loss & more";
  c.series = {{"a", {{1, 2}, {2, 3}, {3, 1}}}, {"b", {{1, 1}}}};
  std::string svg = report::line_chart_svg(c);
  CHECK(count(svg, "<polyline class=\"series\"") == 2);
  CHECK(count(svg, "<circle") == 1);  // b's single point
  CHECK(svg.find("Loss &amp; more") != std::string::npos);
  // 3 points, x from 1 to 3 across the plot's 690 pixels (from 90 to 780), y from 0 to 3 over 258 (310 up to 52).
  CHECK(svg.find("points=\"90.0,138.0 435.0,52.0 780.0,224.0 \"") != std::string::npos);
  // Steps: ticks at whole numbers (1, 2 and 3 here, not 1.5 and 2.5), where their labels say.
  c.whole_x = true;
  std::string whole = report::line_chart_svg(c);
  CHECK(whole.find("text-anchor=\"middle\">1.5<") == std::string::npos);
  CHECK(whole.find("<text x=\"435.0\" y=\"328.0\" text-anchor=\"middle\">2</text>") != std::string::npos);
  CHECK(count(whole, "text-anchor=\"middle\">") == 3 + 1);  // three x ticks and the x label
  c.whole_x = false;
  CHECK(report::line_chart_svg(c).find("text-anchor=\"middle\">1.5<") != std::string::npos);
  c.steps = true;  // each value held until the next point
  CHECK(report::line_chart_svg(c).find("points=\"90.0,138.0 435.0,138.0 435.0,52.0 780.0,52.0 780.0,224.0 780.0,224.0\"") !=
        std::string::npos);
}
