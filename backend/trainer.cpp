#include "backend/trainer.h"

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
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_set>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "backend/activation_checkpoint.h"
#include "backend/build_info.h"
#include "backend/collective_profiler.h"
#include "backend/communicator.h"
#include "backend/gradient_reducer.h"
#include "backend/launcher.h"
#include "backend/lr_schedule.h"
#include "backend/memory_counter.h"
#include "backend/model_trace.h"
#include "backend/op_profiler.h"
#include "backend/optimizer_checkpoint.h"
#include "backend/optimizer_offload.h"
#include "backend/output_paths.h"
#include "backend/mesh_groups.h"
#include "backend/pass_pipeline.h"
#include "backend/pipeline_stage.h"
#include "backend/runtime_plan.h"
#include "backend/shard_groups.h"
#include "backend/sharded_grad_clip.h"
#include "backend/sharded_executor.h"
#include "backend/step_record.h"
#include "backend/tensor_parallel.h"
#include "backend/timeline.h"
#include "backend/token_data.h"
#include "backend/torch_compat.h"
#include "lang/interpreter.h"
#include "lang/trace.h"
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
  if (!(o.lr > 0)) throw UserError(SourceRange{}, "--lr must be positive", "e.g. --lr 3e-3");
  if (o.reduce_dtype == "bf16" && !(resolved_device(o) == "cuda" && o.backend != "gloo"))
    throw UserError(SourceRange{}, "--reduce-dtype bf16 needs NCCL (gloo in LibTorch 1.13 has no bf16 reductions)",
                    "use --reduce-dtype fp16 with gloo, or train on GPUs with --backend nccl");
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
  if (!o.trace.empty()) check_output_file(o.trace, "--trace");
  if (lead && !o.metrics.empty()) check_output_file(o.metrics, "--metrics");
  if (lead && !o.profile_out.empty()) check_output_file(o.profile_out, "--cache-dir");  // the profile's file in the cache
}

// What tensor and pipeline parallelism do not run with yet: a UserError naming it.
void check_model_parallel_options(const TrainOptions& o, const RuntimePlan& plan) {
  if (!plan.model_parallel()) return;
  std::string what = !o.save_dir.empty() ? "--save" : !o.resume.empty() ? "--resume" : !o.profile_out.empty() ? "loom profile" : "";
  if (what.empty()) return;
  throw UserError(SourceRange{}, what + " is not implemented yet with tensor or pipeline parallelism (mesh tp = " +
                                     std::to_string(plan.tp) + ", pp = " + std::to_string(plan.pp) + ")",
                  "checkpoints and profiles would have to gather tensor-parallel slices and every stage's parameters; "
                  "train without " + what + ", or with tp = pp = 1");
}

// Checkpoints: DIR/step-000010/{model.pt, optim/rank-R.{pt,json}, rng.pt, trainer.json} and
// DIR/latest. model.pt is the consolidated model (it loads into the plain LibTorch model);
// optim/ holds the optimizer states by range, written by the ranks of the first optimizer
// block, so any later world size and sharding can resume from it (optimizer_checkpoint.h).
std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

// Per-rank state that does not reshard (TAGC's error-feedback accumulators): DIR/rank_state/rank-R.pt
// (the tensors) and rank-R.json (their names). Read back only at the same world size.
void save_rank_state(const fs::path& dir, int rank, const std::map<std::string, torch::Tensor>& state) {
  if (state.empty()) return;
  fs::create_directories(dir / "rank_state");
  std::vector<torch::Tensor> tensors;
  nlohmann::json names = nlohmann::json::array();
  for (auto& [name, t] : state) {
    names.push_back(name);
    tensors.push_back(t.cpu());
  }
  std::string base = (dir / "rank_state" / ("rank-" + std::to_string(rank))).string();
  CheckedFileWriter file(base + ".pt");
  torch::save(tensors, file.sink());
  file.finish();
  write_whole_file(base + ".json", names.dump() + "\n");
}

std::map<std::string, torch::Tensor> load_rank_state(const fs::path& dir, int rank) {
  std::map<std::string, torch::Tensor> out;
  std::string base = (dir / "rank_state" / ("rank-" + std::to_string(rank))).string();
  if (!fs::exists(base + ".json")) return out;
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, base + ".pt");
  nlohmann::json names = nlohmann::json::parse(std::ifstream(base + ".json"));
  for (size_t i = 0; i < names.size() && i < tensors.size(); ++i) out[names[i].get<std::string>()] = tensors[i];
  return out;
}

