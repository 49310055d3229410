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
#include "lang/interpreter.h"
#include "models/zoo.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {
namespace {

struct ExplainOptions {
  std::string file;
  std::string model;
  int nproc = 1;
  int local_world = 0;
  int rank = 0;
  double clip = TrainOptions{}.clip;
  int64_t seq = TrainOptions{}.seq;                  // the micro-batch the compute instructions' FLOPs
  int64_t micro_batch = TrainOptions{}.micro_batch;  // and saved activations are for
  int64_t accum = TrainOptions{}.accum;
  std::vector<std::string> sets;
  bool json = false;
  std::string profile;  // a profile from `loom profile` prices every instruction
  int64_t memory_limit = 0;
  std::string stdlib = stdlib_dir();
};

}  // namespace

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

namespace {

int explain(const ExplainOptions& given) {
  ExplainOptions o = given;  // with the schedule's batch(), once lowered
  SourceManager sources;
  try {
    std::unique_ptr<Schedule> sch = planned_schedule(o.file, o.model, o.nproc, o.local_world, o.sets, o.stdlib, sources);
    if (o.rank >= o.nproc)
      throw UserError(SourceRange{}, "--rank " + std::to_string(o.rank) + " is not below --nproc " + std::to_string(o.nproc),
                      "ranks are numbered 0.." + std::to_string(o.nproc - 1));
    std::vector<PassRecord> records;
    RuntimePlan plan = lower_schedule(*sch);
    o.micro_batch = plan.micro_batch_or(o.micro_batch);
    o.accum = plan.accum_or(o.accum);
    StepOptions step_options;
    step_options.grad_norm = o.clip > 0;
    step_options.accum = o.accum;
    step_options.rank = o.rank;
    // As `loom run` plans: by the limit, without instruction times (so nothing is fused); with a
    // profile, with its measured times and memory: the program a run's re-plan (--replan-at)
    // settles on where each round is switched to and measures what the profile did.
    step_options.memory.limit = o.memory_limit;
    ir::OpTrace trace = trace_model(o.model, {o.micro_batch, o.seq}, plan.replacements);
    std::optional<Profile> profile;
    if (!o.profile.empty()) profile = load_profile(o.profile);
    if (profile)  // the profile measured the programs the run starts with
      plan_on_profile(step_options.memory, *profile, lower_stage_programs(plan, trace, o.nproc, step_options));
    ir::Program program = lower_step(plan, trace, &records, PipelineDebug::from_environment(std::cerr), step_options);
    // Every rank runs this same program (SPMD) outside a mesh; in one, each stage and
    // tensor-parallel rank its own.
    bool mesh = plan.model_parallel();
    if (o.json) {
      nlohmann::json j = nlohmann::json::parse(program.to_json());
      j["rank"] = o.rank;
      std::cout << j.dump(1) << "\n";
      return kOk;
    }
    if (mesh) std::cout << "# the program of rank " << o.rank << " (stage " << program.mesh.stage << ", tp rank " << program.mesh.tp_rank << ")\n";
    else std::cout << "# the program of rank " << o.rank << " (every rank runs the same one)\n";
    // replace(): the compute instructions below are the replacing implementations' (their saved bytes, FLOPs).
    for (const ModuleReplacement& r : plan.replacements) std::cout << "# " << r.module << " runs " << r.impl << " (replace)\n";
    std::cout << "# passes (in order):\n";
    for (auto& r : records)
      std::cout << "#   " << r.pass << ": " << (r.changed ? "changed" : "unchanged") << ", " << r.instructions
                << " instructions\n";
    if (o.profile.empty()) {
      std::cout << program.to_text();
      return kOk;
    }
    StepEstimate estimate = estimate_step(program, *profile, o.profile);
    // The IR's text, one instruction per line after its header, each with its estimate.
    std::istringstream lines(program.to_text());
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
    bool unpacks = std::any_of(program.instrs.begin(), program.instrs.end(), [](const ir::Instr& in) { return in.unpack_bytes > 0; });
    std::printf("# estimate from %s (serial sums; overlap is what --trace shows): forward compute %.2f ms, backward "
                "compute %.2f ms, collectives %.2f ms, optimizer step %s, gradient norm %s, unpacking at waits %s\n",
                o.profile.c_str(), estimate.forward_compute_ms, estimate.backward_compute_ms, estimate.collective_ms,
                measured(profile->optimizer_step_ms, estimate.optimizer_ms).c_str(),
                measured(profile->grad_norm_ms, estimate.grad_norm_ms).c_str(),
                unpacks ? measured(profile->unpack_gb_per_s, estimate.unpack_ms).c_str() : "none");
    return kOk;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), &sources);
    return e.diagnostic().range.known() ? kUserError : kUsageError;
  }
}

}  // namespace

void add_explain(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ExplainOptions>();
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
  c->add_option("--memory-limit", o->memory_limit,
                "bytes per rank, e.g. 600MiB: prefetch(budget=auto) and unshard(auto) plan within it, as `loom run "
                "--memory-limit` does")
      ->transform(byte_size());
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules");
  c->callback([&run, o] { run = [o] { return explain(*o); }; });
}

}  // namespace loom::cli
