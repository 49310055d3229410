#include "autotuner/run_evaluator.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/cost/sample_statistics.h"
#include "backend/train/loom_executable.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom::tune {
namespace {

enum class Exit { Ok, Failed, TimedOut, NotStarted };

// Runs the program on `args` (argv[0] first; a fork of this process where it can be,
// loom_executable.h) in a new process group, output to `log`, until it exits, passes `timeout_s`
// or `stop` is set; the group is killed in the last two cases. NotStarted (`why` saying why) where
// the log cannot be written or no process made.
Exit run_trial_process(const std::vector<std::string>& args, const std::string& log, double timeout_s, const std::atomic<bool>* stop,
                       int& code, std::string& why) {
  pid_t pid = start_program_logged(args, log, /*own_process_group=*/true);
  if (pid < 0) {
    why = std::strerror(errno);
    return Exit::NotStarted;
  }
  auto started = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return code == 0 ? Exit::Ok : Exit::Failed;
    }
    bool stopped = stop && stop->load();
    if (stopped || std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() > timeout_s) {
      kill(-pid, SIGTERM);
      for (int i = 0; i < 50 && waitpid(pid, &status, WNOHANG) != pid; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (stopped) throw SweepInterrupted();
      return Exit::TimedOut;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Why a run failed: the first error line of its log, else its last line.
std::string failure_of(const std::string& log) {
  std::ifstream in(log);
  std::string last;
  for (std::string l; std::getline(in, l);) {
    if (l.find("error:") != std::string::npos) return l;
    if (!l.empty()) last = l;
  }
  return last;
}

}  // namespace

std::string RunEvaluator::context() const {
  return "run schedule=" + s_.schedule_key + " " + s_.context + " steps=" + std::to_string(s_.steps) +
         " memory_limit=" + std::to_string(s_.memory_limit);
}

bool RunEvaluator::scale_effort(int scale) {
  s_.steps = base_steps_ * scale;
  s_.timeout_s = base_timeout_s_ * scale;  // --trial-timeout is for the base steps
  return true;
}

RunEvaluator::RunEvaluator(RunSettings settings, const std::atomic<bool>* stop) : s_(std::move(settings)), stop_(stop) {
  std::error_code error;
  std::filesystem::path temp = std::filesystem::temp_directory_path(error);  // $TMPDIR, else /tmp
  std::string pattern = (temp / "loom-tune-XXXXXX").string();
  if (!error && !mkdtemp(pattern.data())) error = std::error_code(errno, std::generic_category());
  if (error) {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string where = !temp.empty() ? temp.string() : tmpdir ? "$TMPDIR (" + std::string(tmpdir) + ")" : "the temporary directory";
    throw UserError(SourceRange{}, "cannot create a work directory for the trials' logs in " + where + ": " + error.message(),
                    "point TMPDIR at a writable directory");
  }
  work_dir_ = pattern;
}

RunEvaluator::~RunEvaluator() {
  std::error_code ignored;
  std::filesystem::remove(work_dir_, ignored);  // only if empty: a failed trial's log stays
}

Trial RunEvaluator::evaluate(const Point& point) {
  std::string base = (std::filesystem::path(work_dir_) / ("trial-" + std::to_string(++trials_))).string();
  std::error_code ignored;
  Trial t;
  try {
    t = run_trial(point, base);
  } catch (const SweepInterrupted&) {
    std::filesystem::remove(base + ".log", ignored);  // stopped, not failed: nothing to look at
    std::filesystem::remove(base + ".jsonl", ignored);
    throw;
  }
  std::filesystem::remove(base + ".jsonl", ignored);  // read, or partial
  if (t.status == TrialStatus::Ok || t.status == TrialStatus::Infeasible) std::filesystem::remove(base + ".log", ignored);
  else if (std::filesystem::exists(base + ".log", ignored)) t.message += "; its log: " + base + ".log";
  return t;
}

Trial RunEvaluator::run_trial(const Point& point, const std::string& base) {
  auto started = std::chrono::steady_clock::now();
  Trial t;
  t.knobs = point;
  t.steps = s_.steps;
  std::vector<std::string> args{s_.loom, "run", s_.schedule};
  args.insert(args.end(), s_.run_args.begin(), s_.run_args.end());
  args.insert(args.end(), {"--steps", std::to_string(s_.steps), "--metrics", base + ".jsonl", "--no-verify"});
  for (const std::string& setting : point_settings(point)) args.insert(args.end(), {"--set", setting});
  // The auto passes plan within the limit the point is judged by.
  if (s_.memory_limit > 0) args.insert(args.end(), {"--memory-limit", std::to_string(s_.memory_limit)});
  int code = 0;
  std::string why;
  Exit exit = run_trial_process(args, base + ".log", s_.timeout_s, stop_, code, why);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (exit == Exit::NotStarted) {
    t.status = TrialStatus::Failed;
    t.message = "cannot start loom run, its log " + base + ".log: " + why;
    return t;
  }
  if (exit == Exit::TimedOut) {
    t.status = TrialStatus::TimedOut;
    t.message = "killed after " + std::to_string(static_cast<int>(s_.timeout_s)) + " s (--trial-timeout)";
    return t;
  }
  if (exit == Exit::Failed) {
    t.status = TrialStatus::Failed;
    t.message = "loom run exited with " + std::to_string(code) + ": " + failure_of(base + ".log");
    return t;
  }
  std::vector<double> step_ms;
  double tokens_per_step = 0;
  try {
    std::ifstream metrics(base + ".jsonl");
    for (std::string line; std::getline(metrics, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      step_ms.push_back(j.at("step_ms").get<double>());
      tokens_per_step = j.at("tokens_per_s").get<double>() * j.at("step_ms").get<double>() / 1000;
      t.peak_bytes = std::max(t.peak_bytes, j.at("peak_mem_bytes").get<int64_t>());
    }
  } catch (const nlohmann::json::exception& e) {
    step_ms.clear();
  }
  if (step_ms.empty()) {
    t.status = TrialStatus::Failed;
    t.message = "the run wrote no metrics";
    return t;
  }
  std::vector<double> measured(step_ms.size() > 2 ? step_ms.begin() + 2 : step_ms.begin(), step_ms.end());
  t.step_s = median(std::move(measured)) / 1000;
  if (s_.memory_limit > 0 && t.peak_bytes > s_.memory_limit) {
    t.status = TrialStatus::Infeasible;
    t.message = "measured peak " + format_size(t.peak_bytes) + " is above the memory limit " + format_size(s_.memory_limit);
    return t;
  }
  t.status = TrialStatus::Ok;
  t.objective = tokens_per_step / s_.world / t.step_s;
  return t;
}

}  // namespace loom::tune
