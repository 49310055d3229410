// The torch-free parts of the runtime: rank environments, data slicing, token files,
// the learning-rate schedule and the runtime plan.
#include <doctest/doctest.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/train/launcher.h"
#include "backend/train/launcher_report.h"
#include "backend/train/loom_executable.h"
#include "backend/train/lr_schedule.h"
#include "backend/lower/mesh_layout.h"
#include "backend/lower/pipeline_stages.h"
#include "backend/train/rank_env.h"
#include "backend/train/scoped_signal.h"
#include "backend/lower/lower_schedule.h"
#include "backend/train/token_data.h"
#include "helpers.h"

using namespace loom;

TEST_CASE("rank environments from torchrun, Slurm and Open MPI variables") {
  CHECK(!rank_env_from({}).has_value());
  auto t = rank_env_from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "1234"}});
  REQUIRE(t.has_value());
  CHECK(t->rank == 3);
  CHECK(t->world == 8);
  CHECK(t->local_rank == 1);
  CHECK(t->local_world == 2);
  CHECK(t->master_addr == "10.0.0.5");
  CHECK(t->master_port == 1234);
  CHECK(t->source == "torchrun");
  auto s = rank_env_from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS_PER_NODE", "4"},
                          {"SLURM_STEP_NODELIST", "gpu[07-08]"}});
  REQUIRE(s.has_value());
  CHECK(s->rank == 5);
  CHECK(s->local_world == 4);
  CHECK(s->master_addr == "gpu07");
  CHECK(s->source == "slurm");
  // What srun sets without --ntasks-per-node: the per-node counts as a list, and a job id that
  // picks the port.
  auto s2 = rank_env_from({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}, {"SLURM_JOB_ID", "1234567"},
                           {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}, {"SLURM_STEP_NODELIST", "node[3,5-6]"}});
  REQUIRE(s2.has_value());
  CHECK(s2->local_world == 2);
  CHECK(s2->master_addr == "node3");
  CHECK(s2->master_port == 20000 + 1234567 % 10000);
  CHECK(rank_env_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "7"}, {"MASTER_PORT", "4000"}})->master_port == 4000);
  CHECK_THROWS_WITH_AS(rank_env_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_STEP_TASKS_PER_NODE", "4,2"}}),
                       "local rank 0 of 4 per node does not fit a world of 6", UserError);
  // torchrun's static rendezvous: the agent serves the store.
  auto a = rank_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                          {"TORCHELASTIC_RESTART_COUNT", "1"}});
  CHECK(a->agent_store);
  CHECK(a->restart_count == 1);
  CHECK(!rank_env_from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}})->agent_store);
  auto m = rank_env_from({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "head"}});
  REQUIRE(m.has_value());
  CHECK(m->rank == 2);
  CHECK(m->master_addr == "head");
  // The launcher's variables read back as the same environment.
  std::map<std::string, std::string> vars;
  for (auto& kv : torchrun_variables(*t)) vars.insert(kv);
  CHECK(rank_env_from(vars)->rank == 3);
}

TEST_CASE("inconsistent launcher variables are errors that name the variable") {
  CHECK_THROWS_WITH_AS(rank_env_from({{"RANK", "0"}}), "launcher variable WORLD_SIZE is missing", UserError);
  CHECK_THROWS_WITH_AS(rank_env_from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}),
                       "launcher variable RANK='x' is not a non-negative integer", UserError);
  CHECK_THROWS_WITH_AS(rank_env_from({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "rank 2 is not below the world size 2", UserError);
  CHECK_THROWS_WITH_AS(rank_env_from({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "3"}}),
                       "local rank 0 of 3 per node does not fit a world of 4", UserError);
}

