// loom explain: print the instruction IR a schedule lowers to, and the per-pass log, without training.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/data_dirs.h"
#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/profile_planning.h"
#include "backend/cost/profile.h"
#include "backend/cost/step_estimate.h"
#include "cli/commands.h"
#include "cli/workflow.h"
#include "lang/interpreter.h"
#include "models/zoo.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {

std::unique_ptr<Schedule> planned_schedule(const std::string& file, const std::string& model, int nproc, int local_world,
                                           const std::vector<std::string>& sets, const std::string& stdlib, SourceManager& sources) {
  auto sch = std::make_unique<Schedule>(module_tree_of(model), ScheduleContext{nproc, local_world});
  apply_settings(sch->knobs(), sets);
  if (!file.empty()) {
    InterpreterOptions io;
    io.stdlib_dir = stdlib;
    io.print_to = &std::cerr;
    Interpreter(*sch, sources, io).run_file(file);
  }
  sch->knobs().check_overrides_used();
  check_schedule_rules(*sch);
  return sch;
}

ExplainedStep explain_step(const RuntimePlan& plan, const std::string& model, const ExplainOptions& o, const PipelineDebug& debug) {
  check_run_shape("--nproc", "nproc", o.nproc, o.local_world, o.seq, o.micro_batch, o.accum);
  if (o.rank >= o.nproc)
    throw UserError(SourceRange{}, "--rank " + std::to_string(o.rank) + " is not below --nproc " + std::to_string(o.nproc),
                    "ranks are numbered 0.." + std::to_string(o.nproc - 1));
  ExplainedStep step;
  StepOptions options;
  options.grad_norm = o.clip > 0;
  options.accum = plan.accum_or(o.accum);
  options.rank = o.rank;
  // As `loom run` plans: by the limit, without instruction times (so nothing is fused); with a
  // profile, with its measured times and memory: the program a run's re-plan (--replan-at)
  // settles on where each round is switched to and measures what the profile did. Not given,
  // the limit is none, or with a profile the one its run planned within.
  options.memory.limit = std::max<int64_t>(o.memory_limit, 0);
  int64_t micro_batch = plan.micro_batch_or(o.micro_batch);
  ir::OpTrace trace = trace_model(model, {micro_batch, o.seq}, plan.replacements);
  if (!o.profile.empty()) {
    step.profile = load_profile(o.profile);
    check_profile_fits(*step.profile, o.profile, {model, "", o.nproc, 0, micro_batch, o.seq, options.accum});
    options.memory.limit = planning_limit(o.memory_limit, *step.profile);
    // The profile measured the programs the run starts with.
    plan_on_profile(options.memory, *step.profile, lower_stage_programs(plan, trace, o.nproc, options));
  }
  step.program = lower_step(plan, trace, &step.passes, debug, options);
  return step;
}

