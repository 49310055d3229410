// loom tune: sweep a schedule's knobs (tune(...), constrain(...)) with a search strategy, each
// point evaluated by the simulator, every trial kept in a JSONL database; print the best
// points and write the schedule with its knobs fixed at the best (issue #16).
#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "autotuner/run_evaluator.h"
#include "autotuner/sim_evaluator.h"
#include "autotuner/tuner.h"
#include "backend/cost/cluster.h"
#include "backend/instrument/model_trace.h"
#include "backend/train/output_paths.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "lang/value.h"
#include "models/zoo.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {
namespace {

struct TuneCommand {
  std::string file;
  std::string model;
  int nproc = 1;
  int local_world = 0;
  int64_t seq = TrainOptions{}.seq;
  int64_t micro_batch = TrainOptions{}.micro_batch;
  int64_t accum = TrainOptions{}.accum;
  std::string evaluator = "sim";
  int steps = 6;
  double trial_timeout = 300;
  std::string strategy = "coordinate-descent";
  uint64_t seed = 0;
  size_t max_trials = 0;
  std::string memory_limit;
  std::string cluster;
  std::string profile;
  std::string precision = "bf16";
  std::string db;
  bool resume = false;
  bool json = false;
  std::string out;
  std::string stdlib = LOOM_STDLIB_DIR;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(SourceRange{}, "cannot read schedule file '" + path + "'", "check the path");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
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
    Interpreter(*sch, sources, io).run_file(o.file);
  } catch (const ConstraintViolation&) {
    if (declared) *declared = sch->knobs();
    throw;
  }
  if (declared) *declared = sch->knobs();
  if (check_rules) check_schedule_rules(*sch);
  return sch;
}

std::string schedule_key(const TuneCommand& o) {
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(fnv1a(read_text(o.file))));
  return key;
}

// Ctrl-C during a sweep of real runs: the running trial's ranks are killed, the database kept.
std::atomic<bool> stop_requested{false};

// Each trial a `loom run` of its own on this machine's ranks, on synthetic tokens.
std::unique_ptr<tune::Evaluator> run_evaluator(const TuneCommand& o, int& local_world) {
  local_world = o.local_world > 0 ? o.local_world : o.nproc;
  tune::RunSettings s;
  s.loom = std::filesystem::read_symlink("/proc/self/exe").string();
  s.schedule = o.file;
  s.schedule_key = schedule_key(o);
  s.run_args = {"--model", o.model, "--nproc", std::to_string(o.nproc), "--seq", std::to_string(o.seq), "--micro-batch",
                std::to_string(o.micro_batch), "--accum", std::to_string(o.accum), "--data", "synthetic", "--stdlib", o.stdlib};
  s.context = "model=" + o.model + " world=" + std::to_string(o.nproc) + " seq=" + std::to_string(o.seq) +
              " micro_batch=" + std::to_string(o.micro_batch) + " accum=" + std::to_string(o.accum);
  s.steps = o.steps;
  s.world = o.nproc;
  s.timeout_s = o.trial_timeout;
  s.memory_limit = o.memory_limit.empty() ? 0 : memory_limit_bytes(o.memory_limit);
  char dir[] = "/tmp/loom-tune-XXXXXX";
  s.work_dir = mkdtemp(dir);
  std::signal(SIGINT, [](int) { stop_requested = true; });
  return std::make_unique<tune::RunEvaluator>(s, &stop_requested);
}

std::unique_ptr<tune::Evaluator> make_evaluator(const TuneCommand& o, int& local_world) {
  if (o.evaluator == "run") return run_evaluator(o, local_world);
  if (o.evaluator != "sim")
    throw UserError(SourceRange{}, "--evaluator " + o.evaluator + " is not built yet: the simulator (sim) and real runs (run) evaluate trials today",
                    "use --evaluator sim (with --cluster or --profile) or --evaluator run");
  if (o.cluster.empty() == o.profile.empty())
    throw UserError(SourceRange{}, "--evaluator sim needs one cost model: --cluster NAME or --profile FILE",
                    "name a cluster (" + cluster_names_text(cluster_dirs()) + ") or give a profile from `loom profile --out FILE`");
  tune::Tracer tracer = [model = o.model](const ir::TraceShape& shape, const std::vector<ModuleReplacement>& replacements) {
    return trace_model(model, shape, replacements);
  };
  Cluster cluster = o.profile.empty() ? load_cluster(o.cluster, cluster_dirs())
                                      : profiled_machine(o.profile, tracer({o.micro_batch, o.seq}, {}),
                                                         {o.model, "", o.nproc, 0, o.micro_batch, o.seq, o.accum});
  local_world = run_ranks_per_node(cluster, o.nproc, "--nproc", o.local_world);
  auto cost = std::make_unique<ClusterCost>(cluster, o.precision == "fp32" ? Precision::Fp32 : Precision::Bf16, local_world);
  std::string key = schedule_key(o);
  tune::SimShape shape{o.model, o.nproc, o.seq, o.micro_batch, o.accum, o.memory_limit.empty() ? 0 : memory_limit_bytes(o.memory_limit)};
  int lw = local_world;
  tune::ScheduleAt at = [&o, lw](const std::map<std::string, Value>& values) { return schedule_at(o, lw, values); };
  return std::make_unique<tune::SimEvaluator>(key, at, tracer, std::move(cost), shape);
}

