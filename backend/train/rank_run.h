// One rank's training run, shared by its set-up (rank_setup.cpp), its step loop
// (step_loop.cpp) and the library entry point (trainer.cpp). Internal to backend/train.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/optim/adamw.h>
#include <torch/types.h>

#include "backend/comm/collective_log.h"
#include "backend/comm/communicator.h"
#include "backend/comm/mesh_groups.h"
#include "backend/cost/profile.h"
#include "backend/exec/activation_checkpoint.h"
#include "backend/exec/gradient_reducer.h"
#include "backend/exec/optimizer_offload.h"
#include "backend/exec/state_copier.h"
#include "backend/exec/pipeline_stage.h"
#include "backend/exec/sharded_executor.h"
#include "backend/exec/tensor_parallel.h"
#include "backend/instrument/op_profiler.h"
#include "backend/ir/ir.h"
#include "backend/lower/lower_step.h"
#include "backend/lower/mesh_layout.h"
#include "backend/lower/pipeline_stages.h"
#include "backend/train/optimizer_checkpoint.h"
#include "backend/train/token_data.h"
#include "backend/train/trainer.h"
#include "lang/schedule.h"
#include "models/zoo_torch.h"
#include "verifier/differential/step_record.h"

namespace loom {

class TimelineObserver;  // rank_setup.cpp: module calls as timeline spans

// One rank's run, set up: the schedule's plan, the devices and groups, the model with its
// executors and interceptors, the optimizer. Filled by set_up_rank, used by
// train_step and finish_rank; never moved, since the interceptors point at one another.
struct RankRun {
  TrainOptions o;  // the command line's, with the schedule's batch() applied (plan_rank)
  RankEnv env;
  int threads = 1;
  std::unique_ptr<Schedule> sch;
  RuntimePlan plan;
  std::unique_ptr<PipelineStages> stages;
  std::unique_ptr<TokenSource> data;
  bool cuda = false, nccl = false, bf16 = false;
  int gpu = 0;
  torch::Device device = torch::kCPU;
  std::shared_ptr<comm::Group> world;
  BuiltModel model;
  std::vector<torch::Tensor> params;  // unique, this rank's (its stage's, its tensor-parallel slices)
  std::vector<std::string> param_names;
  int64_t start = 0;  // steps done before this run (resume)
  std::filesystem::path resume_dir;
  std::unique_ptr<MeshGroups> mesh;
  MeshLayout layout;
  std::unique_ptr<TensorParallel> tensor_parallel;
  std::unique_ptr<ActivationCheckpointer> checkpointer;
  ir::OpTrace trace;                 // the model's compute ops (the op profiler keeps a reference)
  std::optional<ir::Program> step;  // this rank's step program
  StepOptions step_options;         // what it was lowered with (a re-plan lowers again, with times)
  // What each group of passes (TimedGroup) of `step` was planned with: by sizes until a re-plan
  // that timed it is switched to (the inner loop's later rounds keep it, replan.h).
  std::map<TimedGroup, GroupPlanning> step_planned_with;
  std::vector<PassRecord> step_passes;  // how the pipeline lowered `step`, pass by pass
  std::unique_ptr<OpProfiler> profiler;
  std::unique_ptr<comm::CollectiveLog> collective_log;  // `loom profile`: its measured steps' collectives
  std::unique_ptr<ShardedExecutor> sharded;
  std::unique_ptr<StepRecorder> recorder;
  std::unique_ptr<PipelineStage> stage;
  std::vector<torch::Tensor> optimized;     // what the optimizer updates (shards' slices when sharded)
  std::vector<OptimizedRange> state_ranges;  // the optimizer's tensors as ranges (checkpoints)
  std::vector<OptimizedRange> ranges;        // the optimized tensors as ranges (records, faults)
  std::unique_ptr<OptimizerOffload> offload;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<StateCopier> state_copier;  // adaptive offloading's copies of the optimizer's states
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<TimelineObserver> observer;
  std::ofstream metrics;
  std::vector<int64_t> tokens;  // one micro-batch's samples

  RankRun(const TrainOptions& options, const RankEnv& rank_env);
  // The interceptors it installed point into it: none may outlive it (a library caller goes on).
  ~RankRun();
  bool lead() const { return env.rank == 0; }
};

// The gradient norm is measured for clipping, and for the metrics (which report it even with
// --clip 0); where parts of the gradients live on different ranks that costs an all-reduce.
inline bool measures_grad_norm(const TrainOptions& o) { return o.clip > 0 || !o.metrics.empty(); }

// Everything before the first step (rank_setup.cpp), on a RankRun its caller made from the
// options and environment and holds: what it has connected when it throws stays open until the
// caller has said why (trainer.cpp).
void set_up_rank(RankRun& r);
// One optimizer step: its micro-batches, the reduced gradients clipped, the update, the loss
// averaged over the ranks, metrics, a checkpoint when one is due (step_loop.cpp).
StepMetrics train_step(RankRun& r, int64_t step, TrainResult& result);
// After the last step: interceptors off, the profile and the timeline written (step_loop.cpp).
void finish_rank(RankRun& r);
// The measured steps' collectives (launch and completion times), the log closed: train_step
// opens it at the first measured step (`loom profile`'s, a re-plan round's).
struct StepCollectives {
  std::vector<CollectiveSpan> spans;
  std::vector<double> step_starts;  // when each measured step began
  int unknown = 0;  // collectives without a completion time
};
StepCollectives close_collective_log(RankRun& r);
// Sets the in-step scales of `profile`'s collectives for this rank's program and measured steps
// (backend/cost/in_step_collectives.h): the mean over the ranks that could tell theirs, and for
// a pipeline's groups across stages the least, the closest to a figure without waiting for
// another stage. Collectives over the world: every rank calls it. 1 where no rank could tell
// (one rank, NCCL).
void set_in_step_scales(RankRun& r, const StepCollectives& measured, Profile& profile);
// Adaptive offloading: AdamW's states created now and a state copier attached to the sharded
// executor (rank_setup.cpp; a re-plan that starts moving states calls it too).
void attach_state_copier(RankRun& r);
// 1234567 -> "1,234,567".
std::string with_commas(int64_t n);

}  // namespace loom
