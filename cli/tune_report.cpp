#include "cli/tune_report.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "autotuner/database.h"
#include "lang/value.h"

namespace loom::cli {
namespace {

std::string objective_text(const tune::Trial& t) {
  if (!t.ok()) return tune::status_name(t.status);
  char s[32];
  std::snprintf(s, sizeof s, "%.0f tok/s/rank", t.objective);
  return s;
}

// The Ok trials, those measured with the most steps first (successive halving's last rung), each
// group by objective.
std::vector<tune::Trial> best_first(const std::vector<tune::Trial>& trials) {
  std::vector<tune::Trial> ok;
  for (const tune::Trial& t : trials)
    if (t.ok()) ok.push_back(t);
  std::stable_sort(ok.begin(), ok.end(), [](const tune::Trial& a, const tune::Trial& b) {
    return a.steps != b.steps ? a.steps > b.steps : a.objective > b.objective;
  });
  return ok;
}

void print_confirmation(const tune::Confirmation& c) {
  std::printf("  confirmed by real runs (%zu run now): the simulator's best %zu, predicted and measured%s\n", c.evaluations, c.points.size(),
              c.budget_spent ? " (--max-trials reached)" : "");
  std::printf("  %-4s %14s %14s %10s  %s\n", "sim", "predicted", "measured", "status", "knobs");
  for (size_t i = 0; i < c.points.size(); ++i)
    std::printf("  %-4zu %14.0f %14.0f %10s  %s\n", i + 1, c.points[i].predicted.objective, c.points[i].measured.objective,
                tune::status_name(c.points[i].measured.status), tune::point_text(c.points[i].predicted.knobs).c_str());
  if (!c.best) std::printf("  no confirming run was ok\n");
  else if (!c.points[0].measured.ok())
    std::printf("  regret: 100%%: the simulator's choice did not run (%s); the measured best is %s\n",
                tune::status_name(c.points[0].measured.status), tune::point_text(c.best->knobs).c_str());
  else
    std::printf("  regret: the simulator's choice ran %.1f%% slower than the measured best (%s)\n", 100 * *c.regret,
                tune::point_text(c.best->knobs).c_str());
}

nlohmann::json trial_json(const tune::Trial& t) {
  return {{"knobs", nlohmann::json::parse(tune::knobs_json(t.knobs))},
          {"objective", t.objective},
          {"status", tune::status_name(t.status)},
          {"step_s", t.step_s},
          {"peak_bytes", t.peak_bytes},
          {"steps", t.steps},
          {"message", t.message},
          {"from_database", t.from_database}};
}

}  // namespace

void print_tune_progress(const tune::TuneProgress& p) {
  std::string best = p.best ? objective_text(*p.best) + " at " + tune::point_text(p.best->knobs) : "none yet";
  std::string steps = p.trial->steps > 0 ? ", " + std::to_string(p.trial->steps) + " steps" : "";
  std::fprintf(stderr, "loom tune: trial %zu of %zu  %s  %s%s%s  (best %s)\n", p.index, p.planned, tune::point_text(p.trial->knobs).c_str(),
               objective_text(*p.trial).c_str(), steps.c_str(), p.trial->from_database ? ", from the database" : "", best.c_str());
}

void print_tune_table(const TuneReport& r) {
  const tune::TuneResult& s = *r.search;
  size_t failed = 0, infeasible = 0;
  for (const tune::Trial& t : s.trials) {
    failed += t.status == tune::TrialStatus::Failed || t.status == tune::TrialStatus::TimedOut;
    infeasible += t.status == tune::TrialStatus::Infeasible;
  }
  std::printf("loom tune: %s on %s at %d ranks, %s, %s\n", r.file.c_str(), r.model.c_str(), r.nproc, r.strategy.c_str(), r.evaluator.c_str());
  std::printf("  %zu points in the space (%zu pruned by constraints); %zu asked for, %zu evaluated now%s; %zu infeasible, %zu failed\n",
              s.space_size, s.pruned, s.trials.size(), s.evaluations, s.budget_spent ? " (--max-trials reached)" : "", infeasible, failed);
  std::vector<tune::Trial> ok = best_first(s.trials);
  std::printf("  %-4s %14s %10s %10s  %s\n", "rank", "tok/s/rank", "step ms", "peak", "knobs");
  for (size_t i = 0; i < ok.size() && i < 5; ++i)
    std::printf("  %-4zu %14.0f %10.1f %10s  %s%s\n", i + 1, ok[i].objective, ok[i].step_s * 1e3, format_size(ok[i].peak_bytes).c_str(),
                tune::point_text(ok[i].knobs).c_str(), ok[i].steps > 0 ? (" (" + std::to_string(ok[i].steps) + " steps)").c_str() : "");
  if (r.confirmation) print_confirmation(*r.confirmation);
}

nlohmann::json tune_json(const TuneReport& r) {
  const tune::TuneResult& s = *r.search;
  nlohmann::json trials = nlohmann::json::array();
  for (const tune::Trial& t : s.trials) trials.push_back(trial_json(t));
  nlohmann::json best = r.best ? nlohmann::json{{"knobs", nlohmann::json::parse(tune::knobs_json(r.best->knobs))},
                                                {"objective", r.best->objective},
                                                {"step_s", r.best->step_s},
                                                {"peak_bytes", r.best->peak_bytes}}
                               : nlohmann::json(nullptr);
  nlohmann::json out{{"space_size", s.space_size}, {"pruned", s.pruned}, {"evaluations", s.evaluations},
                     {"budget_spent", s.budget_spent}, {"best", best}, {"trials", trials}};
  if (r.confirmation) {
    nlohmann::json confirmed = nlohmann::json::array();
    for (const tune::Confirmed& c : r.confirmation->points) {
      nlohmann::json j = trial_json(c.measured);
      j["predicted_objective"] = c.predicted.objective;
      j["predicted_step_s"] = c.predicted.step_s;
      confirmed.push_back(j);
    }
    out["confirmed"] = confirmed;
    out["regret"] = r.confirmation->regret ? nlohmann::json(*r.confirmation->regret) : nlohmann::json(nullptr);
  }
  return out;
}

}  // namespace loom::cli
