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
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "backend/exec/activation_checkpoint.h"
#include "backend/sim/memory_walk.h"
#include "backend/build_info.h"
#include "backend/train/checkpoint_io.h"
#include "backend/instrument/collective_profiler.h"
#include "backend/comm/communicator.h"
#include "backend/exec/gradient_reducer.h"
#include "backend/train/launcher.h"
#include "backend/train/lr_schedule.h"
#include "backend/instrument/memory_counter.h"
#include "backend/instrument/model_trace.h"
#include "backend/instrument/op_profiler.h"
#include "backend/train/optimizer_checkpoint.h"
#include "backend/train/replan.h"
#include "backend/exec/optimizer_offload.h"
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
#include "backend/exec/state_copier.h"
#include "models/replacements.h"
#include "verifier/differential/step_record.h"
#include "backend/exec/tensor_parallel.h"
#include "backend/instrument/timeline.h"
#include "backend/train/token_data.h"
#include "backend/torch_compat.h"
#include "lang/interpreter.h"
#include "lang/trace.h"
#include "lang/value.h"
#include "verifier/schedule_rules.h"
#include "models/zoo.h"
#include "models/zoo_torch.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// `print_to`: where the schedule's print() goes (null: nowhere, so a run prints it once).
std::unique_ptr<Schedule> evaluate_schedule(const TrainOptions& o, int world, int local_world, SourceManager& sources,
                                            std::ostream* print_to) {
  auto sch = std::make_unique<Schedule>(module_tree_of(o.model), ScheduleContext{world, local_world});
  apply_settings(sch->knobs(), o.sets);
  if (!o.schedule_file.empty()) {
    InterpreterOptions io;
    io.stdlib_dir = o.stdlib;
    io.print_to = print_to;
    Interpreter(*sch, sources, io).run_file(o.schedule_file);
  }
  sch->knobs().check_overrides_used();
  check_schedule_rules(*sch);
  if (o.trace_prefix >= 0 && static_cast<size_t>(o.trace_prefix) < sch->trace().size()) {
    // Bisection: the first directives only, replayed onto the plain model.
    std::vector<Directive> prefix(sch->trace().begin(), sch->trace().begin() + o.trace_prefix);
    sch = std::make_unique<Schedule>(module_tree_of(o.model), ScheduleContext{world, local_world});
    replay(prefix, *sch);
    check_schedule_rules(*sch);
  }
  return sch;
}

std::unique_ptr<TokenSource> open_data(const TrainOptions& o) {
  if (o.data == "synthetic") return synthetic_tokens(256, o.seed);
  return open_token_file(o.data, o.seq + 1);
}

void check_options(const TrainOptions& o) {
  auto positive = [](int64_t v, const char* flag) {
    if (v < 1) throw UserError(SourceRange{}, std::string(flag) + " must be at least 1, got " + std::to_string(v), "");
  };
  positive(o.micro_batch, "--micro-batch");
  positive(o.seq, "--seq");
  positive(o.steps, "--steps");
  positive(o.accum, "--accum");
  if (o.replan_at != 0 && o.replan_at != kReplanByDefault && (o.replan_at < 2 || o.replan_at >= o.steps))
    throw UserError(SourceRange{},
                    "--replan-at " + std::to_string(o.replan_at) + ": the re-plan needs a measured step after the first and a step " +
                        "after it to run on (--steps " + std::to_string(o.steps) + ")",
                    "give --replan-at between 2 and --steps - 1, e.g. --replan-at 3");
  if (o.replan_every != 0 && o.replan_at <= 0)
    throw UserError(SourceRange{}, "--replan-every " + std::to_string(o.replan_every) + " without --replan-at: it says how often to "
                                   "re-plan again after the first re-plan",
                    "add --replan-at K for the first, e.g. --replan-at 3 --replan-every " + std::to_string(o.replan_every));
  if (o.replan_every != 0 && o.replan_every < 2)
    throw UserError(SourceRange{}, "--replan-every " + std::to_string(o.replan_every) + ": a round runs the new program's first "
                                   "step unmeasured (warm-up) and measures the steps after it",
                    "give at least 2, e.g. --replan-every 3");
  if (o.replan_at > 0 && !o.resume.empty())
    throw UserError(SourceRange{}, "--replan-at with --resume: a resumed run does not re-plan yet",
                    "drop --replan-at, or start the run afresh");
  if (o.replan_at > 0 && !o.profile_out.empty())
    throw UserError(SourceRange{}, "loom profile does not re-plan: it measures the program as planned", "drop --replan-at");
  if (!(o.lr > 0)) throw UserError(SourceRange{}, "--lr must be positive", "e.g. --lr 3e-3");
  if (o.reduce_dtype == "bf16" && !(resolved_device(o) == "cuda" && o.backend != "gloo"))
    throw UserError(SourceRange{}, "--reduce-dtype bf16 needs NCCL (gloo in LibTorch 1.13 has no bf16 reductions)",
                    "use --reduce-dtype fp16 with gloo, or train on GPUs with --backend nccl");
  if (o.device == "cuda" && !compat::cuda_available())
    throw UserError(SourceRange{}, "--device cuda, but this loom has no CUDA or sees no GPU",
                    "build with -DLOOM_WITH_CUDA=ON against a CUDA LibTorch, or use --device cpu");
  if (o.backend == "nccl" && resolved_device(o) != "cuda")
    throw UserError(SourceRange{}, "--backend nccl needs --device cuda (NCCL moves GPU tensors only)",
                    "use --backend gloo (or auto) on CPU");
}