namespace {

// The IR's text, one instruction per line after its header, each with its estimate, then the sums.
void print_estimate(const ExplainedStep& step, const std::string& profile_path) {
  StepEstimate estimate = estimate_step(step.program, *step.profile, profile_path);
  std::istringstream lines(step.program.to_text());
  std::string line;
  std::getline(lines, line);
  std::cout << line << "\n";
  for (double ms : estimate.instruction_ms) {
    std::getline(lines, line);
    char cost[32] = "";
    if (ms >= 0) std::snprintf(cost, sizeof cost, "~%.3f ms", ms);
    std::printf("%-100s %s\n", line.c_str(), cost);
  }
  auto measured = [](double profiled_ms, double sum_ms) {  // a figure the profile lacks is not a zero
    char text[32] = "not measured";
    if (profiled_ms >= 0) std::snprintf(text, sizeof text, "%.2f ms", sum_ms);
    return std::string(text);
  };
  const ir::Program& program = step.program;
  bool unpacks = std::any_of(program.instrs.begin(), program.instrs.end(), [](const ir::Instr& in) { return in.unpack_bytes > 0; });
  std::printf("# estimate from %s (serial sums; overlap is what --trace shows): forward compute %.2f ms, backward "
              "compute %.2f ms, collectives %.2f ms, optimizer step %s, gradient norm %s, unpacking at waits %s\n",
              profile_path.c_str(), estimate.forward_compute_ms, estimate.backward_compute_ms, estimate.collective_ms,
              measured(step.profile->optimizer_step_ms, estimate.optimizer_ms).c_str(),
              measured(step.profile->grad_norm_ms, estimate.grad_norm_ms).c_str(),
              unpacks ? measured(step.profile->unpack_gb_per_s, estimate.unpack_ms).c_str() : "none");
}

int explain(const ExplainOptions& o) {
  SourceManager sources;
  try {
    std::unique_ptr<Schedule> sch = planned_schedule(o.file, o.model, o.nproc, o.local_world, o.sets, o.stdlib, sources);
    RuntimePlan plan = lower_schedule(*sch);
    ExplainedStep step = explain_step(plan, o.model, o, PipelineDebug::from_environment(std::cerr));
    const ir::Program& program = step.program;
    if (o.json) {
      nlohmann::json j = nlohmann::json::parse(program.to_json());
      j["rank"] = o.rank;
      std::cout << j.dump(1) << "\n";
      return kOk;
    }
    // Every rank runs this same program (SPMD) outside a mesh; in one, each stage and
    // tensor-parallel rank its own.
    if (program.mesh.model_parallel() > 1)
      std::cout << "# the program of rank " << o.rank << " (stage " << program.mesh.stage << ", tp rank " << program.mesh.tp_rank << ")\n";
    else std::cout << "# the program of rank " << o.rank << " (every rank runs the same one)\n";
    for (const ModuleReplacement& r : plan.replacements) std::cout << "# " << r.module << " runs " << r.impl << " (replace)\n";
    std::cout << "# passes (in order):\n";
    for (const PassRecord& r : step.passes)
      std::cout << "#   " << r.pass << ": " << (r.changed ? "changed" : "unchanged") << ", " << r.instructions << " instructions\n";
    if (step.profile) print_estimate(step, o.profile);
    else std::cout << program.to_text();
    return kOk;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), &sources);
    return e.diagnostic().range.known() ? kUserError : kUsageError;
  }
}

}  // namespace

void add_explain(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ExplainOptions>();
  o->stdlib = stdlib_dir();
  CLI::App* c = app.add_subcommand("explain", "Print the instruction IR a schedule lowers to, and the per-pass log (no training)");
  c->add_option("file", o->file, "the .sched file (optional)");
  c->add_option("--model", o->model, "reference model (see `loom models`)")->required();
  c->add_option("--nproc", o->nproc, "ranks the step is planned for")->check(at_least(1));
  c->add_option("--local-world", o->local_world, "ranks per node (default: all on one node)")->check(at_least(0));
  c->add_option("--set", o->sets, "fix a tune() knob: --set name=value (repeatable)");
  c->add_option("--rank", o->rank, "the rank whose program is printed")->check(at_least(0));
  c->add_option("--seq", o->seq, "tokens per sequence: the compute instructions' FLOPs and activations are for one micro-batch")
      ->check(at_least(1));
  c->add_option("--micro-batch", o->micro_batch, "sequences per rank per micro-batch")->check(at_least(1));
  c->add_option("--accum", o->accum, "micro-batches per step: the forward and backward instructions run once for each")
      ->check(at_least(1));
  c->add_option("--clip", o->clip, "the run's --clip: 0 plans no gradient-norm all-reduce (a run with --metrics still measures the norm; plan it with --clip 1)");
  c->add_flag("--json", o->json, "print the IR as JSON (with \"rank\")");
  c->add_option("--profile", o->profile, "a profile from `loom profile --out FILE`: the passes plan with its measured times and memory (the program a "
                  "run's --replan-at settles on where each round is switched to and measures what the profile did) and each instruction is priced");
  as_size(c->add_option("--memory-limit", o->memory_limit,
                        "bytes per rank, e.g. 600MiB: prefetch(budget=auto) and unshard(auto) plan within it, as `loom run "
                        "--memory-limit` does; 0: none; not given: none, or with --profile the limit the profiled run planned within"))
      ->default_str("");  // -1, not given: the text says what that means
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules");
  c->callback([&run, o] { run = [o] { return explain(*o); }; });
}

}  // namespace loom::cli
