#include "backend/train/rank_run.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "backend/exec/activation_checkpoint.h"
#include "backend/build_info.h"
#include "backend/train/checkpoint_io.h"
#include "backend/cost/in_step_collectives.h"
#include "backend/cost/step_estimate.h"
#include "backend/instrument/collective_profiler.h"
#include "backend/comm/communicator.h"
#include "backend/exec/gradient_reducer.h"
#include "backend/train/launcher.h"
#include "backend/train/lr_schedule.h"
#include "backend/instrument/memory_counter.h"
#include "backend/instrument/model_trace.h"
#include "backend/instrument/op_profiler.h"
#include "backend/train/optimizer_checkpoint.h"
#include "backend/exec/optimizer_offload.h"
#include "backend/train/replan.h"
#include "backend/train/output_paths.h"
#include "backend/comm/mesh_groups.h"
#include "backend/train/mesh_model.h"
#include "backend/passes/pass_pipeline.h"
#include "backend/exec/pipeline_stage.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/comm/shard_groups.h"
#include "backend/exec/sharded_grad_clip.h"
#include "backend/exec/sharded_executor.h"
#include "verifier/differential/step_record.h"
#include "backend/exec/tensor_parallel.h"
#include "backend/instrument/timeline.h"
#include "backend/train/token_data.h"
#include "backend/torch_compat.h"
#include "models/zoo.h"
#include "models/zoo_torch.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// One --metrics line. A write that fails (a full disk) is a UserError.
void write_metrics_row(std::ofstream& out, const std::string& path, const StepMetrics& m, int64_t between_micro_batches) {
  char loss_text[40];
  std::snprintf(loss_text, sizeof loss_text, "%.17g", m.loss);  // every digit: runs compare bit for bit
  nlohmann::json row{{"step", m.step}, {"loss", nlohmann::json::parse(loss_text)}, {"lr", m.lr},
                     {"tokens_per_s", m.tokens_per_s}, {"step_ms", m.step_ms}, {"peak_mem_bytes", m.peak_bytes},
                     {"resident_between_micro_batches_bytes", between_micro_batches},
                     {"max_rss_bytes", memory::peak_resident_bytes()},
                     {"grad_norm", m.grad_norm >= 0 ? nlohmann::json(m.grad_norm) : nlohmann::json()}};
  out << row.dump() << "\n" << std::flush;
  if (!out)
    throw UserError(SourceRange{}, "could not write --metrics " + path + " after step " + std::to_string(m.step) + ": " +
                                       std::strerror(errno),
                    "free space or choose another --metrics file; --resume continues from the last checkpoint");
}

}  // namespace

StepCollectives close_collective_log(RankRun& r) {
  StepCollectives measured;
  if (r.collective_log) {
    measured.spans = r.collective_log->spans(&measured.unknown);
    measured.step_starts = r.collective_log->step_starts();
  }
  r.collective_log.reset();
  return measured;
}

namespace {

// This rank's in-step scale of `groups` (0 where it cannot tell).
double own_in_step_scale(RankRun& r, const StepCollectives& measured, const Profile& profile, InStepGroups groups) {
  try {
    if (measured.unknown == 0 && r.step) return in_step_scale(*r.step, profile, measured.spans, measured.step_starts, groups);
  } catch (const std::exception&) {  // caught: every rank must reach the all-reduces that follow
  }
  return 0;  // not told here; the other ranks' figures stand
}

// The mean of the ranks' positive figures; 1 where none is.
double mean_over_telling_ranks(comm::Group& world, double figure) {
  torch::Tensor sum = torch::tensor({figure, figure > 0 ? 1.0 : 0.0}, torch::kDouble);
  comm::all_reduce(world, sum).wait();
  double ranks = sum[1].item<double>();
  return ranks > 0 ? sum[0].item<double>() / ranks : 1;
}

// The least of the ranks' positive figures; 1 where none is.
double least_over_telling_ranks(comm::Group& world, double figure) {
  constexpr double kUntold = std::numeric_limits<double>::infinity();
  torch::Tensor least = torch::tensor({figure > 0 ? figure : kUntold}, torch::kDouble);
  comm::all_reduce(world, least, {comm::ReduceOp::Min}).wait();
  double value = least[0].item<double>();
  return value < kUntold ? value : 1;
}

}  // namespace