// Every output the run was asked for can be written: checked before the first step, so a run
// is never lost to a --save it cannot write at its end. `lead`: rank 0 (or the launcher), the
// only writer of the metrics and the profile; every rank writes checkpoints, records and traces.
void check_outputs(const TrainOptions& o, bool lead) {
  if (!o.save_dir.empty()) prepare_output_directory(o.save_dir, "--save");
  if (!o.record.empty()) prepare_output_directory(o.record, "--record");
  if (!o.trace.empty()) {
    check_output_file(o.trace, "--trace");
    // The ranks write their events beside it (FILE.rank<N>) before rank 0 merges them: a device
    // such as /dev/null would have them written into /dev.
    std::error_code ec;
    if (fs::exists(o.trace, ec) && !fs::is_regular_file(o.trace, ec))
      throw UserError(SourceRange{}, "--trace " + o.trace + ": not a regular file (the ranks write their events beside it, as " +
                                         o.trace + ".rank<N>, and rank 0 merges them into it)",
                      "give a file's path, or leave --trace out to trace nothing");
  }
  if (lead && !o.metrics.empty()) check_output_file(o.metrics, "--metrics");
  if (lead && !o.profile_out.empty()) check_output_file(o.profile_out, "--cache-dir");  // the profile's file in the cache
}

constexpr size_t kNotTrained = static_cast<size_t>(-1);

// For each of the step program's parameters, its index in `names` (the parameters the model
// trains), or kNotTrained.
std::vector<size_t> indices_in(const std::vector<std::string>& names, const ir::Program& step) {
  std::unordered_map<std::string, size_t> index;
  for (size_t k = 0; k < names.size(); ++k) index.emplace(names[k], k);
  std::vector<size_t> out;
  out.reserve(step.params.size());
  for (const ir::TracedParam& p : step.params) {
    auto it = index.find(p.name);
    out.push_back(it == index.end() ? kNotTrained : it->second);
  }
  return out;
}

// The data-parallel buckets of the step program (its gradient all-reduces over dp), as indices
// into `names`; `skipped` (test_skip_reduction) are left out.
std::vector<std::vector<size_t>> program_buckets(const ir::Program& step, const std::vector<std::string>& names,
                                                 const std::vector<std::string>& skipped) {
  std::vector<size_t> index = indices_in(names, step);
  std::vector<std::vector<size_t>> buckets;
  for (const ir::Instr& in : step.instrs) {
    if (in.kind != ir::OpKind::AllReduce || in.phase != ir::Phase::Backward || in.group.role != ir::Role::Dp) continue;
    std::vector<size_t> members;
    for (int q : in.params) {
      const std::string& name = step.params[q].name;
      if (std::find(skipped.begin(), skipped.end(), name) != skipped.end()) continue;
      if (index[q] == kNotTrained) throw InternalError("the step program reduces " + name + ", which the model does not train");
      members.push_back(index[q]);
    }
    if (!members.empty()) buckets.push_back(members);
  }
  // A parameter the program never reduces would drift apart on the replicas: a Loom bug.
  std::vector<bool> reduced(names.size(), false);
  for (const auto& b : buckets)
    for (size_t k : b) reduced[k] = true;
  for (size_t k = 0; k < names.size(); ++k)
    if (!reduced[k] && std::find(skipped.begin(), skipped.end(), names[k]) == skipped.end())
      throw InternalError("the step program never reduces the gradient of " + names[k] + " (was it traced?)");
  return buckets;
}

