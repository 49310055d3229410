#include "backend/train/replan.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include <torch/csrc/autograd/generated/variable_factories.h>

#include "backend/cost/in_step_collectives.h"
#include "backend/cost/instruction_cost.h"
#include "backend/cost/sample_statistics.h"
#include "backend/exec/sharded_executor.h"
#include "backend/instrument/collective_profiler.h"
#include "backend/instrument/op_profiler.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/pass_pipeline.h"
#include "backend/passes/profile_planning.h"
#include "backend/sim/memory_calibration.h"
#include "backend/sim/profile_simulation.h"
#include "backend/sim/simulator.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {
namespace {

// The measurements of this run so far, the same on every rank: the op profiler's figures are
// reduced over the ranks, and the collectives are timed now, on the run's own process groups.
Profile measured_profile(RankRun& r, int64_t steps_done) {
  StepCollectives measured = close_collective_log(r);  // before the figures' own collectives
  Profile profile;
  profile.device = r.cuda ? "cuda" : "cpu";
  profile.measured_steps = static_cast<int>(steps_done - round_start(r.o, steps_done) - 1);
  r.profiler->fill(profile, *r.world);
  CollectiveSweep sweep;
  sweep.repeats = 5;  // a re-plan's sweep: short, its line only has to rank the passes' choices
  profile.collectives = profile_collectives(*r.world, &r.sharded->groups(), nullptr, r.device, sweep);
  set_in_step_scales(r, measured, profile);
  return profile;
}

// Every rank must switch to the same program, or their collectives would not match.
void check_same_on_every_rank(RankRun& r, const ir::Program& program) {
  int64_t hash = static_cast<int64_t>(std::hash<std::string>{}(program.to_json()) >> 1);
  torch::Tensor high = torch::tensor({hash}, torch::dtype(torch::kLong)).to(r.device), low = high.clone();
  comm::all_reduce(*r.world, high, {comm::ReduceOp::Max}).wait();
  comm::all_reduce(*r.world, low, {comm::ReduceOp::Min}).wait();
  if (high.item<int64_t>() != low.item<int64_t>())
    throw InternalError("re-plan: the ranks planned different programs from the same measurements");
}

std::map<std::string, int> collectives_of(const ir::Program& p) {
  std::map<std::string, int> n;
  for (const ir::Instr& in : p.instrs)
    if (ir::issued_collective(in)) ++n[ir::op_name(in.kind)];
  return n;
}

double median_step_ms(const TrainResult& result, size_t from, size_t to) {
  std::vector<double> ms;
  for (size_t i = from; i < std::min(to, result.steps.size()); ++i) ms.push_back(result.steps[i].step_ms);
  return median(std::move(ms));
}

int64_t peak_of(const TrainResult& result, size_t from, size_t to) {
  int64_t peak = 0;
  for (size_t i = from; i < std::min(to, result.steps.size()); ++i) peak = std::max(peak, result.steps[i].peak_bytes);
  return peak;
}

// LOOM_REPLAN_SWITCH=always|never (tests): switch to any changed program, or to none, whatever
// the prediction, to exercise either path.
bool forced_switch(const char* how) {
  const char* forced = std::getenv("LOOM_REPLAN_SWITCH");
  return forced && std::string(forced) == how;
}
bool forced_always() { return forced_switch("always"); }
bool forced_never() { return forced_switch("never"); }

// The re-plan's prediction: both programs simulated on the run's measurements.
struct Prediction {
  SimResult current, next;
};

// `calibration`: the memory the profile measured of the program that ran (r.step), which the
// next program takes too (against it, outside_bytes would take up what the re-plan changes).
Prediction predict(const RankRun& r, const ir::Program& next, const Profile& profile, const std::vector<MemoryCalibration>& calibration) {
  // A profile's cost prices the very programs it was built over: one vector each, kept.
  std::vector<ir::Program> current_stages{*r.step}, next_stages{next};
  const std::string origin = "the run's measurements";
  // Both programs simulated alike, so that the two predictions compare.
  bool each_rank = each_rank_simulable(current_stages, profile) && each_rank_simulable(next_stages, profile);
  return {simulate_on_profile(current_stages, profile, origin, calibration, each_rank),
          simulate_on_profile(next_stages, profile, origin, calibration, each_rank)};
}

// What group `g` of the running program was planned with: a re-plan's, once the run switched to
// its program, else what the run's first program was lowered with.
GroupPlanning planned_with(const RankRun& r, TimedGroup g) {
  auto planned = r.step_planned_with.find(g);
  if (planned != r.step_planned_with.end()) return planned->second;
  return r.step_options.memory.planning();
}

// Which groups of passes this round plans from the measurements, which as the running program
// planned them, and which by sizes still.
std::string describe_round(const std::vector<TimedGroup>& groups, const MemoryPlanning& m) {
  std::string timed, settled, by_sizes;
  for (TimedGroup g : groups) {
    std::string& list = m.settled.count(g) ? settled : g <= m.timed_through ? timed : by_sizes;
    list += (list.empty() ? "" : "; then ") + describe_timed_group(g);
  }
  if (timed.empty()) return "";
  return "  planned from them: " + timed + (settled.empty() ? "" : "; kept as the running program planned them: " + settled) +
         (by_sizes.empty() ? "" : "; by sizes until the next round: " + by_sizes) + "\n";
}

void log_replan(const RankRun& r, const ir::Program& next, const std::vector<PassRecord>& records, const Prediction* predicted,
                bool switching, int64_t steps_done, const TrainResult& result, double in_step_scale, const std::string& round) {
  int64_t first = round_start(r.o, steps_done) + 2;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.2f", in_step_scale);
  std::cout << "loom run: re-plan after step " << steps_done << " on this run's measurements (ops, optimizer step and gradient norm of steps "
            << first << "-" << steps_done << ", collectives timed on its process groups, at " << scale
            << "x as those steps ran them)\n"
            << round;
  if (!predicted) {
    std::cout << "  the measured times keep the program (" << next.instrs.size() << " instructions): no switch\n" << std::flush;
    return;
  }
  std::string differing = first_differing_pass(r.step_passes, records);
  if (!differing.empty())
    std::cout << "  first planned otherwise than the running program by " << differing << " (the passes before it planned as they did)\n";
  std::map<std::string, int> before = collectives_of(*r.step), after = collectives_of(next);
  std::cout << "  program: " << r.step->instrs.size() << " -> " << next.instrs.size() << " instructions;";
  for (const auto& [op, n] : before)
    if (after[op] != n) std::cout << " " << op << " " << n << " -> " << after[op] << ";";
  std::printf("\n  predicted (simulated on the measurements): step %.1f -> %.1f ms, peak %s -> %s", predicted->current.step_s * 1e3,
              predicted->next.step_s * 1e3, format_size(predicted->current.peak_bytes).c_str(),
              format_size(predicted->next.peak_bytes).c_str());
  if (r.step_options.memory.limit > 0) std::printf(" (limit %s)", format_size(r.step_options.memory.limit).c_str());
  size_t done = static_cast<size_t>(steps_done);
  size_t from = static_cast<size_t>(first - 1);
  std::printf("\n  measured this round: step %.1f ms (median of steps %lld-%lld, under the op profiler), peak %s\n",
              median_step_ms(result, from, done), static_cast<long long>(first), static_cast<long long>(steps_done),
              format_size(peak_of(result, from, done)).c_str());
  if (switching) std::printf("  every rank follows it from step %lld\n", static_cast<long long>(steps_done + 1));
  else if (forced_never()) std::printf("  the run keeps its program: LOOM_REPLAN_SWITCH=never\n");
  else std::printf("  it is predicted no faster: the run keeps its program\n");
  std::fflush(stdout);
}

// Whether the run re-plans again after the re-plan after `steps_done`.
bool replans_again(const TrainOptions& o, int64_t steps_done) {
  return o.replan_every > 0 && replans_after(o, steps_done + o.replan_every);
}

// The re-plan after `steps_done` is the loop's round-th (1-based).
int64_t round_of(const TrainOptions& o, int64_t steps_done) {
  return o.replan_every > 0 ? (steps_done - o.replan_at) / o.replan_every + 1 : 1;
}

}  // namespace

