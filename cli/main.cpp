// loom: the command line (cli/entry.h). Subcommands live one per file in cli/.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "backend/build_info.h"
#include "backend/cost/cluster.h"
#include "backend/data_dirs.h"
#include "backend/train/loom_executable.h"
#include "backend/train/rank_env.h"
#include "cli/commands.h"
#include "cli/entry.h"
#include "lang/diagnostics.h"
#include "lang/module_tree.h"
#include "lang/value.h"

namespace loom::cli {
namespace {
std::vector<std::string> arguments;
}
const std::vector<std::string>& original_arguments() { return arguments; }

std::optional<int> train_if_rank(const TrainOptions& options, int requested_world) {
  std::optional<RankEnv> env;
  try {
    env = rank_env_from_process();
    if (env && requested_world != 0 && requested_world != env->world)
      throw UserError(SourceRange{}, "the command line asks for " + std::to_string(requested_world) + " ranks (--nproc x --nnodes), but " +
                                         env->source + " started " + std::to_string(env->world),
                      "under a launcher the launcher sets the world: drop --nproc and --nnodes, or make them match it");
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUsageError;
  }
  if (!env) return std::nullopt;
  return train(options, *env);
}

LaunchSpec relaunch_as_ranks(int nproc) {
  LaunchSpec spec;
  spec.argv = {loom_executable()};
  for (auto& a : arguments) spec.argv.push_back(a);
  spec.nproc = nproc;
  spec.fork_program = true;
  return spec;
}

CLI::Validator at_least(double min) {
  std::string bound = min == static_cast<int64_t>(min) ? std::to_string(static_cast<int64_t>(min)) : std::to_string(min);
  return CLI::Validator(
      [min, bound](std::string& text) -> std::string {
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "expects a number, got '" + text + "'";
        return value < min ? "must be at least " + bound + ", got " + text : "";
      },
      "at least " + bound);
}

const std::vector<std::string> kPrecisions{"bf16", "fp32"};

void check_choice(const char* option, const char* keyword, const std::string& given, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), given) != allowed.end()) return;
  std::string listed;
  for (const std::string& a : allowed) listed += (listed.empty() ? "" : ", ") + a;
  throw UserError(SourceRange{}, std::string(option) + " must be one of " + listed + ", not '" + given + "'",
                  std::string("give one of them (in Python: ") + keyword + "=\"" + allowed.front() + "\")");
}

void check_at_least(const std::string& option, const std::string& keyword, int64_t value, int64_t min) {
  if (value >= min) return;
  throw UserError(SourceRange{}, option + " must be at least " + std::to_string(min) + ", got " + std::to_string(value),
                  "give " + option + " (in Python: " + keyword + "=) a number of at least " + std::to_string(min));
}

const char* const kNodesHelp =
    "price the run on this many nodes of the --cluster's kind, as if its file said so (default: the nodes it has)";

void check_nodes_on_cluster(int64_t nodes, const std::string& profile) {
  check_at_least("--nodes", "nodes", nodes, 0);
  if (nodes > 0 && !profile.empty())
    throw UserError(SourceRange{}, "--nodes " + std::to_string(nodes) + " resizes a --cluster; a profile prices the machine it measured",
                    "give --cluster NAME with --nodes, or leave --nodes out (in Python: nodes=)");
}

void check_one_cost_model(const std::string& who, const std::string& cluster, const std::string& profile) {
  if (cluster.empty() && profile.empty())
    throw UserError(SourceRange{}, who + " needs one cost model: --cluster NAME or --profile FILE",
                    "name a cluster (" + cluster_names_text(cluster_dirs()) + ") or give a profile from `loom profile --out FILE`");
  if (!cluster.empty() && !profile.empty())
    throw UserError(SourceRange{}, who + " takes one cost model, not both: --cluster " + cluster + " or --profile " + profile,
                    "leave one out: a cluster prices the run from its data sheet, a profile from what this machine measured");
}

void check_run_shape(const char* world_option, const char* world_keyword, int64_t world, int64_t local_world, int64_t seq,
                     int64_t micro_batch, int64_t accum) {
  check_at_least(world_option, world_keyword, world, 1);
  check_at_least("--local-world", "local_world", local_world, 0);
  check_at_least("--seq", "seq", seq, 1);
  check_at_least("--micro-batch", "micro_batch", micro_batch, 1);
  check_at_least("--accum", "accum", accum, 1);
}

// What is wrong with a size given on the command line ("" for none): the message both the option
// check and memory_limit_bytes give.
std::string size_problem(const std::string& text) {
  using Problem = SizeReading::Problem;
  if (text == "0") return "";  // none
  SizeReading size = read_size(text);
  if (size.problem == Problem::None) return "";
  return "expects a size such as 600MiB, 2GiB or a number of bytes (0: none), got '" + text + "'" +
         (size.problem == Problem::NotASize ? " (a size is a number, then B, KB, MB, GB, TB, KiB, MiB, GiB or TiB or nothing)"
                                            : ", which " + size_problem_text(size.problem));
}

CLI::Option* as_size(CLI::Option* option) {
  CLI::Validator bytes(
      [](std::string& text) -> std::string {
        std::string problem = size_problem(text);
        if (problem.empty() && text != "0") text = std::to_string(parse_size(text));
        return problem;
      },
      "");  // the type name says SIZE
  return option->transform(bytes)->type_name("SIZE");
}