// The gradients autograd hands each of `names` per backward, as the step program says
// (ir::gradient_deliveries); one for a parameter the program does not hold.
std::vector<int> program_deliveries(const ir::Program& step, const std::vector<std::string>& names) {
  std::vector<int> by_program = ir::gradient_deliveries(step);
  std::vector<size_t> index = indices_in(names, step);
  std::vector<int> deliveries(names.size(), 1);
  for (size_t q = 0; q < step.params.size(); ++q)
    if (index[q] != kNotTrained) deliveries[index[q]] = by_program[q];
  return deliveries;
}

// The parameters of the step program's last backward compute, as indices into `names`: once
// their gradients are in, the ones it hands none are complete (GradientReducer).
std::vector<size_t> program_last_computed(const ir::Program& step, const std::vector<std::string>& names) {
  std::vector<size_t> index = indices_in(names, step), last;
  size_t compute = ir::last_backward_compute(step);
  if (compute == step.instrs.size()) return last;
  for (int q : step.instrs[compute].params)
    if (index[q] != kNotTrained) last.push_back(index[q]);
  return last;
}

// compress(): TAGC on the reduce-scatter of every parameter below each module (the lowering
// (compression.cpp) refused it where parameters are not sharded). Resuming at the same world size, the
// error-feedback accumulators continue where they were; otherwise they restart at zero.
void configure_compression(ShardedExecutor& sharded, const std::vector<CompressRequest>& requests,
                           const std::vector<std::string>& param_names, const fs::path& resume_dir, const RankEnv& env,
                           const MeshLayout& layout) {
  std::map<std::string, tagc::Config> compressed;
  for (const CompressRequest& c : requests)
    for (const std::string& name : param_names)
      if (ir::within(name, c.module)) compressed[name] = {c.ratio, c.index_bits, c.sparsity};
  sharded.compress(compressed);
  if (resume_dir.empty()) return;
  CheckpointLayout written = checkpoint_layout(resume_dir), now{env.world, layout.tp, layout.pp};
  if (written == now) sharded.restore_compression_residuals(load_rank_state(resume_dir, env.rank));
  else if (env.rank == 0)
    std::cerr << "note: the checkpoint was written by " << written.describe() << "; TAGC's error-feedback accumulators "
              << "restart at zero on " << now.describe() << "\n";
}

// The header's second line: the batch a step trains (a size the schedule's batch() set says
// so) and the optimizer's settings.
std::string describe_run_shape(const TrainOptions& o, const Schedule& schedule, const RuntimePlan& plan, int dp) {
  char lr[96], clip[32];
  std::snprintf(lr, sizeof lr, "lr %g (warmup %lld, cosine to %g)", o.lr, static_cast<long long>(o.warmup), o.lr * o.min_lr_ratio);
  std::snprintf(clip, sizeof clip, "%g", o.clip);
  int64_t sequences = o.micro_batch * o.accum * dp;
  const char* by_schedule = " (the schedule's batch())";
  return "  batch: micro-batch " + std::to_string(o.micro_batch) + (plan.micro_batch > 0 ? by_schedule : "") + " x seq " +
         std::to_string(o.seq) + " x accum " + std::to_string(o.accum) + (plan.accum > 0 ? by_schedule : "") + " x dp " + std::to_string(dp) + " = " + with_commas(sequences) + " sequences, " +
         with_commas(sequences * o.seq) + " tokens per step; " + std::to_string(o.steps) + " steps, " + lr + ", clip " +
         (o.clip > 0 ? std::string(clip) : std::string("off")) + ", seed " + std::to_string(o.seed) + "\n  schedule: " +
         (o.schedule_file.empty() ? std::string("none (plain data parallelism)")
                                  : o.schedule_file + " (" + std::to_string(schedule.trace().size()) + " directives)") +
         "\n";
}

// The schedule, the data and the outputs, checked before this rank waits for any other.
void plan_rank(RankRun& r) {
  const TrainOptions& o = r.o;
  SourceManager sources;
  try {
    check_options(o);
    // Loom's launcher validated the run and showed the schedule's print()s; under torchrun,
    // srun or mpirun rank 0 does both, once.
    const char* launcher = std::getenv(kLaunchedByLoom);
    bool launched_by_loom = launcher && std::string(launcher) == "1";
    r.sch = evaluate_schedule(o, r.env.world, r.env.local_world, sources, r.lead() && !launched_by_loom ? &std::cout : nullptr);
    r.plan = lower_schedule(*r.sch);
    r.o.micro_batch = r.plan.micro_batch_or(r.o.micro_batch);
    r.o.accum = r.plan.accum_or(r.o.accum);
    if (r.plan.pp > 1) r.stages = std::make_unique<PipelineStages>(r.plan.stages);
    r.data = open_data(o);
    if (!launched_by_loom) check_outputs(o, r.lead());  // every rank, before any of them waits for the others
  } catch (const UserError& e) {
    throw UserError(self_contained(e.diagnostic(), &sources));  // with the quoted line, which only `sources` has
  }
}