std::string objective_text(const tune::Trial& t) {
  if (!t.ok()) return tune::status_name(t.status);
  char s[32];
  std::snprintf(s, sizeof s, "%.0f tok/s/rank", t.objective);
  return s;
}

void print_progress(const tune::TuneProgress& p) {
  std::string best = p.best ? objective_text(*p.best) + " at " + tune::point_text(p.best->knobs) : "none yet";
  std::fprintf(stderr, "loom tune: trial %zu of %zu  %s  %s%s  (best %s)\n", p.index, p.planned,
               tune::point_text(p.trial->knobs).c_str(), objective_text(*p.trial).c_str(),
               p.trial->from_database ? ", from the database" : "", best.c_str());
}

std::vector<tune::Trial> best_first(const tune::TuneResult& r) {
  std::vector<tune::Trial> ok;
  for (const tune::Trial& t : r.trials)
    if (t.ok()) ok.push_back(t);
  std::stable_sort(ok.begin(), ok.end(), [](const tune::Trial& a, const tune::Trial& b) { return a.objective > b.objective; });
  return ok;
}

void print_table(const TuneCommand& o, const tune::TuneResult& r) {
  size_t failed = 0, infeasible = 0;
  for (const tune::Trial& t : r.trials) {
    failed += t.status == tune::TrialStatus::Failed || t.status == tune::TrialStatus::TimedOut;
    infeasible += t.status == tune::TrialStatus::Infeasible;
  }
  std::printf("loom tune: %s on %s at %d ranks, %s, %s\n", o.file.c_str(), o.model.c_str(), o.nproc, o.strategy.c_str(),
              o.evaluator.c_str());
  std::printf("  %zu points in the space (%zu pruned by constraints); %zu asked for, %zu evaluated now%s; %zu infeasible, %zu failed\n",
              r.space_size, r.pruned, r.trials.size(), r.evaluations, r.budget_spent ? " (--max-trials reached)" : "", infeasible,
              failed);
  std::vector<tune::Trial> ok = best_first(r);
  std::printf("  %-4s %14s %10s %10s  %s\n", "rank", "tok/s/rank", "step ms", "peak", "knobs");
  for (size_t i = 0; i < ok.size() && i < 5; ++i)
    std::printf("  %-4zu %14.0f %10.1f %10s  %s\n", i + 1, ok[i].objective, ok[i].step_s * 1e3, format_size(ok[i].peak_bytes).c_str(),
                tune::point_text(ok[i].knobs).c_str());
}

nlohmann::json trial_json(const tune::Trial& t) {
  return {{"knobs", nlohmann::json::parse(tune::knobs_json(t.knobs))},
          {"objective", t.objective},
          {"status", tune::status_name(t.status)},
          {"step_s", t.step_s},
          {"peak_bytes", t.peak_bytes},
          {"message", t.message},
          {"from_database", t.from_database}};
}

void print_json(const tune::TuneResult& r) {
  nlohmann::json trials = nlohmann::json::array();
  for (const tune::Trial& t : r.trials) trials.push_back(trial_json(t));
  nlohmann::json best = r.best ? nlohmann::json{{"knobs", nlohmann::json::parse(tune::knobs_json(r.best->knobs))},
                                                {"objective", r.best->objective},
                                                {"step_s", r.best->step_s},
                                                {"peak_bytes", r.best->peak_bytes}}
                               : nlohmann::json(nullptr);
  std::cout << nlohmann::json{{"space_size", r.space_size}, {"pruned", r.pruned},     {"evaluations", r.evaluations},
                              {"budget_spent", r.budget_spent}, {"best", best}, {"trials", trials}}
                   .dump(1)
            << "\n";
}

