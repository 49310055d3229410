// loom tune: sweep a schedule's knobs (tune(...), constrain(...)) with a search strategy, each
// point evaluated by the simulator, by a real run, or by both (sim+run), every trial kept in a
// JSONL database; print the best points, draw them, and write the schedule with its knobs fixed
// at the best (issue #16).
#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/data_dirs.h"
#include "autotuner/confirm.h"
#include "autotuner/heatmap.h"
#include "autotuner/run_evaluator.h"
#include "autotuner/sim_evaluator.h"
#include "autotuner/tuner.h"
#include "backend/cost/cluster.h"
#include "backend/instrument/model_trace.h"
#include "backend/train/loom_executable.h"
#include "backend/train/output_paths.h"
#include "backend/train/scoped_signal.h"
#include "cli/workflow.h"
#include "cli/tune_report.h"
#include "lang/diagnostics.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "lang/schedule_file.h"
#include "lang/trace.h"
#include "lang/value.h"
#include "models/zoo.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {
namespace {

// What --evaluator and --strategy take (the command's option checks and the library's, for Python).
const std::vector<std::string> kEvaluators{"sim", "run", "sim+run"};
const std::vector<std::string> kStrategies{"exhaustive", "random", "coordinate-descent", "successive-halving"};

// The schedule a program (o.build) makes: it may keep the schedule it is given, so it is given
// one it shares, and the tuner goes on with a copy. `declared` as schedule_at's.
std::unique_ptr<Schedule> built_by_program(const TuneCommand& o, std::unique_ptr<Schedule> given, KnobSpace* declared) {
  std::shared_ptr<Schedule> shared = std::move(given);
  try {
    o.build(shared);
  } catch (const ConstraintViolation&) {
    if (declared) *declared = shared->knobs();
    throw;
  }
  return shared->clone();
}

// The schedule at a knob assignment, evaluated quietly (its print()s are not repeated per point);
// `declared` gets its knobs, also when a constraint prunes the point. The whole-schedule rules
// are a point's (its trial fails), not the space's.
std::unique_ptr<Schedule> schedule_at(const TuneCommand& o, int local_world, const std::map<std::string, Value>& values,
                                      KnobSpace* declared = nullptr, bool check_rules = true) {
  auto sch = std::make_unique<Schedule>(module_tree_of(o.model), ScheduleContext{o.nproc, local_world});
  sch->knobs().set_assignment(values);
  SourceManager sources;
  std::ostringstream sink;
  InterpreterOptions io;
  io.stdlib_dir = o.stdlib;
  io.print_to = &sink;
  try {
    if (o.build) sch = built_by_program(o, std::move(sch), declared);
    else Interpreter(*sch, sources, io).run_file(o.file);
  } catch (const ConstraintViolation&) {
    if (declared && sch) *declared = sch->knobs();
    throw;
  }
  if (declared) *declared = sch->knobs();
  if (check_rules) check_schedule_rules(*sch);
  return sch;
}

// What identifies the schedule in the trial database: its file's text, or the program's name.
std::string schedule_key(const TuneCommand& o) {
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(fnv1a(o.build ? "program " + o.name : read_schedule_file(o.file))));
  return key;
}

// Ctrl-C during a sweep of real runs: the running trial's ranks are killed, the database kept.
std::atomic<bool> stop_requested{false};

void on_interrupt(int) { stop_requested = true; }

// Each trial a `loom run` of its own on this machine's ranks, on synthetic tokens.
std::unique_ptr<tune::Evaluator> run_evaluator(const TuneCommand& o, int& local_world) {
  if (o.build)
    throw UserError(SourceRange{}, "a schedule written as a program (" + o.name + ") is tuned by the simulator only: each real "
                                   "run trains a .sched file with its knobs --set",
                    "use evaluator sim, or write the schedule as a .sched file and tune the file");
  local_world = o.local_world > 0 ? o.local_world : o.nproc;
  tune::RunSettings s;
  s.loom = std::filesystem::canonical(loom_executable()).string();
  s.schedule = o.file;
  s.schedule_key = schedule_key(o);
  s.run_args = {"--model", o.model, "--nproc", std::to_string(o.nproc), "--seq", std::to_string(o.seq), "--micro-batch",
                std::to_string(o.micro_batch), "--accum", std::to_string(o.accum), "--data", "synthetic", "--stdlib", o.stdlib};
  s.context = "model=" + o.model + " world=" + std::to_string(o.nproc) + " seq=" + std::to_string(o.seq) +
              " micro_batch=" + std::to_string(o.micro_batch) + " accum=" + std::to_string(o.accum);
  s.steps = o.steps;
  s.world = o.nproc;
  s.timeout_s = o.trial_timeout;
  s.memory_limit = memory_limit_bytes(o.memory_limit);
  return std::make_unique<tune::RunEvaluator>(s, &stop_requested);
}