// GPU ranks: one device each (by local rank), NCCL, bf16 autocast over fp32 master weights
// (check_options refused --device cuda without CUDA).
void choose_device(RankRun& r) {
  const TrainOptions& o = r.o;
  r.cuda = resolved_device(o) == "cuda";
  // NCCL needs a GPU per rank; gloo moves GPU tensors too, so its ranks may share GPUs.
  r.nccl = r.cuda && o.backend != "gloo";
  if (r.nccl && r.env.local_rank >= compat::cuda_device_count())
    throw UserError(SourceRange{}, "local rank " + std::to_string(r.env.local_rank) + " has no GPU of its own (" +
                                       std::to_string(compat::cuda_device_count()) + " visible)",
                    "run at most one rank per GPU per node (--nproc), or --backend gloo to share GPUs");
  r.gpu = r.cuda ? r.env.local_rank % compat::cuda_device_count() : 0;
  r.device = r.cuda ? torch::Device(torch::kCUDA, r.gpu) : torch::Device(torch::kCPU);
  if (r.cuda) compat::set_cuda_device(r.gpu);
  r.bf16 = r.cuda && o.precision == "bf16";
}

// The model from the seed, each rank initialising only what it holds (its stage's parameters
// and those every stage holds; each tensor from its own seeded generator, so the ranks agree
// without communicating), or the whole model from the checkpoint resumed; then each rank keeps
// its tensor-parallel slices (cut from the whole, one parameter at a time) and its stage.
void build_rank_model(RankRun& r) {
  const TrainOptions& o = r.o;
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  r.model = build_model_without_memory(o.model);
  apply_replacements(*r.model.module, r.plan.replacements);
  MeshLayout at = MeshLayout::of(r.env.world, r.env.rank, r.plan.tp, r.plan.pp);
  nn::materialize(*r.model.module, static_cast<uint64_t>(o.seed), [&](const std::string& name) {
    int stage = r.stages ? r.stages->stage_of_param(name) : -1;
    return !o.resume.empty() || stage < 0 || stage == at.stage;
  });
  r.model.module->to(r.device);
  if (r.bf16) compat::set_bf16_autocast(true);
  if (static_cast<int64_t>(r.data->vocab_size()) > r.model.vocab_size)
    throw UserError(SourceRange{}, "the data's vocabulary (" + std::to_string(r.data->vocab_size()) + ") is larger than model " +
                                       o.model + "'s (" + std::to_string(r.model.vocab_size) + ")",
                    "choose a model with a larger vocabulary");
  check_seq_within_context(o.model, r.model.max_seq, o.seq);
  std::tie(r.params, r.param_names) = unique_parameters(*r.model.module);
  // Resuming: the consolidated weights before any sharding, the optimizer states later.
  if (!o.resume.empty()) std::tie(r.resume_dir, r.start) = load_model_checkpoint(o, *r.model.module, r.params);
  if (r.plan.model_parallel()) {
    r.mesh = std::make_unique<MeshGroups>(make_mesh_groups(*r.world, r.plan.tp, r.plan.pp, r.plan.factors.optim));
    r.layout = r.mesh->at;
    r.tensor_parallel = std::make_unique<TensorParallel>(*r.model.module, r.plan.shards, r.mesh->tp);
    r.tensor_parallel->shard_parameters();
  }
  if (r.stages) keep_stage_parameters(*r.stages, r.layout.stage, r.params, r.param_names);
}

// The auto passes only spend memory the limit leaves: a program whose predicted peak (the memory
// walk the passes plan with) is above the limit does not fit in its base placement. Rank 0 says
// so with the numbers; the run goes on (the model is a prediction).
void warn_if_over_limit(const ir::Program& step, const MemoryPlanning& memory, int rank) {
  if (memory.limit <= 0 || rank != 0) return;
  int64_t peak = memory::walk_peak(step, memory.state_bytes, nullptr).bytes;
  if (peak > memory.limit)
    std::cerr << "loom run: warning: the step's predicted peak " << format_size(peak) << " is above the memory limit "
              << format_size(memory.limit) << ": its base placement (model states, activations, the gathers the schedule "
              << "places, less what offload(\"optimizer\", budget=auto) moves to the host) does not fit, so "
              << "prefetch(budget=auto), unshard(auto) and bucket(size=auto) add nothing\n";
}