int64_t memory_limit_bytes(const std::string& text) {
  if (text.empty() || text == "0") return 0;
  std::string problem = size_problem(text);
  if (!problem.empty()) throw UserError(SourceRange{}, "--memory-limit: " + problem, size_hint(read_size(text).problem));
  return parse_size(text);
}

int64_t given_memory_limit(const std::string& text) { return text.empty() ? -1 : memory_limit_bytes(text); }

void add_step_options(CLI::App* c, TrainOptions& t) {
  t.stdlib = stdlib_dir();
  c->add_option("file", t.schedule_file, "the .sched file (optional: none means plain data parallelism)");
  // Required, so its member's default ("gpt:tiny", for the library) is not shown as one.
  c->add_option("--model", t.model, "reference model (see `loom models`)")->required()->default_str("");
  c->add_option("--data", t.data, "token file from `loom data prepare`, or 'synthetic'");
  c->add_option("--micro-batch", t.micro_batch, "sequences per rank per micro-batch");
  c->add_option("--seq", t.seq, "tokens per sequence");
  c->add_option("--accum", t.accum, "micro-batches per optimizer step (gradient accumulation)");
  c->add_option("--threads", t.threads, "intra-op threads per rank (default: cores / ranks)")->check(at_least(0));
  c->add_option("--device", t.device, "cpu, cuda (bf16 autocast, fp32 master weights, NCCL; one GPU per rank) or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--backend", t.backend, "collectives: auto (nccl on cuda, gloo on cpu), nccl, or gloo (on cuda: ranks may share a GPU)")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}));
  c->add_option("--precision", t.precision, "GPU compute precision: bf16 (autocast over fp32 master weights) or fp32")
      ->check(CLI::IsMember(kPrecisions));
  c->add_option("--reduce-dtype", t.reduce_dtype, "gradients on the wire: fp32, fp16, or bf16 (NCCL); accumulated in fp32")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  c->add_option("--set", t.sets, "fix a tune() knob: --set micro_batch=4 (repeatable)");
  c->add_option("--stdlib", t.stdlib, "directory of the standard schedules");
  as_size(c->add_option("--memory-limit", t.memory_limit,
                        "bytes per rank, e.g. 600MiB: prefetch(budget=auto), unshard(auto) and bucket(size=auto) plan within it "
                        "(docs/passes.md); 0: none (auto then prefetches one block ahead and unshards nothing); not given: on a GPU "
                        "90% of its memory, on a CPU none"))
      ->default_str("");  // -1, not given: the text says what that means
  c->add_option("--timeout", t.timeout_s, "seconds a rank waits for the rendezvous or a collective before failing")->check(at_least(1));
}
namespace {

// `loom chekc`: name the unknown command and the closest one, where CLI11 would only say that a
// subcommand is required. Returns the exit code when the first argument is no command.
std::optional<int> refuse_unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::vector<std::string> names;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  std::string given = argv[1];
  if (std::find(names.begin(), names.end(), given) != names.end()) return std::nullopt;
  std::vector<std::string> near = closest(given, names, 1);
  std::cerr << "error: unknown command '" << given << "'\n  hint: "
            << (near.empty() ? "" : "did you mean '" + near[0] + "'? ") << "`loom --help` lists the commands\n";
  return kUsageError;
}

}  // namespace

int command_line(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, which Loom reports like a full
  // disk, instead of the signal killing the process mid-checkpoint.
  std::signal(SIGXFSZ, SIG_IGN);
  loom::cli::arguments.assign(argv + 1, argv + argc);  // this call's (loom.train calls it again in one process)
  if (!loom::built_with_cuda()) loom::set_program_main(command_line);  // its runs' processes may be forks of this one
  CLI::App app{
      "Loom: a schedule language for distributed training of LibTorch models.\n"
      "A model is written once; how it is trained (sharded, tensor-parallel, pipelined,\n"
      "prefetched, offloaded, compressed, checkpointed) is written beside it in a .sched file.\n"
      "Docs: docs/language.md, docs/primitives.md, docs/architecture.md"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("loom ") + LOOM_VERSION + " (" + loom::build_description() + ")");
  // Every option's default shows in --help (subcommands inherit this when they are added).
  app.option_defaults()->always_capture_default();
  std::function<int()> run;
  loom::cli::add_check(app, run);
  loom::cli::add_fmt(app, run);
  loom::cli::add_tree(app, run);
  loom::cli::add_models(app, run);
  loom::cli::add_primitives(app, run);
  loom::cli::add_run(app, run);
  loom::cli::add_data(app, run);
  loom::cli::add_explain(app, run);
  loom::cli::add_profile(app, run);
  loom::cli::add_simulate(app, run);
  loom::cli::add_plan(app, run);
  loom::cli::add_tune(app, run);
  loom::cli::add_verify(app, run);
  loom::cli::add_report(app, run);
  if (std::optional<int> rc = loom::cli::refuse_unknown_command(app, argc, argv)) return *rc;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return loom::cli::kUsageError;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    // User errors are handled by each command; anything reaching here is a Loom bug, or the
    // machine's memory running out.
    loom::EscapedError report = loom::escaped_error_report(
        e, "the command needed more memory than this machine gave it: free memory, or ask for less (a smaller model, "
           "world or batch)");
    std::cerr << report.text;
    return report.exit_code;
  }
}

}  // namespace loom::cli