// The simulator as the evaluator, on a cluster or on this machine as a profile measured it.
std::unique_ptr<tune::Evaluator> sim_evaluator(const TuneCommand& o, int& local_world) {
  check_one_cost_model("--evaluator " + o.evaluator, o.cluster, o.profile);
  tune::Tracer tracer = [model = o.model](const ir::TraceShape& shape, const std::vector<ModuleReplacement>& replacements) {
    return trace_model(model, shape, replacements);
  };
  Cluster cluster = o.profile.empty() ? with_nodes(load_cluster(o.cluster, cluster_dirs()), o.nodes)
                                      : profiled_machine(o.profile, tracer({o.micro_batch, o.seq}, {}),
                                                         {o.model, "", o.nproc, 0, o.micro_batch, o.seq, o.accum}, "loom tune");
  local_world = run_ranks_per_node(cluster, o.nproc, "--nproc", o.local_world, o.profile.empty() ? "--nodes" : "");
  auto cost = std::make_unique<ClusterCost>(cluster, o.precision == "fp32" ? Precision::Fp32 : Precision::Bf16, local_world);
  std::string key = schedule_key(o);
  tune::SimShape shape{o.model, o.nproc, o.seq, o.micro_batch, o.accum, given_memory_limit(o.memory_limit)};
  int lw = local_world;
  tune::ScheduleAt at = [&o, lw](const std::map<std::string, Value>& values) { return schedule_at(o, lw, values); };
  return std::make_unique<tune::SimEvaluator>(key, at, tracer, std::move(cost), shape);
}

// The command line's combinations that cannot sweep, refused before any trial.
void check_sweep(const TuneCommand& o) {
  check_run_shape("--nproc", "world", o.nproc, o.local_world, o.seq, o.micro_batch, o.accum);
  check_choice("--evaluator", "evaluator", o.evaluator, kEvaluators);
  check_choice("--strategy", "strategy", o.strategy, kStrategies);
  check_choice("--precision", "precision", o.precision, kPrecisions);
  check_nodes_on_cluster(o.nodes, o.profile);
  check_at_least("--steps", "steps", o.steps, 3);  // a trial's step time is the median after its first two steps
  if (o.strategy == "successive-halving" && o.evaluator != "run")
    throw UserError(SourceRange{}, "--strategy successive-halving measures points with more and more steps, which only real runs take",
                    "use it with --evaluator run, or another strategy with --evaluator " + o.evaluator);
  if (o.confirm_given && o.evaluator != "sim+run")
    throw UserError(SourceRange{}, "--confirm says how many of the simulator's best points real runs confirm, which only --evaluator sim+run does",
                    "use --evaluator sim+run, or leave out --confirm");
  if (!o.plot_knobs.empty() && o.plot.empty())
    throw UserError(SourceRange{}, "--plot-knobs chooses the axes of --plot's heatmap, and no --plot is given", "add --plot FILE.svg");
  if (!o.plot_knobs.empty() && o.plot_knobs.size() != 2)
    throw UserError(SourceRange{}, "--plot-knobs names " + std::to_string(o.plot_knobs.size()) + " knobs; a heatmap has two axes",
                    "write --plot-knobs X,Y");
}