// The step's program, as `loom explain --rank` shows it for this rank: the sharded executor
// follows it, the data-parallel reducer takes its buckets from it, the step's tail runs it.
void lower_rank_program(RankRun& r) {
  const TrainOptions& o = r.o;
  r.trace = trace_model(o.model, {o.micro_batch, o.seq}, r.plan.replacements);
  StepOptions& step_options = r.step_options;
  step_options.bucket_bytes = o.bucket_bytes;
  step_options.grad_norm = measures_grad_norm(o);
  step_options.accum = o.accum;
  step_options.rank = r.env.rank;
  // On a GPU the auto passes plan within its memory when no limit is given (0 gives none).
  int64_t device = r.cuda ? compat::cuda_total_bytes(r.gpu) : 0;
  int64_t limit = step_options.memory.limit = MemoryPlanning::limit_or_default(o.memory_limit, device);
  if (o.memory_limit < 0 && device > 0 && r.env.rank == 0 && r.plan.plans_within_memory())
    std::cerr << "loom run: the auto passes plan within " << format_size(limit) << ", "
              << std::llround(100.0 * static_cast<double>(limit) / static_cast<double>(device)) << "% of cuda:" << r.gpu << "'s "
              << format_size(device) << " (--memory-limit BYTES sets another limit, 0 none)\n";
  if (std::string why = nothing_to_replan(r.plan); r.o.replan_at > 0 && !why.empty() && r.lead())
    std::cout << "loom run: --replan-at: nothing to re-plan: " << why << "; the run keeps its program\n" << std::flush;
  plan_replan_rounds(r.o, r.plan, step_options.memory.limit);  // and its header then promises no re-plan
  r.step = lower_step(r.plan, r.trace, &r.step_passes, PipelineDebug::from_environment(std::cerr), step_options);
  warn_if_over_limit(*r.step, step_options.memory, r.env.rank);
}

// checkpoint(): the modules the program recomputes (on a pipeline stage, its own).
std::unordered_set<const torch::nn::Module*> checkpointed_modules(const RankRun& r) {
  std::set<std::string> recomputed;
  for (const ir::Instr& in : r.step->instrs)
    if (in.kind == ir::OpKind::Recompute) recomputed.insert(in.module);
  std::unordered_set<const torch::nn::Module*> checkpointed;
  for (auto& item : r.model.module->named_modules("", /*include_self=*/true))
    if (recomputed.count(item.key())) checkpointed.insert(item.value().get());
  return checkpointed;
}

