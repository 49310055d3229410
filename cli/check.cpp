// loom check: parse, evaluate and validate a schedule against a reference model.
#include <fstream>
#include <iostream>
#include <sstream>
#include <tuple>

#include "backend/data_dirs.h"
#include "cli/commands.h"
#include "backend/instrument/model_trace.h"
#include "backend/train/output_paths.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/sim/memory_walk.h"
#include "lang/interpreter.h"
#include "lang/trace.h"
#include "verifier/schedule_rules.h"
#include "models/zoo.h"

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

// The schedule's step under --memory-limit, as `loom simulate` and `loom run` predict its memory:
// the step's programs lowered at the given micro-batch on the meta device (no weights), the
// memory-aware passes planning within the limit as a run's first program does (by sizes), and
// each stage's memory walked instruction by instruction (backend/sim/memory_walk.h). Throws
// UserError, naming the highest stage's peak, when it is over the limit; returns that peak.
int64_t check_step_memory(const CheckOptions& o, const RuntimePlan& plan, int64_t limit) {
  int64_t micro_batch = plan.micro_batch_or(o.micro_batch), accum = plan.accum_or(o.accum);
  StepOptions options;
  options.accum = accum;
  options.memory.limit = limit;
  ir::OpTrace trace = trace_model(o.model, {micro_batch, o.seq}, plan.replacements);
  std::vector<ir::Program> stages = lower_stage_programs(plan, trace, o.world, options);
  memory::WalkPeak highest;
  size_t stage = 0;
  for (size_t s = 0; s < stages.size(); ++s)
    if (memory::WalkPeak peak = memory::walk_peak(stages[s], options.memory.state_bytes, nullptr); peak.bytes > highest.bytes)
      std::tie(highest, stage) = std::make_pair(peak, s);
  if (highest.bytes <= limit) return highest.bytes;
  const ir::Program& p = stages[stage];
  throw UserError(SourceRange{},
                  "the step needs " + format_size(highest.bytes) + " per rank at its peak, above --memory-limit " + format_size(limit) +
                      ": " + (stages.size() > 1 ? "stage " + std::to_string(stage) + ", " : "") + "instruction " +
                      instruction_line(p, highest.instr) + ", at " + std::to_string(accum) + " micro-batch(es) of " +
                      std::to_string(micro_batch) + " x " + std::to_string(o.seq) + " tokens (" +
                      format_size(memory::resident_bytes(p, options.memory.state_bytes)) +
                      " of it held all step: the model states on the device and the gradient reducer's buffers; the rest gathered "
                      "parameters, gradients and saved activations, as `loom simulate` walks the step)",
                  "shard more (sch.zero(stage=3), or shard_states), checkpoint() the blocks, offload(\"optimizer\", budget=auto), "
                  "or a smaller --micro-batch or --seq; `loom simulate --memory-plot FILE.svg` draws where the memory goes");
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
    int64_t peak = rules.memory_limit > 0 ? check_step_memory(o, plan, rules.memory_limit) : 0;
    if (o.print) std::cout << trace_to_sched(sch);
    if (!o.trace_json.empty()) {
      check_output_file(o.trace_json, "--trace-json");
      try {
        write_whole_file(o.trace_json, trace_to_json(sch) + "\n");
      } catch (const WriteError& e) {
        throw UserError(SourceRange{}, std::string("--trace-json: ") + e.what(), "free space, or choose another file");
      }
    }
    if (!o.json) {
      std::cerr << o.file << ": ok (" << plural(sch.trace().size(), "directive") << ", " << plural(sch.warnings().size(), "warning") << ") for "
                << o.model << " at world " << o.world;
      if (peak > 0) std::cerr << ", the step's peak " << format_size(peak) << " within --memory-limit " << format_size(rules.memory_limit);
      std::cerr << "\n";
    }
    return kOk;
  } catch (const UserError& e) {
    emit(e.diagnostic(), sources, o.json);
    return kUserError;
  }
}

}  // namespace

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
  c->add_option("--memory-limit", o->memory_limit,
                "bytes allowed per rank (e.g. 80GiB): schedules whose model states need more (4/s_p + 4/s_g + 8/s_os bytes per parameter, "
                "lins.txt's formula with the runtime's bytes), or whose step peaks above it as `loom simulate` walks it (states, gathered "
                "parameters, gradients, saved activations; at --micro-batch x --seq), are errors")
      ->transform(byte_size());
  c->add_option("--micro-batch", o->micro_batch, "sequences per rank per micro-batch, for --memory-limit's step")->check(at_least(1));
  c->add_option("--seq", o->seq, "tokens per sequence, for --memory-limit's step")->check(at_least(1));
  c->add_option("--accum", o->accum, "micro-batches per step, for --memory-limit's step")->check(at_least(1));
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules (import \"stdlib/...\")");
  c->callback([&run, o] { run = [o] { return run_check(*o); }; });
}

}  // namespace loom::cli
