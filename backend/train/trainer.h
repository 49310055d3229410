// A training run's options (TrainOptions), what each step reports (StepMetrics), its result, and
// the entry points that check and run it on one rank (rank_setup.cpp builds the rank: model,
// data, executors, AdamW with warmup + cosine learning rate; step_loop.cpp runs its steps:
// clipping, accumulation, metrics, checkpoints that resume exactly, the re-plans).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/lower/runtime_plan.h"
#include "backend/train/rank_env.h"
#include "lang/directive.h"

namespace loom {

// --replan-at unset: the run re-plans after step 3 where the memory-aware passes would plan
// from measurements (default_replan_at in replan.h), as deepcompile.txt's loop does.
constexpr int64_t kReplanByDefault = -1;

struct TrainOptions {
  std::string schedule_file;          // empty: no directives (plain data parallelism)
  std::string model = "gpt:tiny";
  std::string data = "synthetic";     // a token file, or "synthetic"
  int64_t micro_batch = 4;            // sequences per rank per micro-batch
  int64_t seq = 128;                  // tokens per sequence
  int64_t steps = 50;
  int64_t accum = 1;                  // micro-batches per optimizer step
  double lr = 3e-3;                   // peak learning rate
  double min_lr_ratio = 0.1;          // cosine decays to lr * min_lr_ratio
  int64_t warmup = 10;                // linear warmup steps
  double weight_decay = 0.1;
  double clip = 1.0;                  // global gradient-norm clip; 0 disables
  uint64_t seed = 1234;
  int threads = 0;                    // intra-op threads per rank; 0: cores / local ranks
  std::string reduce_dtype = "fp32";  // gradients on the wire: "fp32", "fp16", or "bf16" (NCCL only)
  std::string precision = "bf16";     // on GPU: "bf16" (autocast, fp32 master weights) or "fp32"
  std::string backend = "auto";       // collectives: "nccl" (cuda), "gloo", or "auto": nccl on cuda, gloo on cpu
  std::string device = "auto";        // "cpu", "cuda" (bf16 autocast, NCCL), or "auto": cuda when built with it and a GPU is there
  std::string save_dir;               // write checkpoints here
  int64_t save_every = 0;             // also every K steps (0: only at the end)
  std::string resume;                 // a checkpoint directory (or its parent) to continue from
  std::string metrics;                // JSON lines, one per step (rank 0)
  std::string trace;                  // Chrome trace of the executed timeline (all ranks, merged by rank 0)
  int timeout_s = 300;                // store and collective timeout
  int64_t replan_at = kReplanByDefault;  // the two-level loop (backend/train/replan.h): re-plan after this step; 0: never
  // And again every this many steps after it, on the latest steps' measurements; 0: once. Unset,
  // set-up (plan_replan_rounds, replan.h) sets the inner loop's: a round per group of passes.
  int64_t replan_every = 0;
  // Re-plans in all, set at set-up without --replan-every (plan_replan_rounds): one per group of
  // passes the schedule plans from measurements; 0: every E steps to the end of the run.
  int64_t replan_rounds = 0;
  // Bytes per rank the memory-aware passes plan within (docs/passes.md); 0: none; -1: not
  // given, which on a GPU is 90% of its memory and on a CPU none (MemoryPlanning::limit_or_default).
  int64_t memory_limit = -1;
  int64_t bucket_bytes = 1 << 20;     // gradient bucket size
  std::vector<std::string> sets;      // --set knob=value
  // Profiling (loom profile) instead of training: the first profile_warmup steps are not
  // measured, the rest are; rank 0 writes the profile, tagged with profile_key, to profile_out.
  std::string profile_out;
  std::string profile_key;
  int64_t profile_warmup = 1;
  std::string stdlib;
  // Differential testing (loom verify): each rank writes its record of the first step to
  // record/rank-R.pt (step_record.h); trace_prefix >= 0 applies only that many of the
  // schedule's directives (bisection).
  std::string record;
  int64_t trace_prefix = -1;
};

// Validates everything that can be checked before starting ranks: the schedule (at
// `world` ranks) and the data file. Returns the directives the run applies (all of the
// schedule's, or its --trace-prefix) and their lowering. Throws UserError.
struct ValidatedRun {
  std::vector<Directive> directives;
  RuntimePlan plan;
};
ValidatedRun validate_run(const TrainOptions& options, int world, int local_world);
// The options with the micro-batch and accumulation the schedule's batch() sets (the command
// line's where it sets none, or where the schedule does not evaluate: its run says why).
TrainOptions with_schedule_batch(const TrainOptions& options, int world, int local_world);

// What "auto" and 0 resolve to on this machine: "cpu" or "cuda"; intra-op threads per rank.
std::string resolved_device(const TrainOptions& options);
int resolved_threads(const TrainOptions& options, int local_world);

// One optimizer step as this rank measured it (what --metrics writes on rank 0).
struct StepMetrics {
  int64_t step = 0;        // 1-based
  double loss = 0;         // the step's loss, averaged over the ranks that hold it
  double lr = 0;
  double grad_norm = -1;   // the global gradient norm before clipping; -1 when not measured
  double tokens_per_s = 0; // over all ranks
  double step_ms = 0;
  int64_t peak_bytes = 0;  // this rank's peak tensor memory during the step
};

// What a training run did, on this rank.
struct TrainResult {
  std::vector<StepMetrics> steps;  // the steps this run trained (after a resume: from there on)
  int64_t tokens = 0;              // over all ranks
  double seconds = 0;
  int64_t peak_bytes = 0;          // the largest step peak on this rank
  int64_t startup_rss_bytes = 0;   // the peak resident size once set up, the largest over the ranks
  std::string checkpoint;          // the last checkpoint written, if any
  int64_t replan_at = 0;           // the step the run first re-planned after (--replan-at or its default); 0: none
  int64_t replanned_at = 0;        // the last step after which every rank switched programs; 0: none
  std::vector<int64_t> switched_after;  // every such step, in order
  // NaN when no step ran (a resume at or past --steps).
  double final_loss() const { return steps.empty() ? std::nan("") : steps.back().loss; }
};

// Trains on this rank: the library entry point (the CLI, the tuner and the bindings call it).
// Throws UserError for the user's mistakes and comm::CommError when another rank fails.
TrainResult run_training(const TrainOptions& options, const RankEnv& env);

// Trains on this rank for the command line: prints errors, before the rank's connections close;
// returns the process exit code.
int train(const TrainOptions& options, const RankEnv& env);

// The learning rate at `step`: linear warmup, then cosine decay to lr * min_lr_ratio.
double learning_rate(const TrainOptions& options, int64_t step);

}  // namespace loom