std::string nothing_to_replan(const RuntimePlan& plan) {
  if (plan.model_parallel()) return "meshes are not re-planned yet";
  if (plan.factors.optim <= 1) return "the memory-aware passes act on sharded runs only";
  return "";
}

bool can_replan(const TrainOptions& o, const RuntimePlan& plan) {
  return nothing_to_replan(plan).empty() && o.resume.empty() && o.profile_out.empty() && o.record.empty();
}

int64_t default_replan_at(const TrainOptions& o, const RuntimePlan& plan, int64_t memory_limit) {
  constexpr int64_t kAfterStep = 3, kShortestRun = kAfterStep + kInnerRoundSteps;
  if (o.replan_at != kReplanByDefault) return o.replan_at;
  bool timed = !timed_groups_of(plan, memory_limit).empty();
  return can_replan(o, plan) && timed && o.steps >= kShortestRun ? kAfterStep : 0;
}

std::vector<TimedGroup> timed_groups_of(const RuntimePlan& plan, int64_t memory_limit) {
  bool limited = memory_limit > 0;
  std::vector<TimedGroup> groups;
  if ((limited && plan.prefetches_automatically()) || plan.buckets_automatically()) groups.push_back(TimedGroup::Overlap);
  if (limited && plan.unshards_automatically()) groups.push_back(TimedGroup::Unshard);
  return groups;
}