// compress(): TAGC on the reduce-scatter of every parameter below each module (runtime_plan
// refused it where parameters are not sharded). Resuming at the same world size, the
// error-feedback accumulators continue where they were; otherwise they restart at zero.
void configure_compression(ShardedExecutor& sharded, const std::vector<CompressRequest>& requests,
                           const std::vector<std::string>& param_names, const fs::path& resume_dir, const RankEnv& env) {
  std::map<std::string, tagc::Config> compressed;
  for (const CompressRequest& c : requests)
    for (const std::string& name : param_names)
      if (name.rfind(c.module + ".", 0) == 0) compressed[name] = {c.ratio, c.index_bits, c.sparsity};
  sharded.compress(compressed);
  if (resume_dir.empty()) return;
  int written_at = nlohmann::json::parse(std::ifstream(resume_dir / "trainer.json")).at("world").get<int>();
  if (written_at == env.world) sharded.restore_compression_residuals(load_rank_state(resume_dir, env.rank));
  else if (env.rank == 0)
    std::cerr << "note: the checkpoint was written by " << written_at << " ranks; TAGC's error-feedback accumulators "
              << "restart at zero on " << env.world << "\n";
}

// Every rank calls this with every parameter resident; ranks below `optim_writers` write
// their optimizer ranges, every rank its `rank_state`. The directory appears whole or not at all.
void write_checkpoint_files(const TrainOptions& o, comm::Group& world, int64_t steps_done, torch::nn::Module& model,
                      torch::optim::AdamW& opt, const std::vector<OptimizedRange>& ranges, int optim_writers,
                      const std::map<std::string, torch::Tensor>& rank_state) {
  std::string name = step_name(steps_done);
  fs::path tmp = fs::path(o.save_dir) / (".tmp-" + name);
  fs::path final_dir = fs::path(o.save_dir) / name;
  bool lead = world.rank() == 0;
  if (lead) {
    fs::create_directories(o.save_dir);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  comm::barrier(world);
  if (world.rank() < optim_writers) save_optimizer_ranges(tmp, world.rank(), ranges, opt);
  save_rank_state(tmp, world.rank(), rank_state);
  if (lead) {
    torch::serialize::OutputArchive archive;
    model.save(archive);
    CheckedFileWriter model_file((tmp / "model.pt").string());
    archive.save_to(model_file.sink());
    model_file.finish();
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    CheckedFileWriter rng_file((tmp / "rng.pt").string());
    torch::save(gen.get_state(), rng_file.sink());
    rng_file.finish();
  }
  comm::barrier(world);
  if (!lead) return;
  nlohmann::json meta{{"step", steps_done}, {"model", o.model}, {"world", world.size()}, {"seed", o.seed},
                      {"format", "loom-checkpoint-2"}, {"optimizer_files", optim_writers}};
  write_whole_file((tmp / "trainer.json").string(), meta.dump(2) + "\n");
  // Renames are atomic: a crash leaves either the previous checkpoint or this whole one.
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fs::path latest_tmp = fs::path(o.save_dir) / ".latest.tmp";
  write_whole_file(latest_tmp.string(), name + "\n");
  fs::rename(latest_tmp, fs::path(o.save_dir) / "latest");
}

// write_checkpoint_files, with a failed write (a full disk) as a user error that says the
// previous checkpoint is intact: `latest` moves only after the new directory is complete.
void write_checkpoint(const TrainOptions& o, comm::Group& world, int64_t steps_done, torch::nn::Module& model,
                      torch::optim::AdamW& opt, const std::vector<OptimizedRange>& ranges, int optim_writers,
                      const std::map<std::string, torch::Tensor>& rank_state) {
  std::string previous;  // what `latest` names: it moves only once the new checkpoint is whole
  std::ifstream(fs::path(o.save_dir) / "latest") >> previous;
  if (previous == step_name(steps_done)) previous.clear();  // rewritten in place: not intact
  auto failed = [&](const std::string& reason) {
    std::error_code ignored;
    fs::remove_all(fs::path(o.save_dir) / (".tmp-" + step_name(steps_done)), ignored);
    return UserError(SourceRange{}, "could not write the checkpoint of step " + std::to_string(steps_done) + " to " + o.save_dir +
                                        ": " + reason,
                    previous.empty() ? "no earlier checkpoint was written; free space (or choose another --save) and run again"
                                     : "the previous checkpoint " + (fs::path(o.save_dir) / previous).string() +
                                           " is intact: free space, then continue with --resume " + o.save_dir);
  };
  try {
    write_checkpoint_files(o, world, steps_done, model, opt, ranges, optim_writers, rank_state);
  } catch (const WriteError& e) {
    throw failed(e.what());
  } catch (const fs::filesystem_error& e) {
    throw failed(e.code().message() + " (" + e.path1().string() + ")");
  }
}

fs::path resolve_checkpoint(const std::string& path) {
  fs::path p(path);
  if (fs::exists(p / "trainer.json")) return p;
  if (fs::exists(p / "latest")) {
    std::ifstream in(p / "latest");
    std::string name;
    in >> name;
    if (fs::exists(p / name / "trainer.json")) return p / name;
  }
  throw UserError(SourceRange{}, "no checkpoint found at '" + path + "'",
                  "pass a directory written by --save (it holds 'latest') or one of its step-N folders");
}

// The model's weights and the random state; returns the checkpoint's folder and step.
// `params`: the model's unique parameters.
std::pair<fs::path, int64_t> load_model_checkpoint(const TrainOptions& o, torch::nn::Module& model,
                                                   const std::vector<torch::Tensor>& params) {
  fs::path dir = resolve_checkpoint(o.resume);
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(dir / "trainer.json"));
  if (meta.value("model", "") != o.model)
    throw UserError(SourceRange{}, "checkpoint '" + dir.string() + "' is of model " + meta.value("model", "?") + ", not " + o.model,
                    "resume with --model " + meta.value("model", "?"));
  {
    torch::serialize::InputArchive archive;
    archive.load_from((dir / "model.pt").string());
    model.load(archive);
    // The loaded tensors' storage is not resizable, and the sharded executor frees and
    // refills parameter storage: give every parameter storage of its own.
    torch::NoGradGuard no_grad;
    for (auto p : params) p.set_(p.detach().clone());
  }
  {
    torch::Tensor state;
    torch::load(state, (dir / "rng.pt").string());
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
  }
  return {dir, meta.at("step").get<int64_t>()};
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

// Profiling's end: the ops' figures, then the collective sweep on every group role of the
// run (`groups`: the sharded executor's; null for data parallelism), all reduced across
// ranks; rank 0 writes the profile (every rank too with LOOM_PROFILE_PER_RANK=1, which the
// tests use to check that all ranks hold the same).
void write_profile(const TrainOptions& o, const OpProfiler& profiler, comm::Group& world, const ShardGroups* groups,
                   torch::Device device, const RankEnv& env) {
  Profile profile;
  profile.key = o.profile_key;
  profile.device = device.is_cuda() ? "cuda" : "cpu";
  profile.measured_steps = static_cast<int>(o.steps - o.profile_warmup);
  profile.ops = profiler.result(world);
  bool lead = env.rank == 0;
  if (lead) std::cout << "loom profile: timing collectives on every process group of the run\n" << std::flush;
  profile.collectives = profile_collectives(world, groups, device);
  std::string text = profile.to_json();
  auto write = [&](const std::string& path) {
    fs::path parent = fs::path(path).parent_path();
    if (!parent.empty()) fs::create_directories(parent);
    std::ofstream(path) << text;
  };
  if (lead) write(o.profile_out);
  const char* per_rank = std::getenv("LOOM_PROFILE_PER_RANK");
  if (per_rank && std::string(per_rank) == "1") write(o.profile_out + ".rank" + std::to_string(env.rank));
}

// What a run did, for the closing summary.
struct RunSummary {
  int64_t steps = 0, tokens = 0, peak_bytes = 0;
  double final_loss = std::numeric_limits<double>::quiet_NaN();
  double seconds = 0;
  std::string checkpoint;  // the last checkpoint written, if any
};

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The header's second line: the batch a step trains and the optimizer's settings.
std::string describe_run_shape(const TrainOptions& o, const Schedule& schedule, int dp) {
  char lr[96], clip[32];
  std::snprintf(lr, sizeof lr, "lr %g (warmup %lld, cosine to %g)", o.lr, static_cast<long long>(o.warmup), o.lr * o.min_lr_ratio);
  std::snprintf(clip, sizeof clip, "%g", o.clip);
  int64_t sequences = o.micro_batch * o.accum * dp;
  return "  batch: micro-batch " + std::to_string(o.micro_batch) + " x seq " + std::to_string(o.seq) + " x accum " +
         std::to_string(o.accum) + " x dp " + std::to_string(dp) + " = " + with_commas(sequences) + " sequences, " +
         with_commas(sequences * o.seq) + " tokens per step; " + std::to_string(o.steps) + " steps, " + lr + ", clip " +
         (o.clip > 0 ? std::string(clip) : std::string("off")) + ", seed " + std::to_string(o.seed) + "\n  schedule: " +
         (o.schedule_file.empty() ? std::string("none (plain data parallelism)")
                                  : o.schedule_file + " (" + std::to_string(schedule.trace().size()) + " directives)") +
         "\n";
}

std::string describe_summary(const TrainOptions& o, const RunSummary& r) {
  char line[256];
  std::snprintf(line, sizeof line, "loom run: done: %lld step%s, %s tokens in %.1f s (%.0f tokens/s), final loss %.4f, peak memory %s on rank 0\n",
                static_cast<long long>(r.steps), r.steps == 1 ? "" : "s", with_commas(r.tokens).c_str(), r.seconds, r.tokens / std::max(r.seconds, 1e-9),
                r.final_loss, format_size(r.peak_bytes).c_str());
  std::string out = line;
  if (!r.checkpoint.empty()) out += "  checkpoint: " + r.checkpoint + "\n";
  if (!o.metrics.empty()) out += "  metrics: " + o.metrics + "\n";
  if (!o.trace.empty()) out += "  trace: " + o.trace + "\n";
  return out;
}

}  // namespace