// The interceptors around every module call, innermost first: checkpointing, the op profiler,
// the sharded executor, tensor parallelism, the step recorder, the pipeline stage.
void install_executors(RankRun& r, const std::vector<std::string>& unreduced, torch::Dtype reduce_dtype) {
  const TrainOptions& o = r.o;
  // A re-plan measures the run's ops, where it can act: a sharded run without a mesh.
  bool profiling = !o.profile_out.empty() || (o.replan_at > 0 && can_replan(o, r.plan));
  std::unordered_set<const torch::nn::Module*> checkpointed = checkpointed_modules(r);
  r.checkpointer = std::make_unique<ActivationCheckpointer>(checkpointed);
  if (!checkpointed.empty()) nn::set_call_interceptor(r.checkpointer.get());
  // Profiling: the op profiler runs innermost, where an op's parameters are resident.
  nn::CallInterceptor* innermost = checkpointed.empty() ? nullptr : r.checkpointer.get();
  if (profiling) {
    r.profiler = std::make_unique<OpProfiler>(*r.model.module, r.trace, innermost, r.cuda ? r.gpu : -1);
    innermost = r.profiler.get();
    nn::set_call_interceptor(r.profiler.get());
  }
  // Any sharding (s_os > 1: ZeRO-1/2/3, MiCS, hybrids): the sharded executor runs every module
  // call, the activation checkpointer inside it. Every rank creates every subgroup, in order.
  r.optimized = r.params;
  if (r.plan.factors.optim > 1) {
    r.sharded = std::make_unique<ShardedExecutor>(*r.model.module, *r.step, make_shard_groups(*r.world, r.plan.factors, r.plan.tp), innermost,
                                                  reduce_dtype);
    r.optimized = r.sharded->optimized();
    nn::set_call_interceptor(r.sharded.get());
  }
  nn::CallInterceptor* outermost = r.sharded ? r.sharded.get() : innermost;
  if (r.tensor_parallel) {
    r.tensor_parallel->follow(*r.step);
    r.tensor_parallel->call_next(outermost);
    outermost = r.tensor_parallel.get();
    nn::set_call_interceptor(outermost);
  }
  // Test-only faults (loom verify's tests): unreduced gradients, weights released too early.
  std::vector<std::string> released_early;
  for (const InjectedFault& f : r.plan.faults)
    if (f.kind == FaultKind::ReleaseEarly) released_early.push_back(f.module);
  if (r.sharded) r.sharded->inject_faults(unreduced, released_early);
  if (r.sharded && !r.plan.compress.empty()) configure_compression(*r.sharded, r.plan.compress, r.param_names, r.resume_dir, r.env, r.layout);
  // loom verify: the first step is recorded, module call by module call.
  if (!o.record.empty()) {
    r.recorder = std::make_unique<StepRecorder>(*r.model.module, outermost);
    nn::set_call_interceptor(r.recorder.get());
  }
  // Pipeline stages pass over other stages' modules before the recorder sees a call.
  if (r.stages) {
    r.stage = std::make_unique<PipelineStage>(*r.model.module, *r.step, *r.mesh,
                                              r.recorder ? static_cast<nn::CallInterceptor*>(r.recorder.get()) : outermost);
    nn::set_call_interceptor(r.stage.get());
  }
}

// Which optimized tensors the step program's offload instruction names, by parameter.
std::vector<bool> offloaded_by_program(const ir::Program& step, const std::vector<OptimizedRange>& ranges) {
  std::set<std::string> named;
  for (const ir::Instr& in : step.instrs)
    if (in.kind == ir::OpKind::Offload)
      for (int q : in.params) named.insert(step.params[q].name);
  std::vector<bool> offloaded;
  std::set<std::string> optimized;
  for (const OptimizedRange& range : ranges) {
    offloaded.push_back(named.count(range.param) > 0);
    optimized.insert(range.param);
  }
  for (const std::string& name : named)
    if (!optimized.count(name)) throw InternalError("the step program offloads " + name + ", which this rank does not optimize");
  return offloaded;
}

// Which part of its parameter an optimized range lies in (a tensor-parallel slice, or the
// whole), and the whole parameter's shape: what checkpoints need to reshard across meshes.
void describe_part(const RankRun& r, OptimizedRange& range) {
  auto at = std::find(r.param_names.begin(), r.param_names.end(), range.param);
  if (at == r.param_names.end()) throw InternalError("the optimizer updates " + range.param + ", which this rank does not hold");
  range.shape = r.params[static_cast<size_t>(at - r.param_names.begin())].sizes().vec();
  range.axis = r.tensor_parallel ? r.tensor_parallel->split_axis(range.param) : -1;
  if (range.axis < 0) return;
  range.parts = r.layout.tp;
  range.part = r.layout.tp_rank;
  range.shape[static_cast<size_t>(range.axis)] *= r.layout.tp;
}

// The optimizer over what this rank updates (host copies with offload), its states resumed;
// the test-only corruption of a shard.
void create_optimizer(RankRun& r) {
  const TrainOptions& o = r.o;
  // Each optimized tensor as a range of its parameter's flat tensor (sharded checkpoints).
  if (r.sharded) {
    r.ranges = r.sharded->optimized_ranges();
  } else {
    for (size_t i = 0; i < r.params.size(); ++i) r.ranges.push_back({r.param_names[i], r.params[i].numel(), 0, r.optimized[i]});
  }
  for (OptimizedRange& range : r.ranges) describe_part(r, range);
  for (const InjectedFault& f : r.plan.faults) {
    if (f.kind != FaultKind::CorruptShard || f.rank != r.env.rank) continue;
    auto it = std::find_if(r.ranges.begin(), r.ranges.end(), [&](const OptimizedRange& range) { return range.param == f.param; });
    if (it == r.ranges.end())
      throw UserError(SourceRange{}, "test_corrupt_shard: " + f.param + " is not a trained parameter of its own (a tied weight?)",
                      "corrupt the parameter's first owner");
    // Not a constant: a LayerNorm'd input sums to zero, so a uniform shift would not show.
    torch::NoGradGuard no_grad;
    it->tensor.add_(torch::arange(it->tensor.numel(), it->tensor.options().requires_grad(false)).remainder(7).mul(0.01).view_as(it->tensor));
  }
  // offload("optimizer"): the optimizer updates host copies of what the program offloads, so
  // their states live on the host.
  std::vector<bool> offloaded = offloaded_by_program(*r.step, r.ranges);
  if (std::count(offloaded.begin(), offloaded.end(), true)) r.offload = std::make_unique<OptimizerOffload>(r.optimized, offloaded);
  r.optimizer = std::make_unique<torch::optim::AdamW>(r.offload ? r.offload->optimized() : r.optimized,
                                                      torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).weight_decay(o.weight_decay));
  r.state_ranges = r.ranges;
  if (r.offload)
    for (size_t i = 0; i < r.state_ranges.size(); ++i) r.state_ranges[i].tensor = r.offload->optimized()[i];
  if (!r.resume_dir.empty()) load_optimizer_ranges(r.resume_dir, r.state_ranges, *r.optimizer);
  if (r.sharded && r.sharded->moves_optimizer_states()) attach_state_copier(r);
}

