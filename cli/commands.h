// The loom subcommands: each registers its options on a CLI11 app and returns an exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cost/cluster.h"
#include "backend/cost/profile.h"
#include "backend/ir/op_trace.h"
#include "backend/train/launcher.h"
#include "backend/train/trainer.h"

namespace loom {
class Schedule;
class SourceManager;
}  // namespace loom

namespace loom::cli {

// Exit codes shared by all subcommands.
constexpr int kOk = 0;
constexpr int kUserError = 1;   // the schedule (or data) is wrong
constexpr int kUsageError = 2;  // the command line is wrong

// Adds a subcommand; `run` is set to the function to call when it is chosen.
void add_check(CLI::App& app, std::function<int()>& run);
void add_fmt(CLI::App& app, std::function<int()>& run);
void add_tree(CLI::App& app, std::function<int()>& run);
void add_models(CLI::App& app, std::function<int()>& run);
void add_primitives(CLI::App& app, std::function<int()>& run);
void add_run(CLI::App& app, std::function<int()>& run);
void add_data(CLI::App& app, std::function<int()>& run);
void add_explain(CLI::App& app, std::function<int()>& run);
void add_profile(CLI::App& app, std::function<int()>& run);
void add_verify(CLI::App& app, std::function<int()>& run);
void add_simulate(CLI::App& app, std::function<int()>& run);
void add_plan(CLI::App& app, std::function<int()>& run);
void add_tune(CLI::App& app, std::function<int()>& run);
void add_report(CLI::App& app, std::function<int()>& run);

// loom verify's settings; `loom run` verifies with them too when the schedule calls verify().
struct VerifyOptions {
  TrainOptions train;
  int nproc = 2;  // at one rank nothing is sharded, so a verification there proves little
  std::optional<double> atol, rtol;  // unset: the defaults of the run's dtype
  bool bisect = true;                // when not equivalent, find the breaking directive
  bool json = false;
  bool keep = false;
};
// Runs the plain and the scheduled step, compares them and prints the report. Returns kOk
// when they are equivalent, kUserError when not (or when a run fails).
int verify_schedule(const VerifyOptions& options);

// The command-line arguments after the program name (a launcher re-runs them in each rank).
const std::vector<std::string>& original_arguments();
// When this process was started as one rank of a run (by a launcher, torchrun, srun or mpirun):
// trains (or profiles) as that rank and returns the exit code. Otherwise nullopt.
// `requested_world`, when not 0, is the world the command line asked for (--nproc x --nnodes):
// a launcher that started another number of ranks is a user error.
std::optional<int> train_if_rank(const TrainOptions& options, int requested_world = 0);
// A launch of `nproc` local ranks, each running this same command line (forks of this process
// where they can be: loom_executable.h).
LaunchSpec relaunch_as_ranks(int nproc);

// The schedule `file` makes (none: an empty one) for `model` at `nproc` ranks, its knobs set by
// `sets`, the whole-schedule rules checked: what `loom explain` and `loom simulate` lower.
// print()s go to stderr. Throws UserError.
std::unique_ptr<Schedule> planned_schedule(const std::string& file, const std::string& model, int nproc, int local_world,
                                           const std::vector<std::string>& sets, const std::string& stdlib, SourceManager& sources);

// This machine's physical memory, shared equally by `ranks` ranks: a machine cluster's device
// memory (simulate --save-cluster, plan --profile).
int64_t machine_memory_per_rank(int ranks);

// --profile for plan and tune: the machine the profile was taken on, as a cluster
// (machine_cluster.h): one node of the profiled ranks. Its compute rates come from the
// profiled ops, matched to the model's traced ops (a data-parallel program of them: sharding
// changes no op's FLOPs). Throws UserError when the profile does not fit `run`.
Cluster profiled_machine(const std::string& profile, const ir::OpTrace& trace, const ProfileKeyInputs& run,
                         const std::string& command);
// Where `profile` (read from `path`) was measured under a schedule whose collectives ran beside
// its ops on a CPU, a note on stderr, `command` first, that this machine derived from it comes
// out slow, and the command that measures a data-parallel profile instead.
void note_profile_beside_collectives(const Profile& profile, const std::string& path, const ProfileKeyInputs& run,
                                     const std::string& command);

// A simulation's communication breakdown (SimResult::comm_busy_s) for people: "all_gather on
// params 12.3, reduce_scatter on grads 8.1" (ms), the busiest first; "none".
std::string communication_text(const std::map<std::string, double>& busy_s);

// --memory-limit's bytes ("80GiB"); 0 for none (empty, or "0"); throws UserError, with
// as_size's message, for text that is not a size (the Python module's sizes come this way).
int64_t memory_limit_bytes(const std::string& text);
// --memory-limit as given: -1 when it was not (empty text), else memory_limit_bytes.
int64_t given_memory_limit(const std::string& text);

// A numeric option's check: "must be at least 1, got 0" (CLI11's own range check prints the
// whole double range).
CLI::Validator at_least(double min);
// That a count given to the library is at least `min`: UserError "--top must be at least 1, got
// 0", at_least's message, naming the option and its Python keyword.
void check_at_least(const std::string& option, const std::string& keyword, int64_t value, int64_t min);
// The shape of a run as the library takes it from Python, where no option check has run: the
// ranks (`world_option`: "--world" or "--nproc", `world_keyword` its Python name) and each
// count at least 1, --local-world at least 0 (0: the cluster's node). UserError with the
// message at_least gives, naming the option and the keyword.
void check_run_shape(const char* world_option, const char* world_keyword, int64_t world, int64_t local_world, int64_t seq,
                     int64_t micro_batch, int64_t accum);
// --nodes (Python: nodes=), as loom simulate, plan and tune take it: a shipped cluster has a few
// nodes, and a run planned on more of them needs no file of its own (with_nodes).
extern const char* const kNodesHelp;
// That `nodes` is at least 0 and, when not 0, resizes a cluster rather than a profile (`profile`
// empty), which prices the machine it measured: UserError otherwise.
void check_nodes_on_cluster(int64_t nodes, const std::string& profile);
// That exactly one of `cluster` and `profile` is given (each "" when not), as `who` ("loom
// simulate", "--evaluator sim") prices a step on one: UserError "loom simulate needs one cost
// model: --cluster NAME or --profile FILE" for neither, "... takes one cost model, not both" for both.
void check_one_cost_model(const std::string& who, const std::string& cluster, const std::string& profile);
// The compute precisions a run is priced or trained in, as --precision takes them.
extern const std::vector<std::string> kPrecisions;
// That `given` is one of `allowed` (the options CLI11 checks with IsMember, for the library's
// Python callers): UserError "--precision must be one of bf16, fp32, not 'FP32'", naming the
// Python keyword in its hint.
void check_choice(const char* option, const char* keyword, const std::string& given, const std::vector<std::string>& allowed);
// `option`, which takes a size as the language writes it (600MiB, 2GiB, or bytes; read_size),
// turned into bytes, or 0 for none; an error names the forms and what is wrong ("not a whole
// number of bytes"). Its --help type reads SIZE, whatever it is held in.
CLI::Option* as_size(CLI::Option* option);

// The options `loom run` and `loom profile` share: the model, the data and its shapes, the
// device and precision, threads, knobs, the stdlib and the timeout.
void add_step_options(CLI::App* command, TrainOptions& options);

}  // namespace loom::cli