// --plot's two knobs (--plot-knobs, else the first two the schedule declares), checked against
// the space's first point before any trial runs.
std::vector<std::string> plot_axes(const TuneCommand& o, const tune::SearchSpace& space) {
  std::vector<tune::Point> first = space.points(1);
  std::vector<std::string> declared;
  for (const auto& knob : first.empty() ? tune::Point{} : first[0]) declared.push_back(knob.first);
  if (o.plot_knobs.empty()) {
    if (declared.size() < 2)
      throw UserError(SourceRange{}, "--plot draws the objective over two knobs, and " + o.source() + " declares " +
                                         (declared.empty() ? std::string("none") : "one (" + declared[0] + ")"),
                      "declare a second knob with tune(...), or leave out --plot");
    return {declared[0], declared[1]};
  }
  for (const std::string& name : o.plot_knobs)
    if (std::find(declared.begin(), declared.end(), name) == declared.end())
      throw UserError(SourceRange{}, "--plot-knobs names '" + name + "', which " + o.source() + " does not declare with tune(...)",
                      "name two of its knobs");
  return o.plot_knobs;
}

// The schedule's text with each tune(...) of the file replaced by the best point's value.
std::string fixed_schedule(const TuneCommand& o, const std::string& strategy, int local_world, const tune::Trial& best) {
  KnobSpace declared;
  std::unique_ptr<Schedule> at_best = schedule_at(o, local_world, tune::values_of(best.knobs), &declared);
  std::string text = o.build ? trace_to_sched(*at_best) : read_schedule_file(o.file);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<const Knob*> knobs;
  for (const Knob& k : declared.knobs()) knobs.push_back(&k);
  // Last first, so that earlier ranges stay where they were.
  std::sort(knobs.begin(), knobs.end(), [](const Knob* a, const Knob* b) {
    return std::make_pair(a->where.begin.line, a->where.begin.column) > std::make_pair(b->where.begin.line, b->where.begin.column);
  });
  for (const Knob* k : knobs) {
    if (o.build || k->where.begin.line != k->where.end.line || k->where.file != o.file) continue;  // a program's trace has its values; in an import, or across lines: left
    std::string& line = lines[static_cast<size_t>(k->where.begin.line - 1)];
    size_t from = static_cast<size_t>(k->where.begin.column - 1), to = static_cast<size_t>(k->where.end.column - 1);
    std::string call = line.substr(from, to - from);
    line = line.substr(0, from) + k->value.to_source() + line.substr(to) + "  # tuned: " + call;
  }
  char header[512];
  std::snprintf(header, sizeof header,
                "# Generated by `loom tune` (%s, --evaluator %s) from %s for %s at %d ranks: every knob fixed at the best point\n"
                "# found, %s: %.0f tokens/s per rank, step %.1f ms, peak %s per rank (as the evaluator predicted or measured).\n",
                strategy.c_str(), o.evaluator.c_str(), o.source().c_str(), o.model.c_str(), o.nproc, tune::point_text(best.knobs).c_str(),
                best.objective, best.step_s * 1e3, format_size(best.peak_bytes).c_str());
  std::string out = header;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// The knobs' search space: the schedule evaluated under each assignment (the whole-schedule rules
// are a point's, whose trial fails, not the space's).
tune::SearchSpace search_space(const TuneCommand& o, int local_world) {
  return tune::SearchSpace([&o, local_world](KnobSpace& knobs) {
    KnobSpace declared;
    try {
      schedule_at(o, local_world, knobs.assignment(), &declared, /*check_rules=*/false);
    } catch (const ConstraintViolation&) {
      knobs = declared;
      throw;
    }
    knobs = declared;
  });
}

// --resume: how many trials of this sweep the database holds; a database with none is refused.
void check_resume(const TuneCommand& o, const tune::TrialDatabase& db, const std::string& context) {
  size_t known = db.trials(context).size();
  if (known == 0)
    throw UserError(SourceRange{}, "--resume: " + (o.db.empty() ? std::string("no --db given") : o.db + " holds no trial of this sweep"),
                    "give the --db of the sweep to resume, with the same schedule, model, --nproc, shapes and evaluator");
  std::fprintf(stderr, "loom tune: resuming: %zu trials of this sweep in %s are not evaluated again\n", known, o.db.c_str());
}

// A sweep's outcome, with what its report points at.
struct Sweep {
  std::string strategy;
  tune::TuneResult search;
  std::optional<tune::Confirmation> confirmation;
  std::vector<std::string> axes;  // --plot's knobs
  const tune::Trial* best() const {
    return confirmation ? (confirmation->best ? &*confirmation->best : nullptr) : (search.best ? &*search.best : nullptr);
  }
  TuneReport report(const TuneCommand& o) const {
    return {o.source(), o.model, strategy, o.evaluator, o.nproc, &search, confirmation ? &*confirmation : nullptr, best()};
  }
};

// Runs the sweep and writes --out and --plot.
Sweep run_sweep(const TuneCommand& o) {
  check_sweep(o);
  if (!o.out.empty()) check_output_file(o.out, "--out");
  if (!o.plot.empty()) check_output_file(o.plot, "--plot");
  int local_world = 0;
  // While real runs are trials, Ctrl-C stops the running trial's ranks (the sweep then throws
  // tune::SweepInterrupted); the caller's handler is back afterwards.
  stop_requested = false;
  std::optional<ScopedSignalHandler> interruptible;
  if (o.evaluator == "run") interruptible.emplace(SIGINT, on_interrupt);
  std::unique_ptr<tune::Evaluator> evaluator = o.evaluator == "run" ? run_evaluator(o, local_world) : sim_evaluator(o, local_world);
  tune::SearchSpace space = search_space(o, local_world);
  Sweep sweep;
  sweep.axes = o.plot.empty() ? std::vector<std::string>{} : plot_axes(o, space);
  tune::TrialDatabase db(o.db, &std::cerr);
  if (o.resume) check_resume(o, db, evaluator->context());
  // sim+run: the simulator ranks every point, unless a strategy is named.
  sweep.strategy = o.evaluator == "sim+run" && !o.strategy_given ? "exhaustive" : o.strategy;
  tune::TuneOptions to{sweep.strategy, o.seed, o.max_trials};
  sweep.search = tune::run_tuner(space, *evaluator, db, to, print_tune_progress);
  if (sweep.search.space_size == 0)
    throw UserError(SourceRange{}, o.source() + " has no valid point: every one breaks a constraint", "loosen its constrain(...)");
  if (o.evaluator == "sim+run") {  // real runs of the simulator's best points
    int run_local_world = 0;
    interruptible.emplace(SIGINT, on_interrupt);
    std::unique_ptr<tune::Evaluator> runs = run_evaluator(o, run_local_world);
    sweep.confirmation = tune::confirm_best(sweep.search, o.confirm, *runs, db, to, print_tune_progress);
  }
  const tune::Trial* best = sweep.best();
  if (!o.out.empty() && best) write_whole_file(o.out, fixed_schedule(o, sweep.strategy, local_world, *best));
  if (!o.plot.empty()) {
    std::string title = "loom tune: " + o.model + " at " + std::to_string(o.nproc) + " ranks, " + o.evaluator + ", " + sweep.strategy;
    try {
      write_whole_file(o.plot, tune::tune_heatmap_svg(sweep.search.trials, space.points(), {sweep.axes[0], sweep.axes[1], title, best}));
    } catch (const std::invalid_argument& e) {  // knobs declared in branches no point takes together
      throw UserError(SourceRange{}, std::string("--plot: ") + e.what(), "choose two knobs that some point declares together (--plot-knobs)");
    }
  }
  return sweep;
}

int tune_schedule(const TuneCommand& o) {
  try {
    Sweep sweep = run_sweep(o);
    const tune::Trial* best = sweep.best();
    if (o.json) std::cout << tune_json(sweep.report(o)).dump(1) << "\n";
    else print_tune_table(sweep.report(o));
    if (!o.out.empty() && !o.json) std::printf("  %s %s\n", best ? "wrote the best schedule to" : "no point was feasible: did not write", o.out.c_str());
    if (!o.plot.empty() && !o.json)
      std::printf("  drew the objective over %s and %s in %s\n", sweep.axes[0].c_str(), sweep.axes[1].c_str(), o.plot.c_str());
    return best ? kOk : kUserError;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUserError;
  } catch (const WriteError& e) {
    std::cerr << "loom tune: " << e.what() << "\n";
    return kUserError;
  } catch (const tune::SweepInterrupted&) {
    std::cerr << "loom tune: interrupted; the running trial's ranks were stopped"
              << (o.db.empty() ? "" : ", and every finished trial is in " + o.db + " (--resume goes on)") << "\n";
    return 130;
  }
}

}  // namespace