void plan_replan_rounds(TrainOptions& o, const RuntimePlan& plan, int64_t memory_limit) {
  o.replan_at = default_replan_at(o, plan, memory_limit);
  // A run the loop cannot act on does not re-plan, whatever --replan-at says (set-up says why for
  // a mesh or no sharding: nothing_to_replan): a recording or profiling run measures no rounds.
  if (o.replan_at > 0 && !can_replan(o, plan)) o.replan_at = 0;
  // No loop, or --replan-every's rounds.
  if (o.replan_at <= 0 || o.replan_every > 0) return;
  // A round per group, each leaving its program a warm-up step and two to run on (as the first).
  int64_t groups = static_cast<int64_t>(timed_groups_of(plan, memory_limit).size());
  int64_t room = 1 + (o.steps - o.replan_at - kInnerRoundSteps) / kInnerRoundSteps;
  o.replan_rounds = std::max<int64_t>(1, std::min(groups, room));
  o.replan_every = o.replan_rounds > 1 ? kInnerRoundSteps : 0;
}

TimedGroup timed_through(const TrainOptions& o, const std::vector<TimedGroup>& groups, int64_t steps_done) {
  int64_t round = round_of(o, steps_done);
  if (!replans_again(o, steps_done) || round >= static_cast<int64_t>(groups.size())) return kLastTimedGroup;
  return groups[static_cast<size_t>(round - 1)];
}

std::vector<TimedGroup> settled_groups(const TrainOptions& o, const std::vector<TimedGroup>& groups, int64_t steps_done) {
  int64_t round = round_of(o, steps_done);
  if (round > static_cast<int64_t>(groups.size())) return {};  // the outer loop: every group planned again
  return {groups.begin(), groups.begin() + (round - 1)};
}

std::string describe_replan_rounds(const TrainOptions& o, const std::vector<TimedGroup>& groups) {
  std::string when;
  if (o.replan_rounds <= 0) {
    when = "after step " + std::to_string(o.replan_at);
    if (o.replan_every > 0) when += " and every " + std::to_string(o.replan_every) + " steps after it";
  } else {  // the inner loop's rounds, each step named
    when = replans_again(o, o.replan_at) ? "after steps " : "after step ";
    for (int64_t s = o.replan_at; replans_after(o, s); s += o.replan_every) {
      when += (s == o.replan_at ? "" : replans_again(o, s) ? ", " : " and ") + std::to_string(s);
      if (!replans_again(o, s)) break;
    }
  }
  std::string line = "  re-plan: " + when + ", on this run's own measurements (the two-level loop, docs/passes.md; --replan-at 0 keeps "
                     "the program planned from sizes)\n";
  if (groups.size() > 1 && replans_again(o, o.replan_at)) {
    std::string order;
    for (TimedGroup g : groups) order += (order.empty() ? "" : ", then ") + describe_timed_group(g);
    line += "    a round per group of passes, each planned on the measurements of the program the groups before it chose: " + order + "\n";
  }
  return line;
}

bool replans_after(const TrainOptions& o, int64_t steps_done) {
  if (o.replan_at <= 0 || steps_done < o.replan_at || steps_done >= o.steps) return false;
  if (steps_done == o.replan_at) return true;
  if (o.replan_every <= 0 || (steps_done - o.replan_at) % o.replan_every != 0) return false;
  return o.replan_rounds <= 0 || (steps_done - o.replan_at) / o.replan_every < o.replan_rounds;
}

