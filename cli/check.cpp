// loom check: parse, evaluate and validate a schedule against a reference model.
#include <fstream>
#include <iostream>
#include <sstream>

#include "backend/data_dirs.h"
#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/sim/step_memory_check.h"
#include "backend/train/output_paths.h"
#include "cli/commands.h"
#include "cli/workflow.h"
#include "lang/interpreter.h"
#include "lang/trace.h"
#include "models/zoo.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {
namespace {

struct CheckOptions {
  std::string file;
  std::string model;
  int world = 1;
  int local_world = 0;
  std::vector<std::string> sets;
  bool print = false;
  bool json = false;
  std::string trace_json;
  std::string memory_limit;
  int64_t micro_batch = TrainOptions{}.micro_batch;  // the step --memory-limit is checked at
  int64_t seq = TrainOptions{}.seq;
  int64_t accum = TrainOptions{}.accum;
  bool step_shape_given = false;  // any of the three
  std::string stdlib = stdlib_dir();
};

std::string plural(size_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

void emit(const Diagnostic& d, const SourceManager& sources, bool json) {
  if (json) std::cout << render_json(d) << "\n";
  else std::cerr << render(d, &sources);
}

// A warning that one call raises for each module it selects (a prefetch on every block) shows
// once, followed by a note naming how many more modules it concerns.
void emit_warnings(const std::vector<Diagnostic>& warnings, const SourceManager& sources, bool json) {
  std::vector<bool> shown(warnings.size(), false);
  for (size_t i = 0; i < warnings.size(); ++i) {
    if (shown[i]) continue;
    emit(warnings[i], sources, json);
    size_t again = 0;
    for (size_t j = i + 1; j < warnings.size(); ++j) {
      bool same_call = warnings[j].range.to_string() == warnings[i].range.to_string() && warnings[j].hint == warnings[i].hint;
      if (shown[j] || !same_call) continue;
      shown[j] = true;
      ++again;
      if (json) emit(warnings[j], sources, json);
    }
    if (again > 0 && !json)
      std::cerr << "note: the same warning for " << plural(again, "more module") << " of this selection\n";
  }
}

// The `loom simulate` command line that draws the step check_step_memory walks: the same
// schedule, knobs, ranks, step and limit, priced on a cluster the user names.
std::string draw_command(const CheckOptions& o, const RuntimePlan& plan) {
  std::string command = "loom simulate " + o.file + " --model " + o.model + " --nproc " + std::to_string(o.world);
  if (o.local_world > 0) command += " --local-world " + std::to_string(o.local_world);
  for (const std::string& set : o.sets) command += " --set " + set;
  if (plan.micro_batch <= 0) command += " --micro-batch " + std::to_string(o.micro_batch);
  command += " --seq " + std::to_string(o.seq);
  if (plan.accum <= 0) command += " --accum " + std::to_string(o.accum);
  return command + " --cluster NAME --memory-limit " + o.memory_limit + " --memory-plot memory.svg";
}

// The schedule's step under --memory-limit (check_step_memory_of), at the command's micro-batch
// or the schedule's batch(). Returns the ok line's words on the step.
std::string checked_step_text(const CheckOptions& o, const RuntimePlan& plan, int64_t limit) {
  CheckedStep step = CheckedStep::of(plan, limit, o.micro_batch, o.seq, o.accum);
  step.draw_command = draw_command(o, plan);
  StagePeak peak = check_step_memory_of(plan, o.model, o.world, step);
  return ", the step's peak " + format_size(peak.bytes) + " within --memory-limit " + format_size(limit) + " at " + step.describe();
}

int run_check(const CheckOptions& o) {
  SourceManager sources;
  std::shared_ptr<const ModuleTree> tree;
  try {
    tree = module_tree_of(o.model);
  } catch (const UserError& e) {
    emit(e.diagnostic(), sources, o.json);
    return kUsageError;
  }
  try {
    Schedule sch(tree, ScheduleContext{o.world, o.local_world});
    try {
      apply_settings(sch.knobs(), o.sets);
    } catch (const UserError& e) {
      emit(e.diagnostic(), sources, o.json);
      return kUsageError;
    }
    InterpreterOptions opts;
    opts.stdlib_dir = o.stdlib;
    opts.print_to = o.json ? &std::cerr : &std::cout;
    Interpreter interp(sch, sources, opts);
    interp.run_file(o.file);
    sch.knobs().check_overrides_used();
    RuleOptions rules;
    rules.memory_limit = memory_limit_bytes(o.memory_limit);
    check_schedule_rules(sch, rules);
    emit_warnings(sch.warnings(), sources, o.json);
    RuntimePlan plan = lower_schedule(sch);  // what `loom run` cannot honour yet is an error here too, with run's message
    std::string step_memory = rules.memory_limit > 0 ? checked_step_text(o, plan, rules.memory_limit) : "";
    if (rules.memory_limit <= 0 && o.step_shape_given && !o.json)
      std::cerr << "note: --micro-batch, --seq and --accum shape the step --memory-limit checks; without a limit they are not used\n";
    if (o.print) std::cout << trace_to_sched(sch);
    if (!o.trace_json.empty()) {
      check_output_file(o.trace_json, "--trace-json");
      write_output_file(o.trace_json, {trace_to_json(sch), "\n"}, "--trace-json", "free space, or choose another file");
    }
    if (!o.json)
      std::cerr << o.file << ": ok (" << plural(sch.trace().size(), "directive") << ", " << plural(sch.warnings().size(), "warning") << ") for "
                << o.model << " at world " << o.world << step_memory << "\n";
    return kOk;
  } catch (const UserError& e) {
    emit(e.diagnostic(), sources, o.json);
    return kUserError;
  }
}

}  // namespace

StagePeak check_step_memory_of(const RuntimePlan& plan, const std::string& model, int world, const CheckedStep& step) {
  StepOptions options;
  options.accum = step.accum;
  options.memory.limit = step.limit;
  ir::OpTrace trace = trace_model(model, {step.micro_batch, step.seq}, plan.replacements);
  return loom::check_step_memory(lower_stage_programs(plan, trace, world, options), plan, step, options.memory.state_bytes);
}

void add_check(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* c = app.add_subcommand("check", "Parse, evaluate and validate a schedule against a model; print its directive trace");
  c->add_option("file", o->file, "the .sched file")->required();
  c->add_option("--model", o->model, "reference model, e.g. gpt2, llama-7b (see `loom models`)")->required();
  c->add_option("--world", o->world, "total number of ranks the schedule is written for")->check(at_least(1));
  c->add_option("--local-world", o->local_world, "ranks per node (default: all ranks on one node)")->check(at_least(0));
  c->add_option("--set", o->sets, "fix a tune() knob: --set micro_batch=4 (repeatable)");
  c->add_flag("--print", o->print, "print the directive trace as canonical .sched text");
  c->add_flag("--json", o->json, "emit diagnostics as JSON objects, one per line, on stdout");
  c->add_option("--trace-json", o->trace_json, "write the directive trace as JSON to this file");
  as_size(c->add_option("--memory-limit", o->memory_limit,
                        "bytes allowed per rank (e.g. 80GiB): schedules whose model states need more (4/s_p + 4/s_g + 8/s_os bytes per parameter, "
                        "lins.txt's formula with the runtime's bytes), or whose step peaks above it as `loom simulate` walks it (states, gathered "
                        "parameters, gradients, saved activations; at --micro-batch x --seq), are errors"));
  std::vector<CLI::Option*> shape = {
      c->add_option("--micro-batch", o->micro_batch, "sequences per rank per micro-batch of the step --memory-limit checks (default: loom run's)")
          ->check(at_least(1)),
      c->add_option("--seq", o->seq, "tokens per sequence of the step --memory-limit checks (default: loom run's)")->check(at_least(1)),
      c->add_option("--accum", o->accum, "micro-batches per step of the step --memory-limit checks")->check(at_least(1))};
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules (import \"stdlib/...\")");
  c->callback([&run, o, shape] {
    for (CLI::Option* given : shape) o->step_shape_given = o->step_shape_given || given->count() > 0;
    run = [o] { return run_check(*o); };
  });
}

}  // namespace loom::cli