// The schedule's text with each tune(...) of the file replaced by the best point's value.
std::string fixed_schedule(const TuneCommand& o, int local_world, const tune::Trial& best) {
  KnobSpace declared;
  schedule_at(o, local_world, tune::values_of(best.knobs), &declared);
  std::string text = read_text(o.file);
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
    if (k->where.begin.line != k->where.end.line || k->where.file != o.file) continue;  // in an import, or across lines: left
    std::string& line = lines[static_cast<size_t>(k->where.begin.line - 1)];
    size_t from = static_cast<size_t>(k->where.begin.column - 1), to = static_cast<size_t>(k->where.end.column - 1);
    std::string call = line.substr(from, to - from);
    line = line.substr(0, from) + k->value.to_source() + line.substr(to) + "  # tuned: " + call;
  }
  char header[512];
  std::snprintf(header, sizeof header,
                "# Generated by `loom tune` (%s, --evaluator %s) from %s for %s at %d ranks: every knob fixed at the best point\n"
                "# found, %s: %.0f tokens/s per rank, step %.1f ms, peak %s per rank (as the evaluator predicted or measured).\n",
                o.strategy.c_str(), o.evaluator.c_str(), o.file.c_str(), o.model.c_str(), o.nproc, tune::point_text(best.knobs).c_str(),
                best.objective, best.step_s * 1e3, format_size(best.peak_bytes).c_str());
  std::string out = header;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

int tune_schedule(const TuneCommand& o) {
  try {
    if (!o.out.empty()) check_output_file(o.out, "--out");
    int local_world = 0;
    std::unique_ptr<tune::Evaluator> evaluator = make_evaluator(o, local_world);
    tune::SearchSpace space([&o, local_world](KnobSpace& knobs) {
      KnobSpace declared;
      try {
        schedule_at(o, local_world, knobs.assignment(), &declared, /*check_rules=*/false);
      } catch (const ConstraintViolation&) {
        knobs = declared;
        throw;
      }
      knobs = declared;
    });
    tune::TrialDatabase db(o.db, &std::cerr);
    if (o.resume) {
      size_t known = db.trials(evaluator->context()).size();
      if (known == 0)
        throw UserError(SourceRange{}, "--resume: " + (o.db.empty() ? std::string("no --db given") : o.db + " holds no trial of this sweep"),
                        "give the --db of the sweep to resume, with the same schedule, model, --nproc, shapes and evaluator");
      std::fprintf(stderr, "loom tune: resuming: %zu trials of this sweep in %s are not evaluated again\n", known, o.db.c_str());
    }
    tune::TuneOptions to{o.strategy, o.seed, o.max_trials};
    tune::TuneResult r = tune::run_tuner(space, *evaluator, db, to, print_progress);
    if (r.space_size == 0)
      throw UserError(SourceRange{}, o.file + " has no valid point: every one breaks a constraint", "loosen its constrain(...)");
    if (!o.out.empty() && r.best) write_whole_file(o.out, fixed_schedule(o, local_world, *r.best));
    if (o.json) print_json(r);
    else print_table(o, r);
    if (!o.out.empty() && !o.json) std::printf("  %s %s\n", r.best ? "wrote the best schedule to" : "no point was feasible: did not write",
                                               o.out.c_str());
    return r.best ? kOk : kUserError;
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

void add_tune(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<TuneCommand>();
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
                "what evaluates a point: sim (the simulator), run (a `loom run` per point on this machine); sim+run is not built yet")
      ->check(CLI::IsMember({"sim", "run", "sim+run"}));
  c->add_option("--steps", o->steps, "with --evaluator run: steps a trial trains (the median after the first two counts)")
      ->check(at_least(3));
  c->add_option("--trial-timeout", o->trial_timeout, "with --evaluator run: seconds before a trial is killed and timed out")
      ->check(at_least(1));
  c->add_option("--strategy", o->strategy, "exhaustive, random or coordinate-descent (randomized, slapo.txt §3.4)")
      ->check(CLI::IsMember({"exhaustive", "random", "coordinate-descent"}));
  c->add_option("--seed", o->seed, "the random strategies' seed");
  c->add_option("--max-trials", o->max_trials, "evaluate at most this many new points (points in the database are free)");
  c->add_option("--memory-limit", o->memory_limit, "bytes per rank, e.g. 16GiB: a point above it is infeasible (default: the "
                                                   "cluster device's memory)");
  c->add_option("--cluster", o->cluster, "price points on a cluster by name (clusters/) or a cluster file's path");
  c->add_option("--profile", o->profile, "price points on this machine, as the profile (`loom profile --out FILE`) measured it");
  c->add_option("--precision", o->precision, "the compute precision priced")->check(CLI::IsMember({"bf16", "fp32"}));
  c->add_option("--db", o->db, "the trial database (JSONL): every trial is appended; points it holds are not evaluated again");
  c->add_flag("--resume", o->resume, "continue a sweep from its --db (refused when the database holds no trial of it)");
  c->add_flag("--json", o->json, "print {\"space_size\", \"evaluations\", \"best\", \"trials\"} as JSON");
  c->add_option("--out", o->out, "write the schedule with every knob fixed at the best point");
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules (import \"stdlib/...\")");
  c->callback([&run, o] { run = [o] { return tune_schedule(*o); }; });
}

}  // namespace loom::cli