int64_t round_start(const TrainOptions& o, int64_t steps_done) {
  if (steps_done <= o.replan_at || o.replan_every <= 0) return 0;
  return o.replan_at + (steps_done - o.replan_at - 1) / o.replan_every * o.replan_every;
}

bool measures_step(const TrainOptions& o, int64_t step) {
  if (!o.profile_out.empty()) return step >= o.profile_warmup;
  if (o.replan_at <= 0) return false;
  if (step < o.replan_at) return step >= 1;
  // Step index `step` runs in the round ending after round_start + E steps; its first is warm-up.
  // After the last round nothing is measured.
  if (o.replan_every <= 0) return false;
  int64_t start = round_start(o, step + 1);
  return step > start && replans_after(o, start + o.replan_every);
}

bool replan(RankRun& r, int64_t steps_done, const TrainResult& result) {
  if (!r.sharded || r.mesh) throw InternalError("re-plan of a run with nothing to re-plan: " + nothing_to_replan(r.plan));
  Profile profile = measured_profile(r, steps_done);
  r.profiler->reset();  // the next round measures the program it runs
  StepOptions options = r.step_options;
  // The passes plan with the measured times and memory, the memory as the prediction prices it.
  std::vector<MemoryCalibration> calibration = plan_on_profile(options.memory, profile, {*r.step});
  std::vector<TimedGroup> groups = timed_groups_of(r.plan, options.memory.limit);
  options.memory.timed_through = timed_through(r.o, groups, steps_done);
  for (TimedGroup g : settled_groups(r.o, groups, steps_done)) options.memory.settled[g] = planned_with(r, g);
  std::vector<PassRecord> records;
  ir::Program next = lower_step(r.plan, r.trace, &records, PipelineDebug::from_environment(std::cerr), options);
  check_same_on_every_rank(r, next);
  // Switch only to a program the measurements predict faster: every rank predicts alike.
  std::optional<Prediction> predicted;
  if (!(next == *r.step)) {
    try {
      predicted = predict(r, next, profile, calibration);
    } catch (const UserError& e) {  // the measurements do not price a program: keep the one that runs
      if (r.lead()) std::cout << "loom run: re-plan after step " << steps_done << " not applied: " << e.what() << "\n" << std::flush;
      return false;
    }
  }
  bool switching = predicted && !forced_never() && (forced_always() || predicted->next.step_s < predicted->current.step_s);
  double scale = applied_in_step_scale(profile, InStepGroups::All).value_or(1);  // a re-planned run has one stage
  if (r.lead())
    log_replan(r, next, records, predicted ? &*predicted : nullptr, switching, steps_done, result, scale,
               describe_round(groups, options.memory));
  if (!switching) return false;
  r.sharded->replace_program(next);
  r.step = std::move(next);
  r.step_passes = std::move(records);
  for (TimedGroup g : groups)
    if (g <= options.memory.timed_through && !options.memory.settled.count(g))
      r.step_planned_with[g] = options.memory.planning();
  if (r.sharded->moves_optimizer_states() && !r.state_copier) attach_state_copier(r);
  return true;
}

std::string describe_replan_outcome(const TrainResult& result) {
  if (result.replanned_at <= 0 || static_cast<int64_t>(result.steps.size()) <= result.replanned_at) return "";
  size_t k = static_cast<size_t>(result.replan_at), last = static_cast<size_t>(result.replanned_at), n = result.steps.size();
  std::string switches;
  for (int64_t s : result.switched_after) switches += (switches.empty() ? "" : ", ") + std::to_string(s);
  char line[320];
  std::snprintf(line, sizeof line,
                "  re-plan: step %.1f ms (median of steps 2-%zu, profiled) before the first, %.1f ms (steps %zu-%zu) after the "
                "last switch; peak %s -> %s (switched after step%s)\n",
                median_step_ms(result, 1, k), k, median_step_ms(result, last, n), last + 1, n, format_size(peak_of(result, 1, k)).c_str(),
                format_size(peak_of(result, last, n)).c_str(),
                ((result.switched_after.size() > 1 ? "s " : " ") + switches).c_str());
  return line;
}

}  // namespace loom