// The run's first lines on rank 0: what trains, on what, in which shape.
void print_header(const RankRun& r) {
  const TrainOptions& o = r.o;
  const RuntimePlan& plan = r.plan;
  std::cout << "loom run: " << o.model << " (" << module_tree_of(o.model)->parameter_count() << " parameters), " << r.env.world
            << " rank" << (r.env.world == 1 ? "" : "s") << " x " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", "
            << r.data->describe() << ", " << plan.checkpoint.size() << " checkpointed modules, "
            << (plan.factors.optim > 1 ? "sharding (s_p, s_g, s_os) = (" + std::to_string(plan.factors.params) + ", " +
                                             std::to_string(plan.factors.grads) + ", " + std::to_string(plan.factors.optim) + "), "
                                       : "")
            << (!r.cuda ? "cpu (fp32, gloo)"
                        : std::string("cuda (") + (r.bf16 ? "bf16 autocast, fp32 weights" : "fp32") + (r.nccl ? ", nccl)" : ", gloo)"))
            << (r.start > 0 ? ", resuming after step " + std::to_string(r.start) : "")
            << (r.mesh ? ", mesh tp " + std::to_string(r.layout.tp) + " x pp " + std::to_string(r.layout.pp) + " x dp " +
                             std::to_string(r.layout.dp)
                       : "")
            << "\n"
            << describe_run_shape(o, *r.sch, r.plan, r.layout.dp) << std::flush;
  if (o.replan_at > 0) std::cout << describe_replan_rounds(o, timed_groups_of(plan, r.step_options.memory.limit)) << std::flush;
  if (r.offload)
    std::cout << "offload: the optimizer states of " << r.offload->offloaded_count() << " of " << r.optimized.size()
              << " tensors (" << r.offload->offloaded_elements() << " elements per rank) live in host memory\n"
              << std::flush;
  if (r.state_copier) {
    int64_t fragments = 0, bytes = 0;
    for (const ir::Instr& in : r.step->instrs)
      if (in.kind == ir::OpKind::OffloadStates) ++fragments, bytes += in.bytes;
    std::cout << "offload: adaptive (deepcompile.txt Algorithm 2): the optimizer states of " << fragments << " of "
              << r.optimized.size() << " tensors (" << format_size(bytes)
              << " per rank) go to the host during each step's forward and come back in its backward; the step runs on the device\n"
              << std::flush;
  }
}

}  // namespace

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

ValidatedRun validate_run(const TrainOptions& o, int world, int local_world) {
  check_options(o);
  SourceManager sources;
  ValidatedRun run;
  try {
    auto sch = evaluate_schedule(o, world, local_world, sources, &std::cout);
    run.plan = lower_schedule(*sch);
    run.directives = sch->trace();
  } catch (const UserError& e) {
    // Re-throw with the quoted source line, which only `sources` can provide.
    throw UserError(self_contained(e.diagnostic(), &sources));
  }
  open_data(o);
  check_outputs(o, true);
  return run;
}

TrainOptions with_schedule_batch(const TrainOptions& o, int world, int local_world) {
  TrainOptions out = o;
  try {
    SourceManager sources;
    RuntimePlan plan = lower_schedule(*evaluate_schedule(o, world, local_world, sources, nullptr));
    out.micro_batch = plan.micro_batch_or(o.micro_batch);
    out.accum = plan.accum_or(o.accum);
  } catch (const UserError&) {
    // The run's validation reports it, with its source line.
  }
  return out;
}