void set_in_step_scales(RankRun& r, const StepCollectives& measured, Profile& profile) {
  // Every rank's program has the same number of stages, so every rank reaches the same all-reduces.
  std::vector<InStepGroups> groups = r.step ? in_step_groups(*r.step) : std::vector<InStepGroups>{InStepGroups::All};
  for (InStepGroups g : groups) {
    double own = own_in_step_scale(r, measured, profile, g);
    double scale = g == InStepGroups::AcrossStages ? least_over_telling_ranks(*r.world, own) : mean_over_telling_ranks(*r.world, own);
    apply_in_step_scale(profile, scale, g);
  }
}

namespace {

// Profiling's end: the ops' figures, then the collective sweep on every group role of the
// run (the sharded executor's groups, the mesh's), all reduced across ranks, priced at the
// measured steps' in-step scale; rank 0 writes the profile (every rank too with
// LOOM_PROFILE_PER_RANK=1, which the tests use to check that all ranks hold the same).
void write_profile(RankRun& r) {
  const TrainOptions& o = r.o;
  StepCollectives measured = close_collective_log(r);  // what follows is not the steps'
  Profile profile;
  profile.key = o.profile_key;
  profile.device = r.device.is_cuda() ? "cuda" : "cpu";
  profile.measured_steps = static_cast<int>(o.steps - o.profile_warmup);
  profile.memory_limit_bytes = r.step_options.memory.limit;
  r.profiler->fill(profile, *r.world);
  bool lead = r.env.rank == 0;
  if (lead) std::cout << "loom profile: timing collectives on every process group of the run\n" << std::flush;
  profile.collectives = profile_collectives(*r.world, r.sharded ? &r.sharded->groups() : nullptr, r.mesh.get(), r.device);
  set_in_step_scales(r, measured, profile);
  std::string text = profile.to_json();
  auto write = [&](const std::string& path) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    write_output_file(path, {text}, "could not write the profile",
                      "free space, or give another --cache-dir (the profile is written there, then copied to --out)");
  };
  if (lead) write(o.profile_out);
  const char* per_rank = std::getenv("LOOM_PROFILE_PER_RANK");
  if (per_rank && std::string(per_rank) == "1") write(o.profile_out + ".rank" + std::to_string(r.env.rank));
}

// One micro-batch's forward and backward; returns its share of the step's loss (0 on a
// pipeline stage before the last, which hands its activation on).
double train_micro_batch(RankRun& r, int64_t step, int64_t micro, bool recording) {
  const TrainOptions& o = r.o;
  for (int64_t i = 0; i < o.micro_batch; ++i)
    r.data->sample(sample_index(step, micro, o.accum, r.layout.dp, r.layout.dp_rank, o.micro_batch, i), o.seq + 1,
                   r.tokens.data() + i * (o.seq + 1));
  torch::Tensor batch = torch::from_blob(r.tokens.data(), {o.micro_batch, o.seq + 1}, torch::kLong).to(r.device);
  torch::Tensor x = batch.narrow(1, 0, o.seq), y = batch.narrow(1, 1, o.seq).contiguous();
  if (r.sharded) r.sharded->begin_forward(micro, o.accum);
  if (r.profiler) r.profiler->begin_forward(measures_step(o, step));
  torch::Tensor logits;
  bool handed_on = false;  // a pipeline stage before the last: its activation went to the next stage
  {
    timeline::Span span("forward", "phase");
    if (recording) r.recorder->begin_forward();
    try {
      logits = r.model.forward(x);
    } catch (const StageForwardDone&) {
      handed_on = true;
    }
    if (recording) r.recorder->end_forward();
    if (r.sharded) r.sharded->finish_forward();
  }
  // The loss in fp32 whatever the compute dtype.
  torch::Tensor loss;
  if (!handed_on)
    loss = torch::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, r.model.vocab_size}), y.reshape({-1})) /
           static_cast<double>(o.accum);
  if (r.bf16) compat::clear_autocast_cache();
  if (recording && loss.defined()) r.recorder->add(RecordKind::Loss, "loss", micro, 0, loss);
  if (r.reducer) r.reducer->prepare(micro == o.accum - 1);
  {
    timeline::Span span("backward", "phase");
    if (r.profiler) r.profiler->begin_backward();
    if (handed_on) r.stage->backward_from_next_stage();
    else loss.backward();
    if (r.stage && r.sharded) r.sharded->run_backward_to_send();
    if (r.reducer) r.reducer->backward_returned();
    if (r.stage) r.stage->send_gradient_to_previous_stage();
    if (r.profiler) r.profiler->end_backward();
    if (r.reducer) r.reducer->finish();
    if (r.sharded) r.sharded->finish_backward();
  }
  return loss.defined() ? loss.item<double>() : 0;
}