nlohmann::json tune_json_report(const TuneCommand& o) { return tune_json(run_sweep(o).report(o)); }

void add_tune(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<TuneCommand>();
  o->stdlib = stdlib_dir();
  CLI::App* c = app.add_subcommand("tune",
                                   "Sweep a schedule's tune() knobs with a search strategy, each point evaluated; print the best "
                                   "points and write the schedule with its knobs fixed (docs/tune.md)");
  c->add_option("file", o->file, "the .sched file whose knobs to tune")->required();
  c->add_option("--model", o->model, "reference model (see `loom models`)")->required();
  c->add_option("--nproc", o->nproc, "ranks of the tuned run")->check(at_least(1));
  c->add_option("--local-world", o->local_world, "ranks per node (default: the cluster's devices per node)")->check(at_least(0));
  c->add_option("--seq", o->seq, "tokens per sequence")->check(at_least(1));
  c->add_option("--micro-batch", o->micro_batch, "sequences per rank per micro-batch, where the schedule's batch() sets none")
      ->check(at_least(1));
  c->add_option("--accum", o->accum, "micro-batches per step, where the schedule's batch() sets none")->check(at_least(1));
  c->add_option("--evaluator", o->evaluator,
                "what evaluates a point: sim (the simulator), run (a `loom run` per point on this machine), or sim+run (the "
                "simulator ranks the points, real runs confirm its best --confirm, and the regret is reported)")
      ->check(CLI::IsMember(kEvaluators));
  c->add_option("--confirm", o->confirm, "with --evaluator sim+run: how many of the simulator's best points real runs confirm")
      ->check(at_least(1));
  c->add_option("--steps", o->steps, "with --evaluator run: steps a trial trains (the median after the first two counts)")
      ->check(at_least(3));
  c->add_option("--trial-timeout", o->trial_timeout, "with --evaluator run: seconds before a trial is killed and timed out")
      ->check(at_least(1));
  c->add_option("--strategy", o->strategy,
                "exhaustive, random, coordinate-descent (randomized, slapo.txt §3.4), or successive-halving (real runs: every "
                "point for --steps, the better half for twice as many, ... until one is left)")
      ->check(CLI::IsMember(kStrategies));
  c->add_option("--seed", o->seed, "the random strategies' seed");
  c->add_option("--max-trials", o->max_trials, "evaluate at most this many new points (points in the database are free)");
  as_size(c->add_option("--memory-limit", o->memory_limit, "bytes per rank, e.g. 16GiB: a point above it is infeasible and the "
                                                           "memory-aware passes plan within it (default, with a cluster or a profile: 90% of "
                                                           "the device's memory, as a GPU run plans within; 0: all of it; with --evaluator run: "
                                                           "as loom run takes it)"));
  c->add_option("--cluster", o->cluster, "price points on a cluster by name (clusters/) or a cluster file's path");
  c->add_option("--nodes", o->nodes, kNodesHelp)->check(at_least(0));
  c->add_option("--profile", o->profile, "price points on this machine, as the profile (`loom profile --out FILE`) measured it");
  c->add_option("--precision", o->precision, "the compute precision priced")->check(CLI::IsMember(kPrecisions));
  c->add_option("--db", o->db, "the trial database (JSONL): every trial is appended; points it holds are not evaluated again");
  c->add_flag("--resume", o->resume, "continue a sweep from its --db (refused when the database holds no trial of it)");
  c->add_flag("--json", o->json, "print {\"space_size\", \"evaluations\", \"best\", \"trials\"} as JSON");
  c->add_option("--out", o->out, "write the schedule with every knob fixed at the best point");
  c->add_option("--plot", o->plot, "draw the objective over two knobs as an SVG heatmap (Slapo Fig. 10), infeasible points marked");
  c->add_option("--plot-knobs", o->plot_knobs, "the heatmap's two knobs, X,Y (default: the first two the schedule declares)")
      ->delimiter(',');
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules (import \"stdlib/...\")");
  c->callback([&run, o, c] {
    o->confirm_given = c->count("--confirm") > 0;
    o->strategy_given = c->count("--strategy") > 0;
    run = [o] { return tune_schedule(*o); };
  });
}

}  // namespace loom::cli
