#include "backend/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include <torch/types.h>

#include "backend/build_info.h"
#include "backend/comm/communicator.h"
#include "backend/train/replan.h"
#include "backend/instrument/memory_counter.h"
#include "backend/torch_compat.h"
#include "backend/train/launcher.h"
#include "backend/train/launcher_report.h"
#include "backend/train/lr_schedule.h"
#include "backend/train/rank_run.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {

namespace {

// Progress: a redrawn bar on a terminal, plain lines otherwise.
class Progress {
 public:
  Progress(int64_t total) : total_(total), tty_(isatty(STDOUT_FILENO)) {}
  void update(int64_t step, double loss, double tokens_per_s, double step_ms, int64_t peak) {
    char line[256];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  %.1f ms/step  peak %s",
                  static_cast<long long>(step), static_cast<long long>(total_), loss, tokens_per_s, step_ms,
                  format_size(peak).c_str());
    if (tty_) {
      int width = 24, filled = static_cast<int>(width * step / std::max<int64_t>(total_, 1));
      std::string bar = "[" + std::string(filled, '=') + std::string(width - filled, ' ') + "] ";
      std::cout << "\r" << bar << line << "\033[K" << std::flush;
      if (step == total_) std::cout << "\n";
    } else {
      std::cout << line << "\n" << std::flush;
    }
  }

 private:
  int64_t total_;
  bool tty_;
};


std::string describe_summary(const TrainOptions& o, const TrainResult& r) {
  char line[256];
  std::snprintf(line, sizeof line, "loom run: done: %lld step%s, %s tokens in %.1f s (%.0f tokens/s), final loss %.4f, peak memory %s on rank 0\n",
                static_cast<long long>(r.steps.size()), r.steps.size() == 1 ? "" : "s", with_commas(r.tokens).c_str(), r.seconds, r.tokens / std::max(r.seconds, 1e-9),
                r.final_loss(), format_size(r.peak_bytes).c_str());
  std::string out = line;
  out += "  start-up: peak resident memory " + format_size(r.startup_rss_bytes) + " (the largest rank)\n";
  if (!r.checkpoint.empty()) out += "  checkpoint: " + r.checkpoint + "\n";
  if (!o.metrics.empty()) out += "  metrics: " + o.metrics + "\n";
  if (!o.trace.empty()) out += "  trace: " + o.trace + "\n";
  return out;
}

}  // namespace

double learning_rate(const TrainOptions& o, int64_t step) {
  return LrSchedule{o.lr, o.min_lr_ratio, o.warmup, o.steps}.at(step);
}

std::string resolved_device(const TrainOptions& o) {
  return o.device == "cuda" || (o.device == "auto" && compat::cuda_available()) ? "cuda" : "cpu";
}

int resolved_threads(const TrainOptions& o, int local_world) {
  return o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world));
}

namespace {

// The peak resident size of the largest rank so far.
int64_t largest_peak_rss(comm::Group& world, torch::Device device) {
  torch::Tensor rss = torch::tensor({static_cast<double>(memory::peak_resident_bytes())}, torch::dtype(torch::kDouble)).to(device);
  comm::all_reduce(world, rss, {comm::ReduceOp::Max}).wait();  // set-up, not the step
  return static_cast<int64_t>(rss.item<double>());
}

// A set-up rank's steps, replans and outputs.
TrainResult train_rank(RankRun& r, const TrainOptions& o) {
  Progress progress(o.steps);
  TrainResult result;
  result.startup_rss_bytes = largest_peak_rss(*r.world, r.device);
  result.replan_at = r.o.replan_at;  // --replan-at, or its default for this schedule
  auto run_start = std::chrono::steady_clock::now();
  for (int64_t step = r.start; step < o.steps; ++step) {
    StepMetrics measured = train_step(r, step, result);
    if (r.lead()) progress.update(measured.step, measured.loss, measured.tokens_per_s, measured.step_ms, measured.peak_bytes);
    result.steps.push_back(measured);
    if (replans_after(r.o, step + 1) && replan(r, step + 1, result)) {
      result.replanned_at = step + 1;
      result.switched_after.push_back(step + 1);
    }
  }
  finish_rank(r);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  return result;
}

}  // namespace

TrainResult run_training(const TrainOptions& o, const RankEnv& env) {
  auto r = std::make_unique<RankRun>(o, env);
  set_up_rank(*r);
  return train_rank(*r, o);
}

int train(const TrainOptions& o, const RankEnv& env) {
  // The rank outlives the handlers: its error is printed before its connections close, so a peer
  // that fails because they closed says so after it, in a shared log and under any launcher.
  auto r = std::make_unique<RankRun>(o, env);
  RankFailure failure;
  int exit_code = 1;
  try {
    set_up_rank(*r);
    TrainResult result = train_rank(*r, o);
    if (env.rank == 0 && o.profile_out.empty() && o.record.empty())
      std::cout << describe_summary(o, result) << describe_replan_outcome(result) << std::flush;
    return 0;
  } catch (const UserError& e) {
    failure.said = render(e.diagnostic(), nullptr);
  } catch (const comm::CommError& e) {
    // Another process's failure as this rank sees it: not a Loom bug.
    failure.said = "error: " + std::string(e.what()) + "\n  hint: " + kAnotherRankStopped + " (its own message says why); if the " +
                   "ranks are only slow, raise --timeout (now " + std::to_string(o.timeout_s) + " s)\n";
    failure.consequence = true;
  } catch (const std::exception& e) {
    // A Loom bug, or running out of memory: printed before the rank's connections close too.
    EscapedError report = escaped_error_report(
        e, "the step needs more memory than this rank has: a smaller micro-batch (--micro-batch, or the schedule's "
           "batch(); raise --accum to keep the batch), sharded model states (zero(stage=3), shard_states), checkpoint() "
           "blocks or offload(\"optimizer\"); `loom simulate --memory-plot` predicts a schedule's peak, and `loom plan "
           "--memory-limit` picks one that fits");
    failure.said = report.text;
    exit_code = report.exit_code;
  }
  std::cerr << failure.said << std::flush;
  write_launcher_error_file(failure);
  r.reset();
  delay_consequence_exit(failure);
  return exit_code;
}

}  // namespace loom