// The global gradient norm before clipping, clipped to --clip; NaN when not measured.
double clip_gradients(RankRun& r) {
  const TrainOptions& o = r.o;
  if (!measures_grad_norm(o)) return std::numeric_limits<double>::quiet_NaN();
  double max_norm = o.clip > 0 ? o.clip : std::numeric_limits<double>::infinity();
  if (!r.mesh) return r.sharded ? r.sharded->clip_gradients(max_norm) : torch::nn::utils::clip_grad_norm_(r.params, max_norm);
  // Each element once over the model group's ranks (with sharded states, their slices): tensor-
  // parallel slices everywhere, the rest on tp rank 0 of the stage that trains it (stage 0 for
  // what every stage holds).
  std::vector<bool> counted;
  for (const OptimizedRange& range : r.ranges) {
    int s = r.stages ? r.stages->stage_of_param(range.param) : -1;
    counted.push_back((r.tensor_parallel->split_axis(range.param) >= 0 || r.layout.tp_rank == 0) && (s >= 0 || r.layout.stage == 0));
  }
  return clip_sharded_grad_norm(r.optimized, r.mesh->model.get(), max_norm, counted);
}

// Milliseconds `work` takes, its device work included (a step-tail instruction the profile times).
double timed_ms(RankRun& r, const std::function<void()>& work) {
  if (r.cuda) compat::cuda_synchronize();
  auto start = std::chrono::steady_clock::now();
  work();
  if (r.cuda) compat::cuda_synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// clip_gradients, its own work timed for the profile in a measured step: the norm and the
// clipping, less the time spent waiting for the norm's all-reduce (that is the collective's).
// Not on NCCL, whose Work::wait() does not block the host: the time would hold the all-reduce
// and the wait for late peers (the profile then says not measured).
double timed_clip_gradients(RankRun& r, bool timed) {
  if (!timed || r.nccl) return clip_gradients(r);
  double norm = 0, blocked = comm::blocked_ms();
  double ms = timed_ms(r, [&] { norm = clip_gradients(r); });
  r.profiler->grad_norm_took(std::max(0.0, ms - (comm::blocked_ms() - blocked)));
  return norm;
}

// loom verify's record of the first step: reduced gradients (before clipping), compression
// bounds, and the parameters after the update.
void record_gradients(RankRun& r, int64_t step, double lr) {
  for (const OptimizedRange& range : r.ranges)  // each rank's part (as shaped: tensor-parallel slices)
    if (range.tensor.grad().defined()) r.recorder->add(RecordKind::ParamGrad, range.param, 0, range.offset, range.tensor.grad());
  // Compressed gradients are lossy by design: their stated bounds. AdamW's first step moves
  // each element by lr * |m| / (sqrt(v) + eps) < lr, so the updated values differ by < 2 lr.
  if (r.sharded)
    for (const auto& b : r.sharded->compression_bounds())
      r.recorder->add(RecordKind::Bound, b.param, 0, 0,
                      torch::tensor({b.bound, step == 0 ? 2 * lr : std::numeric_limits<double>::infinity(),
                                     static_cast<double>(b.estimated)},
                                    torch::dtype(torch::kDouble)));
}

void record_parameters(RankRun& r) {
  const TrainOptions& o = r.o;
  if (r.sharded) r.sharded->gather_all();
  if (r.layout.dp_rank == 0)  // every replica holds the same parameters after the step
    for (size_t i = 0; i < r.params.size(); ++i) r.recorder->add(RecordKind::Param, r.param_names[i], 0, 0, r.params[i]);
  if (r.sharded) r.sharded->release_all();
  fs::create_directories(o.record);
  try {
    if (r.lead())  // how loom verify reassembles the ranks' records into the plain model's
      write_whole_file((fs::path(o.record) / "mesh.json").string(), nlohmann::json{{"tp", r.layout.tp}, {"pp", r.layout.pp}}.dump() + "\n");
    r.recorder->write((fs::path(o.record) / ("rank-" + std::to_string(r.env.rank) + ".pt")).string());
  } catch (const WriteError& e) {
    throw UserError(SourceRange{}, std::string("--record: ") + e.what(), "free space, or record into another directory");
  }
}

// What the step's tail produces: the loss over every rank (the sum of this rank's micro-batch
// losses until it is reduced) and the gradient norm (NaN when not measured).
struct StepTail {
  double loss = 0;
  bool timed = false;  // the op profiler measures this step: the optimizer step is timed too
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

// The loss summed over `group` and averaged over its `holders` ranks.
double reduced_loss(RankRun& r, comm::Group& group, double loss, int holders) {
  torch::Tensor t = torch::tensor({loss}, torch::TensorOptions().dtype(torch::kDouble)).to(r.device);
  comm::all_reduce(group, t).wait();
  return t.item<double>() / holders;
}

// What this rank's optimizer updates of parameter `name` (the parameter, or its slice).
const torch::Tensor& optimized_tensor(const RankRun& r, const std::string& name) {
  for (const OptimizedRange& range : r.ranges)
    if (range.param == name) return range.tensor;
  throw InternalError("the step program names " + name + ", which this rank does not update");
}

// The elements this rank's optimizer updates.
int64_t optimized_elements(const RankRun& r) {
  int64_t elements = 0;
  for (const OptimizedRange& range : r.ranges) elements += range.tensor.numel();
  return elements;
}

// The step's tail as the program says, one handler per instruction kind: the pipeline's sum of
// shared gradients, the gradient norm and clipping, the offload copies around the optimizer
// step, the spread of updated slices, the loss reduction. Each handler's collective completes
// before it returns, so waits are done. `reduced` runs once the gradients are reduced, before
// anything reads them (loom verify records them there).
void run_step_tail(RankRun& r, const ir::Program& program, StepTail& tail, const std::function<void()>& reduced) {
  bool published = false, seen_reduced = false;
  for (const ir::Instr& in : program.instrs) {
    if (in.phase != ir::Phase::Step) continue;
    if (!seen_reduced && in.kind != ir::OpKind::AllReduce && in.kind != ir::OpKind::Wait) {
      reduced();
      seen_reduced = true;
    }
    switch (in.kind) {
      case ir::OpKind::AllReduce: {  // gradients of what every stage holds (their slices), summed over the pipeline
        if (in.group.role != ir::Role::Pipeline || !r.stage) throw InternalError("the step's tail all-reduces over " + std::string(ir::role_name(in.group.role)));
        std::vector<torch::Tensor> shared;
        for (int q : in.params) shared.push_back(optimized_tensor(r, program.params[q].name));
        r.stage->sum_shared_gradients(shared);
        break;
      }
      case ir::OpKind::GradNorm: tail.grad_norm = timed_clip_gradients(r, tail.timed); break;
      case ir::OpKind::Offload: r.offload->gradients_to_host(); break;
      case ir::OpKind::OptimizerStep:
        if (tail.timed) r.profiler->optimizer_step_took(timed_ms(r, [&] { r.optimizer->step(); }), optimized_elements(r));
        else r.optimizer->step();
        if (r.sharded) r.sharded->drop_gradients();
        break;
      case ir::OpKind::Reload: r.offload->values_to_device(); break;
      case ir::OpKind::Broadcast:  // the sharded executor spreads every updated slice at once
        if (!published) r.sharded->publish();
        published = true;
        break;
      case ir::OpKind::LossReduce:  // the last stage's ranks hold the loss
        tail.loss = reduced_loss(r, *r.world, tail.loss, in.group.size / program.mesh.pp);
        break;
      case ir::OpKind::Wait: break;
      default: throw InternalError(std::string("the step's tail has no handler for ") + ir::op_name(in.kind));
    }
  }
  if (!seen_reduced) reduced();
}

}  // namespace

// One optimizer step: its micro-batches, the reduced gradients clipped, the update, the loss
// averaged over the ranks, metrics and progress on rank 0, a checkpoint when one is due.
StepMetrics train_step(RankRun& r, int64_t step, TrainResult& result) {
  const TrainOptions& o = r.o;
  bool recording = r.recorder && step == r.start;
  // Open through the round's last measured step; gloo's only: NCCL completes a work's future
  // when the collective is queued, not done, so its spans would say nothing.
  if (r.profiler && !r.nccl && measures_step(o, step) && !r.collective_log)
    r.collective_log = std::make_unique<comm::CollectiveLog>();
  if (r.collective_log && measures_step(o, step)) r.collective_log->begin_step();
  auto t0 = std::chrono::steady_clock::now();
  std::optional<timeline::Span> step_span;  // ends with the metrics, before a checkpoint is written
  step_span.emplace("step " + std::to_string(step + 1), "step");
  memory::reset_peak();
  if (r.cuda) compat::cuda_reset_peak(r.gpu);
  double lr = learning_rate(o, step);
  for (auto& group : r.optimizer->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  compat::zero_gradients(*r.optimizer);
  double loss_sum = 0;
  int64_t between_micro_batches = -1;
  for (int64_t micro = 0; micro < o.accum; ++micro) {
    loss_sum += train_micro_batch(r, step, micro, recording);
    // Between micro-batches only model states stay resident (lins.txt §IV-D's quantity).
    if (micro == 0 && o.accum > 1 && !r.cuda) between_micro_batches = memory::current_bytes();
  }
  StepTail tail{loss_sum};
  tail.timed = r.profiler && measures_step(o, step);
  {
    timeline::Span optimizer_span("optimizer", "phase");
    if (r.sharded) r.sharded->average_gradients();
    run_step_tail(r, *r.step, tail, [&] {
      if (recording) record_gradients(r, step, lr);
    });
  }
  if (recording) record_parameters(r);
  double loss = tail.loss, grad_norm = tail.grad_norm;
  if (r.cuda) compat::cuda_synchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (r.profiler) r.profiler->step_took(ms);  // kept for a measured step only
  int64_t tokens = r.layout.dp * o.micro_batch * o.seq * o.accum;
  double tokens_per_s = static_cast<double>(tokens) / (ms / 1000.0);
  int64_t peak = r.cuda ? compat::cuda_peak_bytes(r.gpu) : memory::peak_bytes();
  step_span.reset();
  StepMetrics measured{step + 1, loss, lr, std::isfinite(grad_norm) ? grad_norm : -1, tokens_per_s, ms, peak};
  if (r.metrics.is_open()) write_metrics_row(r.metrics, o.metrics, measured, between_micro_batches);
  result.tokens += tokens;
  result.peak_bytes = std::max(result.peak_bytes, peak);
  bool last = step + 1 == o.steps;
  if (!o.save_dir.empty() && (last || (o.save_every > 0 && (step + 1) % o.save_every == 0))) {
    comm::CollectiveLog::Pause not_the_step(r.collective_log.get());
    if (r.sharded) r.sharded->gather_all();  // for the consolidated model.pt
    // Under a mesh rank 0 puts the whole model together from the ranks that hold its parts.
    BuiltModel whole;
    if (r.mesh && r.lead()) whole = build_model(o.model);
    if (r.mesh) gather_whole_model(*r.world, r.layout, *r.model.module, *r.tensor_parallel, r.stages.get(), whole.module.get());
    // The first optimizer block of each data-parallel group holds every optimizer range once.
    write_checkpoint(o, *r.world, step + 1, whole.module ? *whole.module : *r.model.module, *r.optimizer, r.state_ranges,
                     r.layout.dp_rank < r.plan.factors.optim, {r.env.world, r.layout.tp, r.layout.pp},
                     r.sharded ? r.sharded->compression_residuals() : std::map<std::string, torch::Tensor>{});
    if (r.sharded) r.sharded->release_all();
    result.checkpoint = (fs::path(o.save_dir) / checkpoint_step_name(step + 1)).string();
  }
  return measured;
}

namespace {
// Writes one of --trace's files (a rank's events, or the merged trace); `kept`: what is left of
// the trace if this write fails.
void write_trace_file(const std::string& path, const std::string& text, const std::string& kept = "") {
  write_output_file(path, {text}, "--trace",
                    "free space or choose another --trace file (the run's steps are done; its --save checkpoints are kept" + kept + ")");
}
}  // namespace

// After the last step: interceptors off, the profile and the timeline written.
void finish_rank(RankRun& r) {
  const TrainOptions& o = r.o;
  nn::set_call_interceptor(nullptr);
  nn::set_call_observer(nullptr);
  if (r.profiler && !o.profile_out.empty()) write_profile(r);
  if (!o.trace.empty()) {
    // Each rank writes its events; rank 0 merges them (ranks of one node share the file system).
    write_trace_file(o.trace + ".rank" + std::to_string(r.env.rank), timeline::rank_events());
    comm::barrier(*r.world);
    if (r.lead() && r.env.world == r.env.local_world) {
      write_trace_file(o.trace, timeline::merged_trace(o.trace, r.env.world), "; each rank's events are in " + o.trace + ".rank<N>");
      timeline::remove_rank_files(o.trace, r.env.world);
    }
  }
  comm::barrier(*r.world);
}

}  // namespace loom
