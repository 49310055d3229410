// The commands as library calls (the Python module's functions): what `loom explain`, `loom
// simulate`, `loom plan`, `loom verify` and `loom tune` compute, returned instead of printed (as
// the JSON their --json prints, or explain's program). Each throws UserError for the user's
// mistakes, as the command reports them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cost/profile.h"
#include "backend/ir/ir.h"
#include "backend/lower/runtime_plan.h"
#include "backend/passes/pass_pipeline.h"
#include "backend/sim/step_memory_check.h"
#include "cli/commands.h"

namespace loom {
class Schedule;
}

namespace loom::cli {

// loom explain's settings.
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
  int64_t memory_limit = -1;  // -1: not given (none, or with a profile the limit its run planned within); 0: none
  std::string stdlib;
};
// What `loom explain` shows of one rank's step.
struct ExplainedStep {
  ir::Program program;
  std::vector<PassRecord> passes;  // the pipeline's log, in order
  std::optional<Profile> profile;  // with options.profile: what the passes planned with (estimate_step prices the program on it)
};
// The program rank options.rank runs under `plan` (lower_schedule's, of a schedule of `model`),
// lowered as `loom run` plans it: by the memory limit without instruction times, or with a
// profile on its measured times and memory. Of `options` it reads nproc, rank, clip, seq,
// micro_batch, accum, profile and memory_limit; debug logs the passes.
ExplainedStep explain_step(const RuntimePlan& plan, const std::string& model, const ExplainOptions& options,
                           const PipelineDebug& debug = {});

// loom simulate's settings.
struct SimulateOptions {
  std::string file;
  std::string model;
  int nproc = 1;
  int local_world = 0;
  int64_t seq = TrainOptions{}.seq;
  int64_t micro_batch = TrainOptions{}.micro_batch;
  int64_t accum = TrainOptions{}.accum;
  double clip = TrainOptions{}.clip;
  std::vector<std::string> sets;
  std::string cluster;
  int nodes = 0;  // --nodes: the cluster at this many nodes of its kind (0: as its file says)
  std::string profile;
  std::string precision = "bf16";
  bool json = false;
  std::string trace;
  std::string memory_plot;
  std::string save_cluster;
  int64_t memory_limit = -1;  // -1: not given (on a cluster its device's default); 0: none
  bool replanned = false;  // with a profile: the passes plan with its times and memory (what --replan-at settles on where each round is switched to)
  bool representative = false;  // with a profile: one rank per stage at the slowest rank's op times, not each rank
  std::string stdlib;
};
// `schedule` (its model, world and ranks per node) simulated as `loom simulate --json` reports it,
// its memory timeline drawn to options.memory_plot where one is named; the file, the knob
// settings and the other output files of `options` are not used.
nlohmann::json simulate_json(const Schedule& schedule, const SimulateOptions& options);

// The step `loom check --memory-limit` walks (docs/verify.md): `plan`'s programs, of a schedule
// of `model` at `world` ranks, lowered on the meta device (no weights) at `step`'s micro-batch,
// sequence and accumulation (CheckedStep::of: the schedule's batch() where it sets them), the
// memory-aware passes planning within `step.limit` by sizes, as a run's first program does (no
// instruction times), then each stage walked as the simulator walks it. Throws UserError when
// the highest stage is over the limit, naming it, the instruction at it, what would lower it and
// `step.draw_command`.
StagePeak check_step_memory_of(const RuntimePlan& plan, const std::string& model, int world, const CheckedStep& step);

// loom plan's settings.
struct PlanOptions {
  std::string model;
  int world = 1;
  int local_world = 0;
  int64_t seq = TrainOptions{}.seq;
  int64_t micro_batch = TrainOptions{}.micro_batch;
  int64_t accum = TrainOptions{}.accum;
  std::string memory_limit;
  std::string cluster;
  int nodes = 0;  // --nodes: the cluster at this many nodes of its kind (0: as its file says)
  std::string profile;
  std::string checkpoint = "none";
  std::string attention = "memory_efficient";
  std::string memory_passes = "off";  // "auto": sharded plans gather by DeepCompile's passes within the limit
  std::string precision = "bf16";
  int top = 5;
  int threads = 0;
  bool json = false;
  std::string out;
};
// {"plans": [...], "evaluated", "over_memory", "refused", "memory_limit", "memory_passes"} as
// `loom plan --json` prints it.
nlohmann::json plan_json_report(const PlanOptions& options);

// loom tune's settings.
struct TuneCommand {
  std::string file;
  // Or the schedule as a program (the Python module's function): called on a new schedule at each
  // point, declaring its knobs with KnobSpace::declare; `name` stands for it in messages.
  std::function<void(const std::shared_ptr<Schedule>&)> build;
  std::string name;
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
  int nodes = 0;  // --nodes: the cluster at this many nodes of its kind (0: as its file says)
  std::string profile;
  std::string precision = "bf16";
  std::string db;
  bool resume = false;
  size_t confirm = 3;  // sim+run: the simulator's best points confirmed by real runs
  bool confirm_given = false, strategy_given = false;
  bool json = false;
  std::string out;
  std::string plot;
  std::vector<std::string> plot_knobs;
  std::string stdlib;
  const std::string& source() const { return build ? name : file; }
};

// {"space_size", "pruned", "evaluations", "budget_spent", "best", "trials"} as `loom tune --json`
// prints it, having written --out and --plot. A program (`build`) is evaluated by the simulator.
nlohmann::json tune_json_report(const TuneCommand& options);

// A run that did not finish (verify's), its last lines in the text.
struct RunFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The report `loom verify --json` prints. Its runs are `loom run`s of loom_executable(); one that
// fails throws RunFailed.
nlohmann::json verify_report(const VerifyOptions& options);

}  // namespace loom::cli