double learning_rate(const TrainOptions& o, int64_t step) {
  return LrSchedule{o.lr, o.min_lr_ratio, o.warmup, o.steps}.at(step);
}

std::vector<Directive> validate_run(const TrainOptions& o, int world, int local_world) {
  check_options(o);
  if (o.device == "cuda" && !compat::cuda_available())
    throw UserError(SourceRange{}, "--device cuda, but this loom has no CUDA or sees no GPU",
                    "build with -DLOOM_WITH_CUDA=ON against a CUDA LibTorch, or use --device cpu");
  SourceManager sources;
  std::vector<Directive> directives;
  try {
    auto sch = evaluate_schedule(o, world, local_world, sources, &std::cout);
    RuntimePlan plan = plan_runtime(*sch);
    check_model_parallel_options(o, plan);
    directives = sch->trace();
  } catch (const UserError& e) {
    // Re-throw with the quoted source line, which only `sources` can provide.
    throw UserError(self_contained(e.diagnostic(), &sources));
  }
  open_data(o);
  check_outputs(o, true);
  return directives;
}

std::string resolved_device(const TrainOptions& o) {
  return o.device == "cuda" || (o.device == "auto" && compat::cuda_available()) ? "cuda" : "cpu";
}

int resolved_threads(const TrainOptions& o, int local_world) {
  return o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, local_world));
}