// Module calls as timeline spans, named by module path.
class TimelineObserver : public nn::CallObserver {
 public:
  explicit TimelineObserver(torch::nn::Module& root) {
    for (auto& item : root.named_modules("", true)) paths_[item.value().get()] = item.key().empty() ? "model" : item.key();
  }
  void begin(torch::nn::Module&) override { starts_.push_back(timeline::now_us()); }
  void end(torch::nn::Module& m) override {
    double start = starts_.back();
    starts_.pop_back();
    auto it = paths_.find(&m);
    timeline::record(it == paths_.end() ? m.name() : it->second, torch::GradMode::is_enabled() ? "forward" : "no_grad",
                     timeline::Track::Compute, start, timeline::now_us());
  }

 private:
  std::unordered_map<const torch::nn::Module*, std::string> paths_;
  std::vector<double> starts_;
};

RankRun::RankRun(const TrainOptions& options, const RankEnv& rank_env)
    : o(options), env(rank_env), layout(MeshLayout::of(rank_env.world, rank_env.rank, 1, 1)) {}

RankRun::~RankRun() {
  nn::set_call_interceptor(nullptr);
  nn::set_call_observer(nullptr);
  if (bf16) compat::set_bf16_autocast(false);
}

// Adaptive offloading (offload_states / reload_states in the program): the states exist from the
// start, as AdamW makes them at its first step (zeros, step 0), so the first forward can offload
// them; the executor moves them through a copier over the optimizer's states.
void attach_state_copier(RankRun& r) {
  for (const torch::Tensor& t : r.optimized) compat::adamw_state(*r.optimizer, t);
  torch::optim::AdamW* optimizer = r.optimizer.get();
  std::vector<torch::Tensor> optimized = r.optimized;  // by the program's parameter index
  r.state_copier = std::make_unique<StateCopier>([optimizer, optimized](int q) {
    torch::optim::AdamWParamState& s = compat::adamw_state(*optimizer, optimized.at(static_cast<size_t>(q)));
    return std::vector<torch::Tensor>{s.exp_avg(), s.exp_avg_sq()};
  });
  r.sharded->attach_state_copier(r.state_copier.get());
}

// Everything before the first step.
void set_up_rank(RankRun& r) {
  const TrainOptions& o = r.o;  // plan_rank applies the schedule's batch() to it; nothing here reads that
  const RankEnv& env = r.env;
  r.threads = resolved_threads(o, env.local_world);
  torch::set_num_threads(r.threads);
  memory::install_counting_allocator();
  plan_rank(r);
  choose_device(r);
  comm::WorldOptions wo;
  wo.timeout = std::chrono::seconds(o.timeout_s);
  wo.backend = r.nccl ? comm::Backend::Nccl : comm::Backend::Gloo;
  r.world = comm::init_world(env, wo);
  build_rank_model(r);
  torch::Dtype reduce_dtype = o.reduce_dtype == "fp16" ? torch::kHalf : o.reduce_dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  std::vector<std::string> unreduced;  // test_skip_reduction: gradients each rank keeps as they are
  for (const InjectedFault& f : r.plan.faults)
    if (f.kind == FaultKind::SkipReduction) unreduced.push_back(f.param);
  lower_rank_program(r);
  install_executors(r, unreduced, reduce_dtype);
  create_optimizer(r);
  // Replicated parameters are all-reduced in buckets; sharded ones by the executor.
  comm::Group* replicas = r.layout.dp == 1 ? nullptr : r.mesh ? r.mesh->dp.get() : r.world.get();
  if (replicas && !r.sharded)
    r.reducer = std::make_unique<GradientReducer>(r.params, program_buckets(*r.step, r.param_names, unreduced),
                                                   program_deliveries(*r.step, r.param_names),
                                                   program_last_computed(*r.step, r.param_names), *replicas, reduce_dtype);
  if (!o.trace.empty()) {
    timeline::enable(env.rank);
    r.observer = std::make_unique<TimelineObserver>(*r.model.module);
    nn::set_call_observer(r.observer.get());
  }
  if (r.lead() && !o.metrics.empty()) r.metrics.open(o.metrics, r.start > 0 ? std::ios::app : std::ios::trunc);
  if (r.lead()) print_header(r);
  r.tokens.resize(static_cast<size_t>(r.o.micro_batch * (r.o.seq + 1)));  // the schedule's batch(), not the flag's
}

}  // namespace loom
