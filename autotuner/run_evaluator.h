// Real runs as an evaluator (`loom tune --evaluator run`): each point trains in a `loom run`
// process of its own (its ranks in one process group), for a few steps on synthetic tokens,
// under a time limit. The objective is the measured tokens per second per rank (the median step
// after the first two); a run that exits with an error is failed, one past its time limit is
// killed and timed out, one whose peak memory passes the limit is infeasible, and the sweep goes
// on. A stop request (Ctrl-C) kills the running trial's ranks. Torch-free.
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "autotuner/evaluator.h"

namespace loom::tune {

struct RunSettings {
  std::string loom;          // the loom executable
  std::string schedule;      // the .sched file
  std::string schedule_key;  // a hash of its text, for the database
  std::vector<std::string> run_args;  // --model, --nproc, the shapes and the rest, as `loom run` takes them
  std::string context;       // what else the trials depend on (model, world, shapes), for the database
  int steps = 6;             // trained per trial; the first two are not measured
  int world = 1;
  double timeout_s = 300;
  int64_t memory_limit = 0;  // bytes per rank; 0: none
};

// Thrown when a stop was requested: the running trial's ranks were killed.
struct SweepInterrupted : std::runtime_error {
  SweepInterrupted() : std::runtime_error("the sweep was interrupted") {}
};

class RunEvaluator : public Evaluator {
 public:
  // Makes a work directory for the trials' logs and metrics (loom-tune-XXXXXX in $TMPDIR, or /tmp).
  RunEvaluator(RunSettings settings, const std::atomic<bool>* stop);
  ~RunEvaluator() override;  // removes the work directory unless a failed trial's log is in it
  std::string context() const override;
  // A trial's metrics are removed once it is read, and its log too unless the trial failed or
  // timed out: that log stays, and the trial's message names it.
  Trial evaluate(const Point& point) override;
  bool scale_effort(int scale) override;

 private:
  Trial run_trial(const Point& point, const std::string& base);  // `base`: the log's and metrics' path less .log/.jsonl
  RunSettings s_;
  std::string work_dir_;
  int base_steps_ = s_.steps;
  double base_timeout_s_ = s_.timeout_s;
  const std::atomic<bool>* stop_;
  int trials_ = 0;
};

}  // namespace loom::tune