namespace {

int train_rank(const TrainOptions& o, const RankEnv& env) {
  int threads = resolved_threads(o, env.local_world);
  torch::set_num_threads(threads);
  memory::install_counting_allocator();
  SourceManager sources;
  std::unique_ptr<Schedule> sch;
  RuntimePlan plan;
  std::unique_ptr<PipelineStages> stages;
  std::unique_ptr<TokenSource> data;
  try {
    check_options(o);
    // Loom's launcher validated the run and showed the schedule's print()s; under torchrun,
    // srun or mpirun rank 0 does both, once.
    const char* launcher = std::getenv(kLaunchedByLoom);
    bool launched_by_loom = launcher && std::string(launcher) == "1";
    sch = evaluate_schedule(o, env.world, env.local_world, sources, env.rank == 0 && !launched_by_loom ? &std::cout : nullptr);
    plan = plan_runtime(*sch);
    check_model_parallel_options(o, plan);
    if (plan.pp > 1) stages = std::make_unique<PipelineStages>(plan_pipeline_stages(sch->tree(), plan.pipeline_splits, plan.pp));
    data = open_data(o);
    if (!launched_by_loom) check_outputs(o, env.rank == 0);  // every rank, before any of them waits for the others
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), &sources);
    return 1;
  }

  // GPU ranks: one device each (by local rank), NCCL, bf16 autocast over fp32 master weights.
  bool cuda = resolved_device(o) == "cuda";
  if (cuda && !compat::cuda_available()) {
    std::cerr << "error: --device cuda, but this loom has no CUDA or sees no GPU\n"
                 "  hint: build with -DLOOM_WITH_CUDA=ON against a CUDA LibTorch, or use --device cpu\n";
    return 1;
  }
  // NCCL needs a GPU per rank; gloo moves GPU tensors too, so its ranks may share GPUs.
  bool nccl = cuda && o.backend != "gloo";
  if (nccl && env.local_rank >= compat::cuda_device_count()) {
    std::cerr << "error: local rank " << env.local_rank << " has no GPU of its own (" << compat::cuda_device_count()
              << " visible)\n  hint: run at most one rank per GPU per node (--nproc), or --backend gloo to share GPUs\n";
    return 1;
  }
  int gpu = cuda ? env.local_rank % compat::cuda_device_count() : 0;
  torch::Device device = cuda ? torch::Device(torch::kCUDA, gpu) : torch::Device(torch::kCPU);
  if (cuda) compat::set_cuda_device(gpu);

  comm::WorldOptions wo;
  wo.timeout = std::chrono::seconds(o.timeout_s);
  wo.backend = nccl ? comm::Backend::Nccl : comm::Backend::Gloo;
  auto world = comm::init_world(env, wo);

  torch::manual_seed(static_cast<uint64_t>(o.seed));
  BuiltModel model = build_model(o.model);
  model.module->to(device);
  bool bf16 = cuda && o.precision == "bf16";
  if (bf16) compat::set_bf16_autocast(true);
  if (static_cast<int64_t>(data->vocab_size()) > model.vocab_size) {
    std::cerr << "error: the data's vocabulary (" << data->vocab_size() << ") is larger than model " << o.model << "'s ("
              << model.vocab_size << ")\n  hint: choose a model with a larger vocabulary\n";
    return 1;
  }
  if (o.seq > model.max_seq) {
    std::cerr << "error: --seq " << o.seq << " is longer than model " << o.model << "'s context of " << model.max_seq
              << " tokens\n  hint: use --seq " << model.max_seq << " or less\n";
    return 1;
  }
  // LibTorch's parameters() lists a tied tensor once per owner (wte and lm_head); the
  // optimizer and clipping must see it once.
  std::vector<torch::Tensor> params;
  std::vector<std::string> param_names;
  {
    std::unordered_set<const void*> seen;
    for (auto& p : model.module->named_parameters())
      if (seen.insert(p.value().unsafeGetTensorImpl()).second) {
        params.push_back(p.value());
        param_names.push_back(p.key());
      }
  }
  {
    // Every rank starts from rank 0's weights.
    torch::NoGradGuard no_grad;
    for (auto& p : params) comm::broadcast(*world, p).wait();
  }
  // Resuming: the consolidated weights before any sharding, the optimizer states below.
  int64_t start = 0;
  fs::path resume_dir;
  if (!o.resume.empty()) {
    try {
      std::tie(resume_dir, start) = load_model_checkpoint(o, *model.module, params);
    } catch (const UserError& e) {
      std::cerr << render(e.diagnostic(), nullptr);
      return 1;
    }
  }

  // mesh(tp, pp): each rank keeps its tensor-parallel slices and its stage's parameters, cut
  // from the whole model every rank now holds (plain data parallelism over the rest).
  std::unique_ptr<MeshGroups> mesh;
  MeshLayout layout = MeshLayout::of(env.world, env.rank, 1, 1);
  std::unique_ptr<TensorParallel> tensor_parallel;
  if (plan.model_parallel()) {
    mesh = std::make_unique<MeshGroups>(make_mesh_groups(*world, plan.tp, plan.pp));
    layout = mesh->at;
    tensor_parallel = std::make_unique<TensorParallel>(*model.module, plan.shards, plan.syncs, mesh->tp);
    tensor_parallel->shard_parameters();
  }
  if (stages) {
    // Another stage's parameters: their memory goes, and this rank neither trains nor reduces them.
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> kept;
    std::vector<std::string> kept_names;
    for (size_t i = 0; i < params.size(); ++i) {
      int s = stages->stage_of_param(param_names[i]);
      if (s >= 0 && s != layout.stage) {
        params[i].set_(torch::empty({0}, params[i].options()));
        continue;
      }
      kept.push_back(params[i]);
      kept_names.push_back(param_names[i]);
    }
    params = std::move(kept);
    param_names = std::move(kept_names);
  }

  std::unordered_set<const torch::nn::Module*> checkpointed;
  for (auto& item : model.module->named_modules("", /*include_self=*/true))
    for (auto& path : plan.checkpoint)
      if (item.key() == path) checkpointed.insert(item.value().get());
  ActivationCheckpointer checkpointer(checkpointed);
  if (!checkpointed.empty()) nn::set_call_interceptor(&checkpointer);

  plan.factors.dp = env.world;
  torch::Dtype reduce_dtype = o.reduce_dtype == "fp16" ? torch::kHalf : o.reduce_dtype == "bf16" ? torch::kBFloat16 : torch::kFloat;
  bool profiling = !o.profile_out.empty();
  ir::OpTrace trace;
  if (plan.factors.optim > 1 || profiling) trace = trace_model(o.model);
  // Profiling: the op profiler runs innermost, where an op's parameters are resident.
  nn::CallInterceptor* innermost = checkpointed.empty() ? nullptr : &checkpointer;
  std::unique_ptr<OpProfiler> profiler;
  if (profiling) {
    profiler = std::make_unique<OpProfiler>(*model.module, trace, innermost, cuda ? gpu : -1);
    innermost = profiler.get();
    nn::set_call_interceptor(profiler.get());
  }

  // Any sharding (s_os > 1: ZeRO-1/2/3, MiCS, hybrids): the sharded executor runs every module
  // call, the activation checkpointer inside it. Every rank creates every subgroup, in order.
  std::unique_ptr<ShardedExecutor> sharded;
  std::vector<torch::Tensor> optimized = params;
  if (plan.factors.optim > 1) {
    ir::Program step = plan_step(*sch, trace, nullptr, PipelineDebug::from_environment(std::cerr));
    sharded = std::make_unique<ShardedExecutor>(*model.module, std::move(step), make_shard_groups(*world, plan.factors), innermost,
                                                reduce_dtype);
    optimized = sharded->optimized();
    nn::set_call_interceptor(sharded.get());
  }
  nn::CallInterceptor* outermost = sharded ? sharded.get() : innermost;
  if (tensor_parallel) {
    outermost = tensor_parallel.get();
    nn::set_call_interceptor(outermost);
  }
  // Test-only faults (loom verify's tests): unreduced gradients, weights released too early.
  std::vector<std::string> unreduced, released_early;
  for (const InjectedFault& f : plan.faults) {
    if (f.primitive == "test_skip_reduction") unreduced.push_back(f.param);
    if (f.primitive == "test_release_early") released_early.push_back(f.module);
  }
  if (sharded) sharded->inject_faults(unreduced, released_early);
  if (sharded && !plan.compress.empty()) {
    try {
      configure_compression(*sharded, plan.compress, param_names, resume_dir, env);
    } catch (const UserError& e) {
      std::cerr << render(e.diagnostic(), nullptr);
      return 1;
    }
  }
  // loom verify: the first step is recorded, module call by module call.
  std::unique_ptr<StepRecorder> recorder;
  if (!o.record.empty()) {
    recorder = std::make_unique<StepRecorder>(*model.module, outermost);
    nn::set_call_interceptor(recorder.get());
  }
  // Pipeline stages pass over other stages' modules before the recorder sees a call.
  std::unique_ptr<PipelineStage> stage;
  if (stages) {
    stage = std::make_unique<PipelineStage>(*model.module, *stages, *mesh, recorder ? static_cast<nn::CallInterceptor*>(recorder.get()) : outermost);
    nn::set_call_interceptor(stage.get());
  }

  // Each optimized tensor as a range of its parameter's flat tensor (sharded checkpoints).
  std::vector<OptimizedRange> ranges;
  if (sharded) {
    ranges = sharded->optimized_ranges();
  } else {
    for (size_t i = 0; i < params.size(); ++i)
      ranges.push_back({param_names[i], params[i].numel(), 0, optimized[i]});
  }
  for (const InjectedFault& f : plan.faults) {
    if (f.primitive != "test_corrupt_shard" || f.rank != env.rank) continue;
    auto it = std::find_if(ranges.begin(), ranges.end(), [&](const OptimizedRange& r) { return r.param == f.param; });
    if (it == ranges.end()) {
      std::cerr << "error: test_corrupt_shard: " << f.param << " is not a trained parameter of its own (a tied weight?)\n";
      return 1;
    }
    // Not a constant: a LayerNorm'd input sums to zero, so a uniform shift would not show.
    torch::NoGradGuard no_grad;
    it->tensor.add_(torch::arange(it->tensor.numel(), it->tensor.options().requires_grad(false)).remainder(7).mul(0.01).view_as(it->tensor));
  }
  // offload("optimizer"): the optimizer updates host copies, so its states live on the host.
  std::unique_ptr<OptimizerOffload> offload;
  if (plan.offload) offload = std::make_unique<OptimizerOffload>(optimized, plan.offload_budget);
  torch::optim::AdamW optimizer(offload ? offload->optimized() : optimized,
                                torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).weight_decay(o.weight_decay));
  // The ranges by the tensors the optimizer holds states for (checkpoints).
  std::vector<OptimizedRange> state_ranges = ranges;
  if (offload)
    for (size_t i = 0; i < state_ranges.size(); ++i) state_ranges[i].tensor = offload->optimized()[i];
  if (!resume_dir.empty()) {
    try {
      load_optimizer_ranges(resume_dir, state_ranges, optimizer);
    } catch (const UserError& e) {
      std::cerr << render(e.diagnostic(), nullptr);
      return 1;
    }
  }
  std::unique_ptr<GradientReducer> reducer;
  // Replicated parameters are all-reduced in buckets; sharded ones by the executor.
  comm::Group* replicas = mesh ? mesh->dp.get() : env.world > 1 ? world.get() : nullptr;
  if (replicas && !sharded) {
    std::vector<torch::Tensor> reduced;
    std::vector<int> declared;  // bucket(): the index of the module holding each parameter
    for (size_t i = 0; i < params.size(); ++i) {
      if (std::find(unreduced.begin(), unreduced.end(), param_names[i]) != unreduced.end()) continue;
      reduced.push_back(params[i]);
      auto in = std::find_if(plan.buckets.begin(), plan.buckets.end(),
                             [&](const std::string& m) { return param_names[i].rfind(m + ".", 0) == 0; });
      declared.push_back(in == plan.buckets.end() ? -1 : static_cast<int>(in - plan.buckets.begin()));
    }
    reducer = std::make_unique<GradientReducer>(reduced, *replicas, o.bucket_bytes, reduce_dtype, declared);
  }

  std::unique_ptr<TimelineObserver> observer;
  if (!o.trace.empty()) {
    timeline::enable(env.rank);
    observer = std::make_unique<TimelineObserver>(*model.module);
    nn::set_call_observer(observer.get());
  }

  bool lead = env.rank == 0;
  std::ofstream metrics;
  if (lead && !o.metrics.empty()) metrics.open(o.metrics, start > 0 ? std::ios::app : std::ios::trunc);
  if (lead)
    std::cout << "loom run: " << o.model << " (" << module_tree_of(o.model)->parameter_count() << " parameters), "
              << env.world << " rank" << (env.world == 1 ? "" : "s") << " x " << threads << " thread"
              << (threads == 1 ? "" : "s") << ", " << data->describe() << ", " << plan.checkpoint.size()
              << " checkpointed modules, " << (plan.factors.optim > 1 ? "sharding (s_p, s_g, s_os) = (" + std::to_string(plan.factors.params) + ", " +
                                                 std::to_string(plan.factors.grads) + ", " + std::to_string(plan.factors.optim) + "), "
                                           : "")
              << (!cuda ? "cpu (fp32, gloo)" : std::string("cuda (") + (bf16 ? "bf16 autocast, fp32 weights" : "fp32") + (nccl ? ", nccl)" : ", gloo)"))
              << (start > 0 ? ", resuming after step " + std::to_string(start) : "")
              << (mesh ? ", mesh tp " + std::to_string(layout.tp) + " x pp " + std::to_string(layout.pp) + " x dp " + std::to_string(layout.dp)
                       : "")
              << "\n"
              << describe_run_shape(o, *sch, layout.dp) << std::flush;
  if (lead && offload)
    std::cout << "offload: the optimizer states of " << offload->offloaded_count() << " of " << optimized.size()
              << " tensors (" << offload->offloaded_elements() << " elements per rank) live in host memory\n"
              << std::flush;
  Progress progress(o.steps);
  RunSummary summary;
  auto run_start = std::chrono::steady_clock::now();
  int64_t V = model.vocab_size;
  std::vector<int64_t> tokens(static_cast<size_t>(o.micro_batch * (o.seq + 1)));
  for (int64_t step = start; step < o.steps; ++step) {
    bool recording = recorder && step == start;
    auto t0 = std::chrono::steady_clock::now();
    memory::reset_peak();
    if (cuda) compat::cuda_reset_peak(gpu);
    double lr = learning_rate(o, step);
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    optimizer.zero_grad();
    double loss_sum = 0;
    int64_t between_micro_batches = -1;
    for (int64_t micro = 0; micro < o.accum; ++micro) {
      for (int64_t i = 0; i < o.micro_batch; ++i)
        data->sample(sample_index(step, micro, o.accum, layout.dp, layout.dp_rank, o.micro_batch, i), o.seq + 1,
                     tokens.data() + i * (o.seq + 1));
      torch::Tensor batch = torch::from_blob(tokens.data(), {o.micro_batch, o.seq + 1}, torch::kLong).to(device);
      torch::Tensor x = batch.narrow(1, 0, o.seq), y = batch.narrow(1, 1, o.seq).contiguous();
      if (sharded) sharded->begin_forward(micro == o.accum - 1);
      if (profiler) profiler->begin_forward(step >= o.profile_warmup);
      torch::Tensor logits;
      bool handed_on = false;  // a pipeline stage before the last: its activation went to the next stage
      {
        timeline::Span span("forward", "phase");
        if (recording) recorder->begin_forward();
        try {
          logits = model.forward(x);
        } catch (const StageForwardDone&) {
          handed_on = true;
        }
        if (recording) recorder->end_forward();
        if (sharded) sharded->finish_forward();
      }
      // The loss in fp32 whatever the compute dtype.
      torch::Tensor loss;
      if (!handed_on)
        loss = torch::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, V}), y.reshape({-1})) / static_cast<double>(o.accum);
      if (bf16) compat::clear_autocast_cache();
      if (recording && loss.defined()) recorder->add(RecordKind::Loss, "loss", micro, 0, loss);
      if (reducer) reducer->prepare(micro == o.accum - 1);
      {
        timeline::Span span("backward", "phase");
        if (profiler) profiler->begin_backward();
        if (handed_on) stage->backward_from_next_stage();
        else loss.backward();
        if (stage) stage->send_gradient_to_previous_stage();
        if (profiler) profiler->end_backward();
        if (reducer) reducer->finish();
        if (sharded) sharded->finish_backward();
      }
      if (loss.defined()) loss_sum += loss.item<double>();
      // Between micro-batches only model states stay resident (lins.txt §IV-D's quantity).
      if (micro == 0 && o.accum > 1 && !cuda) between_micro_batches = memory::current_bytes();
    }
    double grad_norm = std::numeric_limits<double>::quiet_NaN();
    {
      timeline::Span optimizer_span("optimizer", "phase");
      if (sharded) sharded->average_gradients();
      if (stage) stage->reduce_shared_gradients(params, param_names);
      if (recording)  // each rank's part of every reduced gradient (as shaped: tensor-parallel slices), before clipping
        for (const OptimizedRange& r : ranges)
          if (r.tensor.grad().defined()) recorder->add(RecordKind::ParamGrad, r.param, 0, r.offset, r.tensor.grad());
      // Compressed gradients are lossy by design: their stated bounds. AdamW's first step moves
      // each element by lr * |m| / (sqrt(v) + eps) < lr, so the updated values differ by < 2 lr.
      if (recording && sharded)
        for (const auto& b : sharded->compression_bounds())
          recorder->add(RecordKind::Bound, b.param, 0, 0,
                        torch::tensor({b.bound, step == 0 ? 2 * lr : std::numeric_limits<double>::infinity(),
                                       static_cast<double>(b.estimated)}, torch::dtype(torch::kDouble)));
      // The gradient norm: for clipping, and for the metrics (--clip 0 computes it only for them).
      bool want_norm = o.clip > 0 || !o.metrics.empty();
      double max_norm = o.clip > 0 ? o.clip : std::numeric_limits<double>::infinity();
      if (sharded) {
        if (want_norm) grad_norm = sharded->clip_gradients(max_norm);
      } else if (mesh && want_norm) {
        // Each element once over the model's ranks: slices everywhere, the rest on tp rank 0 of
        // the stage that trains it (stage 0 for what every stage holds).
        std::vector<bool> counted;
        for (const std::string& name : param_names) {
          int s = stages ? stages->stage_of_param(name) : -1;
          counted.push_back((tensor_parallel->split_axis(name) >= 0 || layout.tp_rank == 0) &&
                            (s >= 0 || layout.stage == 0));
        }
        grad_norm = clip_sharded_grad_norm(params, mesh->model.get(), max_norm, counted);
      } else if (want_norm) {
        grad_norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
      }
      if (offload) offload->gradients_to_host();
      optimizer.step();
      if (offload) offload->values_to_device();
      if (sharded) sharded->publish();
    }
    if (recording) {
      if (sharded) sharded->gather_all();
      if (layout.dp_rank == 0)  // every replica holds the same parameters after the step
        for (size_t i = 0; i < params.size(); ++i) recorder->add(RecordKind::Param, param_names[i], 0, 0, params[i]);
      if (sharded) sharded->release_all();
      fs::create_directories(o.record);
      if (env.rank == 0)  // how loom verify reassembles the ranks' records into the plain model's
        std::ofstream(fs::path(o.record) / "mesh.json") << nlohmann::json{{"tp", layout.tp}, {"pp", layout.pp}}.dump() << "\n";
      recorder->write((fs::path(o.record) / ("rank-" + std::to_string(env.rank) + ".pt")).string());
    }
    torch::Tensor loss_t = torch::tensor({loss_sum}, torch::TensorOptions().dtype(torch::kDouble)).to(device);
    comm::all_reduce(*world, loss_t).wait();
    double loss = loss_t.item<double>() / (env.world / layout.pp);  // the last stage's ranks hold the loss
    if (cuda) compat::cuda_synchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double tokens_per_s = static_cast<double>(layout.dp * o.micro_batch * o.seq * o.accum) / (ms / 1000.0);
    int64_t peak = cuda ? compat::cuda_peak_bytes(gpu) : memory::peak_bytes();
    if (lead) {
      if (metrics.is_open()) {
        char loss_text[40];
        std::snprintf(loss_text, sizeof loss_text, "%.17g", loss);
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        nlohmann::json m{{"step", step + 1}, {"loss", nlohmann::json::parse(loss_text)}, {"lr", lr},
                         {"tokens_per_s", tokens_per_s}, {"step_ms", ms}, {"peak_mem_bytes", peak},
                         {"resident_between_micro_batches_bytes", between_micro_batches},
                         {"max_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024},
                         {"grad_norm", std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json()}};
        metrics << m.dump() << "\n" << std::flush;
        if (!metrics)
          throw UserError(SourceRange{}, "could not write --metrics " + o.metrics + " after step " + std::to_string(step + 1) + ": " +
                                             std::strerror(errno),
                          "free space or choose another --metrics file; --resume continues from the last checkpoint");
      }
      progress.update(step + 1, loss, tokens_per_s, ms, peak);
    }
    summary.steps += 1;
    summary.tokens += layout.dp * o.micro_batch * o.seq * o.accum;
    summary.final_loss = loss;
    summary.peak_bytes = std::max(summary.peak_bytes, peak);
    bool last = step + 1 == o.steps;
    if (!o.save_dir.empty() && (last || (o.save_every > 0 && (step + 1) % o.save_every == 0))) {
      if (sharded) sharded->gather_all();  // for the consolidated model.pt
      write_checkpoint(o, *world, step + 1, *model.module, optimizer, state_ranges, plan.factors.optim,
                       sharded ? sharded->compression_residuals() : std::map<std::string, torch::Tensor>{});
      if (sharded) sharded->release_all();
      summary.checkpoint = (fs::path(o.save_dir) / step_name(step + 1)).string();
    }
  }
  nn::set_call_interceptor(nullptr);
  nn::set_call_observer(nullptr);
  if (profiler) write_profile(o, *profiler, *world, sharded ? &sharded->groups() : nullptr, device, env);
  if (!o.trace.empty()) {
    // Each rank writes its events; rank 0 merges them (ranks of one node share the file system).
    timeline::write_rank_events(o.trace + ".rank" + std::to_string(env.rank));
    comm::barrier(*world);
    if (lead && env.world == env.local_world) timeline::merge(o.trace, env.world, o.trace);
  }
  comm::barrier(*world);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (lead && o.profile_out.empty() && o.record.empty()) std::cout << describe_summary(o, summary) << std::flush;
  return 0;
}

}  // namespace

int train(const TrainOptions& o, const RankEnv& env) {
  try {
    return train_rank(o, env);
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return 1;
  } catch (const comm::CommError& e) {
    // Another process's failure as this rank sees it: not a Loom bug.
    std::cerr << "error: " << e.what() << "\n  hint: another rank stopped or stalled (its own message says why); if the ranks "
              << "are only slow, raise --timeout (now " << o.timeout_s << " s)\n";
    return 1;
  }
}

}  // namespace loom
