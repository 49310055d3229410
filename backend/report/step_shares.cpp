#include "backend/report/step_shares.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "lang/diagnostics.h"

namespace loom::report {
namespace {

struct Interval {
  double start = 0, end = 0;  // microseconds
  int64_t step = 0;           // a step span's number ("step 12")
};

double overlap(const Interval& a, const Interval& b) { return std::max(0.0, std::min(a.end, b.end) - std::max(a.start, b.start)); }

// One rank's spans of the compute track, by category.
struct RankSpans {
  std::vector<Interval> steps, phases, waits;
};

std::map<int, RankSpans> spans_by_rank(const nlohmann::json& trace, const std::string& path) {
  const nlohmann::json* events = trace.is_object() && trace.contains("traceEvents") ? &trace.at("traceEvents") : &trace;
  if (!events->is_array())
    throw UserError(SourceRange{}, path + " is not a Chrome trace (no traceEvents list)", "pass the file `loom run --trace` wrote");
  std::map<int, RankSpans> ranks;
  for (size_t index = 0; index < events->size(); ++index) {
    const nlohmann::json& e = (*events)[index];
    if (!e.is_object() || !e.contains("ph") || e.at("ph") != "X" || !e.contains("ts") || !e.contains("dur") || !e.contains("pid"))
      continue;
    bool typed = e.at("ts").is_number() && e.at("dur").is_number() && e.at("pid").is_number_integer() &&
                 (!e.contains("cat") || e.at("cat").is_string()) && (!e.contains("name") || e.at("name").is_string());
    if (!typed)
      throw UserError(SourceRange{}, path + ": trace event " + std::to_string(index) + " is not a span (ts and dur numbers, " +
                                         "pid an integer, cat and name strings): " + e.dump(),
                      "pass the file `loom run --trace` wrote");
    std::string category = e.value("cat", "");
    double ts = e.at("ts").get<double>();
    Interval span{ts, ts + e.at("dur").get<double>(), 0};
    std::string name = e.value("name", "");
    if (name.rfind("step ", 0) == 0) span.step = std::atoll(name.c_str() + 5);
    RankSpans& r = ranks[e.at("pid").get<int>()];
    if (category == "step") r.steps.push_back(span);
    else if (category == "phase") r.phases.push_back(span);
    else if (category == "wait") r.waits.push_back(span);
  }
  return ranks;
}

// The step's shares from the phases and waits that overlap it.
StepShares shares_of(const Interval& step, const RankSpans& r) {
  StepShares s;
  s.step_ms = (step.end - step.start) / 1000;
  double busy = 0, waiting = 0, waiting_in_phases = 0;
  for (const Interval& ph : r.phases) busy += overlap(ph, step);
  for (const Interval& w : r.waits) {
    double in_step = overlap(w, step);
    if (in_step <= 0) continue;
    waiting += in_step;
    Interval clipped{std::max(w.start, step.start), std::min(w.end, step.end), 0};
    for (const Interval& ph : r.phases) waiting_in_phases += overlap(ph, clipped);
  }
  s.compute_ms = std::max(0.0, busy - waiting_in_phases) / 1000;
  s.exposed_comm_ms = waiting / 1000;
  s.idle_ms = std::max(0.0, s.step_ms - s.compute_ms - s.exposed_comm_ms);
  return s;
}

// The spans that start inside [from, to): `sorted` by start.
std::vector<Interval> starting_within(const std::vector<Interval>& sorted, double from, double to) {
  auto first = std::lower_bound(sorted.begin(), sorted.end(), from, [](const Interval& i, double t) { return i.start < t; });
  auto last = std::lower_bound(first, sorted.end(), to, [](const Interval& i, double t) { return i.start < t; });
  return {first, last};
}

}  // namespace

std::vector<StepShares> step_shares(const nlohmann::json& trace, const std::string& path) {
  std::map<int, RankSpans> ranks = spans_by_rank(trace, path);
  std::vector<StepShares> rows;
  for (auto& [rank, r] : ranks) {
    auto by_start = [](const Interval& a, const Interval& b) { return a.start < b.start; };
    std::sort(r.steps.begin(), r.steps.end(), by_start);
    std::sort(r.phases.begin(), r.phases.end(), by_start);
    std::sort(r.waits.begin(), r.waits.end(), by_start);
    for (size_t k = 0; k < r.steps.size(); ++k) {
      const Interval& step = r.steps[k];
      RankSpans inside{{}, starting_within(r.phases, step.start, step.end), starting_within(r.waits, step.start, step.end)};
      StepShares s = shares_of(step, inside);
      s.rank = rank;
      s.step = step.step > 0 ? step.step : static_cast<int64_t>(k) + 1;
      rows.push_back(s);
    }
  }
  if (rows.empty())
    throw UserError(SourceRange{}, path + " has no steps: its trace has no \"step\" spans",
                    "write the trace with this Loom's `loom run --trace` (traces of `loom simulate` and older runs have none)");
  return rows;
}

}  // namespace loom::report
