#include "verifier/differential/recorded_runs.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/train/loom_executable.h"
#include "backend/train/scoped_signal.h"
#include "verifier/differential/mesh_record_merge.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// Runs this program with `args` quietly, its output to `log` (a fork of this process where it can
// be, loom_executable.h); returns its exit code. Like std::system, this process ignores Ctrl-C
// while it waits: the child's launcher stops its ranks and exits 130.
int run_quietly(std::vector<std::string> args, const fs::path& log) {
  args.insert(args.begin(), loom_executable());
  pid_t pid = start_program_logged(args, log.string(), /*own_process_group=*/false);
  if (pid < 0) return 127;
  ScopedSignalHandler ignore_interrupt(SIGINT, SIG_IGN), ignore_quit(SIGQUIT, SIG_IGN);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > 12 ? lines.size() - 12 : 0; i < lines.size(); ++i) out += "  " + lines[i] + "\n";
  return out;
}

}  // namespace

RecordedRuns::RecordedRuns(const TrainOptions& t, int nproc, int plain_ranks, fs::path dir)
    : train_(t), nproc_(nproc), plain_ranks_(plain_ranks), dir_(std::move(dir)) {
  common_ = {"--model", t.model, "--data", t.data, "--micro-batch",
             std::to_string(t.micro_batch), "--seq", std::to_string(t.seq), "--accum", std::to_string(t.accum),
             "--seed", std::to_string(t.seed), "--steps", "1", "--threads", std::to_string(resolved_threads(t, nproc)),
             "--device", t.device, "--backend", t.backend, "--precision", t.precision, "--reduce-dtype", t.reduce_dtype,
             "--stdlib", t.stdlib, "--timeout", std::to_string(t.timeout_s), "--no-verify"};
  for (auto& s : t.sets) knobs_.insert(knobs_.end(), {"--set", s});
}

bool RecordedRuns::run(const std::string& name, bool scheduled, int64_t prefix, std::string& error) {
  std::vector<std::string> args{"run"};
  if (scheduled) args.push_back(train_.schedule_file);
  args.insert(args.end(), common_.begin(), common_.end());
  args.insert(args.end(), {"--nproc", std::to_string(scheduled ? nproc_ : plain_ranks_)});
  if (scheduled) args.insert(args.end(), knobs_.begin(), knobs_.end());  // the plain run declares no knobs
  if (scheduled && prefix >= 0) args.insert(args.end(), {"--trace-prefix", std::to_string(prefix)});
  // The auto passes plan within the limit (the plain run has none to plan).
  if (scheduled && train_.memory_limit >= 0) args.insert(args.end(), {"--memory-limit", std::to_string(train_.memory_limit)});
  args.insert(args.end(), {"--record", (dir_ / name).string(), "--metrics", (dir_ / (name + ".jsonl")).string()});
  fs::path log = dir_ / (name + ".log");
  ++count_;
  if (int rc = run_quietly(args, log)) {
    error = "the " + name + " run failed (exit code " + std::to_string(rc) + "); its last lines:\n" + tail_of(log);
    return false;
  }
  return true;
}

std::vector<std::vector<RecordEntry>> RecordedRuns::records(const std::string& name,
                                                            const std::vector<std::vector<RecordEntry>>* plain) const {
  std::vector<std::vector<RecordEntry>> out;
  int ranks = plain ? nproc_ : plain_ranks_;
  for (int r = 0; r < ranks; ++r) out.push_back(read_step_record((dir_ / name / ("rank-" + std::to_string(r) + ".pt")).string()));
  fs::path mesh = dir_ / name / "mesh.json";
  if (!plain || !fs::exists(mesh)) return out;
  nlohmann::json m = nlohmann::json::parse(std::ifstream(mesh));
  int tp = m.at("tp").get<int>(), pp = m.at("pp").get<int>();
  return tp * pp > 1 ? merge_mesh_records(out, tp, pp, *plain) : out;
}

double RecordedRuns::loss(const std::string& name) const {
  std::ifstream in(dir_ / (name + ".jsonl"));
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line).at("loss").get<double>();
}

}  // namespace loom