namespace {
// Launches two shell ranks ($RANK is 0 or 1) and returns what the launcher said.
std::string launch_shell_ranks(const std::string& script, int* rc = nullptr) {
  LaunchSpec spec;
  spec.nproc = 2;
  spec.argv = {"/bin/bash", "-c", script};
  std::ostringstream err;
  int code = launch(spec, err);
  if (rc) *rc = code;
  return err.str();
}
const std::string kConsequence =
    "echo 'error: barrier on world failed: Connection closed by peer' >&2; echo '  hint: " + std::string(kAnotherRankStopped) +
    " (its own message says why)' >&2; exit 1";
}  // namespace

// A rank that fails on its own says why, closes its connections and can take a while to exit
// (tearing down on busy cores); its peer says the consequence and exits first. The report names the cause as it ended by itself, not killed by the SIGTERM the
// launcher stops ranks with: CI once saw "rank 0 failed (killed by signal 15 (Terminated))".
TEST_CASE("the launcher reports the rank that failed on its own as it exited, not as it was stopped") {
  int rc = 0;
  // Rank 0 says its error after rank 1 has exited, and exits a little later.
  std::string said = launch_shell_ranks(
      "if [ \"$RANK\" = 0 ]; then sleep 0.5; echo 'error: cannot write the trace' >&2; sleep 0.5; exit 1; fi; sleep 0.2; " + kConsequence,
      &rc);
  CHECK(rc == 1);
  CHECK_MESSAGE(said.find("loom run: rank 0 failed (exit code 1): error: cannot write the trace\n") != std::string::npos, said);
  // Rank 0 has said its error and takes longer than the launcher waits for a peer (5 s) to exit.
  said = launch_shell_ranks("if [ \"$RANK\" = 0 ]; then echo 'error: cannot write the trace' >&2; sleep 6; exit 1; fi; sleep 0.2; " +
                            kConsequence, &rc);
  CHECK(rc == 1);
  CHECK_MESSAGE(said.find("loom run: rank 0 failed (exit code 1): error: cannot write the trace\n") != std::string::npos, said);
  // The same with an internal error (a Loom bug, exit 70), which says so in a line of its own form.
  said = launch_shell_ranks("if [ \"$RANK\" = 0 ]; then echo 'loom: internal error: boom' >&2; sleep 6; exit 70; fi; sleep 0.2; " +
                            kConsequence, &rc);
  CHECK(rc == 1);
  CHECK_MESSAGE(said.find("loom run: rank 0 failed (exit code 70): loom: internal error: boom\n") != std::string::npos, said);
  // A rank that fails on its own stops the others at once: rank 1 sleeps past the grace period unless stopped.
  auto start = std::chrono::steady_clock::now();
  said = launch_shell_ranks("if [ \"$RANK\" = 0 ]; then echo 'error: bad data' >&2; exit 1; fi; exec sleep 30", &rc);
  CHECK(rc == 1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  CHECK(said.find("loom run: rank 0 failed (exit code 1): error: bad data\n") != std::string::npos);
}

// A rank killed from outside (the OOM killer, a user's kill -9) says nothing; its peer says the
// consequence, and the two can be reaped in one pass, the peer first by index. Here rank 1 keeps
// its stderr open in a child, so its death does not wake the launcher, and rank 0 says the
// consequence and exits just after it sees rank 1 dead: most runs reap both in one pass (the
// launcher can still wake between, on its 100 ms poll, and reap rank 1 alone).
TEST_CASE("the launcher names a rank killed from outside, not the peer that failed because of it") {
  auto flag = std::filesystem::temp_directory_path() / ("loom_launch_test_" + std::to_string(getpid()));
  std::filesystem::remove(flag);
  std::string said = launch_shell_ranks(
      "f=" + flag.string() +
      "; if [ \"$RANK\" = 1 ]; then sleep 3 > /dev/null & echo $$ > $f.tmp; mv $f.tmp $f; sleep 0.3; kill -9 $$; fi; "
      "while [ ! -s $f ]; do sleep 0.01; done; pid=$(cat $f); "
      "while s=$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null) && [ \"$s\" != Z ]; do sleep 0.01; done; " +
      kConsequence);
  std::filesystem::remove(flag);
  CHECK_MESSAGE(said.find("loom run: rank 1 failed (killed by signal 9 (Killed))") != std::string::npos, said);
}

TEST_CASE("a failing rank writes torchrun's error file, except under Loom's own launcher") {
  std::string file = (std::filesystem::temp_directory_path() / ("loom_error_" + std::to_string(getpid()) + ".json")).string();
  std::filesystem::remove(file);
  const char* loom_launcher = std::getenv(kLaunchedByLoom);
  std::string saved_launcher = loom_launcher ? loom_launcher : "";
  setenv("TORCHELASTIC_ERROR_FILE", file.c_str(), 1);
  setenv(kLaunchedByLoom, "1", 1);
  write_launcher_error_file({"error: checkpoint file x is damaged\n", false});
  CHECK_FALSE(std::filesystem::exists(file));  // Loom's launcher tells cause from consequence itself
  unsetenv(kLaunchedByLoom);
  auto written = [&file] {
    std::ifstream in(file);
    return nlohmann::json::parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  };
  auto now = static_cast<int64_t>(std::time(nullptr));
  write_launcher_error_file({"error: checkpoint file x is damaged\n", false});
  // torchrun's ProcessFailure reads a string message as is, and orders failures by the timestamp:
  // the cause's is when it fails, a consequence's when it will exit, past the cause's.
  nlohmann::json cause = written();
  CHECK(cause["message"] == "error: checkpoint file x is damaged\n");
  CHECK(cause["timestamp"].get<int64_t>() - now <= 1);
  write_launcher_error_file({"error: all_reduce on world failed\n", true});
  CHECK(written()["timestamp"].get<int64_t>() - cause["timestamp"].get<int64_t>() >= kConsequenceExitDelay.count() - 1);
  CHECK_FALSE(std::filesystem::exists(file + "." + std::to_string(getpid()) + ".tmp"));
  CHECK(elastic_error_file_json("said", 1764340000) == "{\"message\":\"said\",\"timestamp\":1764340000}\n");
  // A path that is not UTF-8 in the message: the file is still JSON.
  CHECK(nlohmann::json::parse(elastic_error_file_json("cannot read /tmp/\xff.bin", 1))["message"] == "cannot read /tmp/\xef\xbf\xbd.bin");
  unsetenv("TORCHELASTIC_ERROR_FILE");
  if (loom_launcher) setenv(kLaunchedByLoom, saved_launcher.c_str(), 1);
  std::filesystem::remove(file);
}

// Ranks bind the port a launcher picks a second or two later: from below the ephemeral range,
// which other processes' connections and listeners take ports from meanwhile.
TEST_CASE("the launcher picks a free port below the ephemeral range") {
  int port = pick_free_port();
  CHECK(port >= 10000);
  CHECK(port < 19000);
}

namespace {

void on_test_signal(int) {}

// The program a forked child runs in the test below: prints how SIGUSR1 and SIGUSR2 are handled.
int print_signal_handling(int, char**) {
  for (int signal : {SIGUSR1, SIGUSR2}) {
    struct sigaction now {};
    sigaction(signal, nullptr, &now);
    std::printf("%s ", now.sa_handler == SIG_DFL ? "default" : now.sa_handler == SIG_IGN ? "ignored" : "handled");
  }
  return 0;
}

// Starts `argv` with start_program_logged and waits for it: its exit code and its log's text.
std::pair<int, std::string> run_logged(const std::vector<std::string>& argv, bool own_process_group) {
  std::string log = (std::filesystem::temp_directory_path() / ("loom_started_" + std::to_string(getpid()) + ".log")).string();
  pid_t pid = start_program_logged(argv, log, own_process_group);
  REQUIRE(pid > 0);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(log);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

}  // namespace

// A rank, verify's run or a tune trial starts as an exec'd program would, whether forked or not:
// without the handlers its starter installed for the while (loom_executable.h).
TEST_CASE("a started program has the signal handlers from before its starter's scoped ones, forked or exec'd") {
  ScopedSignalHandler handled(SIGUSR1, on_test_signal), ignored(SIGUSR1, SIG_IGN), other(SIGUSR2, on_test_signal);
  SUBCASE("forked: the registered main() runs in the child") {
    set_program_main(print_signal_handling);
    REQUIRE(can_fork_program());
    auto [code, output] = run_logged({"/proc/self/exe"}, false);
    set_program_main(nullptr);
    CHECK(code == 0);
    CHECK(output == "default default ");
  }
  SUBCASE("exec'd: an ignored signal would stay ignored through exec") {
    auto [code, output] = run_logged({"/bin/cat", "/proc/self/status"}, true);
    CHECK(code == 0);
    size_t at = output.find("SigIgn:");
    REQUIRE(at != std::string::npos);
    unsigned long long ignored_mask = std::stoull(output.substr(at + 7), nullptr, 16);
    CHECK((ignored_mask >> (SIGUSR1 - 1) & 1) == 0);
  }
  SUBCASE("a program that cannot be exec'd exits 127, saying why") {
    auto [code, output] = run_logged({"/no/such/loom"}, false);
    CHECK(code == 127);
    CHECK(output == "cannot start /no/such/loom: No such file or directory\n");
  }
  SUBCASE("a log that cannot be written starts nothing, errno saying why") {
    CHECK(start_program_logged({"/bin/true"}, "/no/such/dir/trial.log", true) == -1);
    CHECK(errno == ENOENT);
  }
  struct sigaction now {};
  sigaction(SIGUSR1, nullptr, &now);
  CHECK((now.sa_handler == SIG_IGN));  // the starter's own stay
}

TEST_CASE("each rank reads its own slice; together the ranks read the single-rank batch") {
  for (int world : {1, 2, 4}) {
    std::set<uint64_t> all;
    int64_t mb = 8 / world;
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < mb; ++i) all.insert(sample_index(3, 1, 2, world, r, mb, i));
    std::set<uint64_t> single;
    for (int64_t i = 0; i < 8; ++i) single.insert(sample_index(3, 1, 2, 1, 0, 8, i));
    CHECK(all == single);
  }
  CHECK(sample_index(0, 0, 1, 2, 1, 4, 0) == 4);
}

TEST_CASE("token files round-trip and sample deterministically") {
  auto base = std::filesystem::temp_directory_path() / ("loom_tokens_" + std::to_string(::getpid()));
  std::string text_path = base.string() + ".txt", bin_path = base.string() + ".bin";
  std::ofstream(text_path) << "hello loom, hello tokens";
  TokenFileHeader h = prepare_token_file({text_path}, bin_path);
  CHECK(h.count == 24);
  auto source = open_token_file(bin_path, 5);
  CHECK(source->vocab_size() == 256);
  std::vector<int64_t> a(5), b(5);
  source->sample(42, 5, a.data());
  source->sample(42, 5, b.data());
  CHECK(a == b);
  std::string text = "hello loom, hello tokens";
  CHECK(text.find(std::string(a.begin(), a.end())) != std::string::npos);  // a window of the text
  CHECK_THROWS_WITH_AS(open_token_file(bin_path, 100),
                       ("data file '" + bin_path + "': it holds 24 tokens, fewer than one sequence of 100; use more text or a shorter --seq").c_str(),
                       UserError);
  auto synth = synthetic_tokens(256, 7);
  synth->sample(1, 5, a.data());
  synth->sample(1, 5, b.data());
  CHECK(a == b);
  std::remove(text_path.c_str());
  std::remove(bin_path.c_str());
}

TEST_CASE("learning rate: linear warmup, cosine decay to the floor") {
  LrSchedule s{1.0, 0.1, 4, 14};
  CHECK(s.at(0) == doctest::Approx(0.25));
  CHECK(s.at(3) == doctest::Approx(1.0));
  CHECK(s.at(4) == doctest::Approx(1.0));
  CHECK(s.at(9) == doctest::Approx(0.55));  // halfway through the decay: (1 + 0.1) / 2
  CHECK(s.at(14) == doctest::Approx(0.1));
  CHECK(s.at(100) == doctest::Approx(0.1));
}

TEST_CASE("batch() sets the run's micro-batch and accumulation; 0 and a missing one keep the command line's; the last counts") {
  auto both = testing::evaluate("sch.batch(micro=8, accum=2)\n", "gpt:tiny", {2, 0});
  RuntimePlan plan = lower_schedule(*both->schedule);
  CHECK(plan.micro_batch_or(4) == 8);
  CHECK(plan.accum_or(1) == 2);
  auto micro = testing::evaluate("sch.batch(micro=8)\nsch.batch(micro=2)\n", "gpt:tiny", {2, 0});
  plan = lower_schedule(*micro->schedule);
  CHECK(plan.micro_batch_or(4) == 2);
  CHECK(plan.accum_or(3) == 3);
  auto none = testing::evaluate("sch.zero(stage=1)\n", "gpt:tiny", {2, 0});
  CHECK(lower_schedule(*none->schedule).micro_batch_or(4) == 4);
}

TEST_CASE("the runtime plan accepts checkpoint, data parallelism and every valid sharding, and names what it cannot run") {
  auto ok = testing::evaluate("sch.shard_states(params=1, grads=1, optim=1)\nsch[\"h.*\"].checkpoint()\n", "gpt:tiny", {2, 0});
  CHECK(lower_schedule(*ok->schedule).checkpoint.size() == 4);
  auto zero3 = testing::evaluate("sch.zero(stage=3)\nsch[\"h.*\"].prefetch()\n", "gpt:tiny", {2, 0});
  CHECK(lower_schedule(*zero3->schedule).factors.params == 2);
  auto zero1 = testing::evaluate("sch.zero(stage=1)\n", "gpt:tiny", {2, 0});
  CHECK(lower_schedule(*zero1->schedule).factors.params == 1);
  CHECK(lower_schedule(*zero1->schedule).factors.optim == 2);
  auto hybrid = testing::evaluate("sch.shard_states(params=2, grads=4, optim=4)\n", "gpt:tiny", {4, 0});
  ir::Sharding f = lower_schedule(*hybrid->schedule).factors;
  CHECK(f.params == 2);
  CHECK(f.grads == 4);
  CHECK(f.optim == 4);
  auto both = testing::evaluate("sch.fsdp()\nsch[\"h.0\"].checkpoint()\n", "gpt:tiny", {2, 0});
  CHECK(lower_schedule(*both->schedule).checkpoint.size() == 1);
  // A module without parameters has no op for the step program to recompute.
  auto bare = testing::evaluate("sch[\"h.0.mlp.act\"].checkpoint()\n", "gpt:tiny", {2, 0});
  try {
    lower_schedule(*bare->schedule);
    FAIL("checkpoint() of a module without parameters was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().range.to_string() == "test.sched:1:1");
    CHECK(std::string(e.what()) == "checkpoint is not yet supported at runtime: `h.0.mlp.act` holds no parameters, so the "
                                   "step has no op of it to recompute");
    CHECK(e.diagnostic().hint == "checkpoint the block around it instead");
  }
  // A sync on a module that holds the sharded layer but computes nothing itself: the program
  // has no op of it to put the collective after.
  auto parent = testing::evaluate("sch.mesh(tp=2)\nsch[\"h.0.mlp.c_fc\"].shard([\"weight\", \"bias\"], axis=0)\n"
                                  "sch[\"h.0.mlp\"].sync(mode=\"bwd_post\", op=\"all_reduce\")\n",
                                  "gpt:tiny", {2, 0});
  try {
    lower_schedule(*parent->schedule);
    FAIL("sync() of a module without parameters of its own was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().range.to_string() == "test.sched:3:1");
    CHECK(std::string(e.what()) == "sync is not yet supported at runtime: sync() runs its collective after a module that computes "
                                   "with parameters of its own; `h.0.mlp` holds none directly");
    CHECK(e.diagnostic().hint.find("sync the layers inside it that you shard") == 0);
  }
  // Prefetch without sharded parameters has nothing to gather: the primitive warns, the
  // runtime runs it as plain data parallelism (stdlib zero3 at world 1).
  auto pf = testing::evaluate("sch[\"h.0\"].prefetch()\n", "gpt:tiny", {1, 0});
  CHECK(lower_schedule(*pf->schedule).factors.optim == 1);
  setenv("LOOM_TEST_PRIMITIVES", "1", 1);
  auto early = testing::evaluate("sch[\"h.0.mlp.c_fc\"].test_release_early()\n", "gpt:tiny", {2, 0});
  try {
    lower_schedule(*early->schedule);
    FAIL("test_release_early without sharded parameters was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().range.to_string() == "test.sched:1:1");
    CHECK(std::string(e.what()).find("it releases sharded parameters, but this schedule does not shard them") != std::string::npos);
  }
  unsetenv("LOOM_TEST_PRIMITIVES");
}


TEST_CASE("the runtime plan of tensor and pipeline parallelism: shards, syncs, stage boundaries") {
  auto tp = testing::evaluate(testing::read_file(testing::source_path("examples/gpt_tp.sched")), "gpt2", {4, 0});
  RuntimePlan plan = lower_schedule(*tp->schedule);
  CHECK(plan.tp == 2);
  CHECK(plan.pp == 2);
  CHECK(plan.model_parallel());
  REQUIRE(plan.shards.size() == 48);
  CHECK(plan.shards[1].module == "h.0.attn.c_proj");
  CHECK(plan.shards[1].axis == 1);
  CHECK(plan.shards[1].params == std::vector<std::string>{"weight"});
  CHECK(plan.syncs[0].mode == "bwd_post");
  CHECK(plan.syncs[1].mode == "fwd_post");
  CHECK(plan.pipeline_splits == std::vector<std::string>{"h.5"});

  PipelineStages split = plan_pipeline_stages(tp->schedule->tree(), plan.pipeline_splits, 2);
  CHECK(split.list == "h");
  CHECK(split.begins == std::vector<int>{0, 6, 12});
  CHECK(split.stage_of_param("h.5.mlp.c_fc.weight") == 0);
  CHECK(split.stage_of_param("h.6.ln_1.bias") == 1);
  CHECK(split.stage_of_param("wte.weight") == -1);
  // No boundaries: the list's entries shared out evenly.
  CHECK(plan_pipeline_stages(tp->schedule->tree(), {}, 3).begins == std::vector<int>{0, 4, 8, 12});
  CHECK(plan_pipeline_stages(tp->schedule->tree(), {"h.2", "h.8"}, 3).begins == std::vector<int>{0, 3, 9, 12});
  try {
    plan_pipeline_stages(tp->schedule->tree(), {}, 16);
    FAIL("16 stages of 12 entries were accepted");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("`h` has 12 entries, fewer than the pp = 16 pipeline stages") != std::string::npos);
  }
}

TEST_CASE("mesh layout: tensor-parallel ranks adjacent, replicas next, stages outermost") {
  MeshLayout m = MeshLayout::of(8, 5, 2, 2);  // dp = 2
  CHECK(m.dp == 2);
  CHECK(m.tp_rank == 1);
  CHECK(m.dp_rank == 0);
  CHECK(m.stage == 1);
  CHECK(m.rank_at(1, 0, 1) == 5);
  CHECK(MeshLayout::of(8, 3, 2, 2).dp_rank == 1);
  CHECK(MeshLayout::of(4, 3, 1, 1).dp_rank == 3);
}
