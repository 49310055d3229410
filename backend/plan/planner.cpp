#include "backend/plan/planner.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/lower/step_program.h"
#include "backend/sim/simulator.h"
#include "grammar/parse.h"
#include "lang/interpreter.h"
#include "lang/schedule.h"
#include "verifier/schedule_rules.h"

namespace loom {
namespace {

// Parses the planner's schedule texts, each once: the points of different meshes share their own
// lines (their sharding, recomputation and prefetch), so most points reuse a program parsed
// before. Parsing holds a lock (ANTLR's shared caches are not known to be thread-safe);
// evaluating a parsed program, on a schedule of its own, does not.
class PlanTextParser {
 public:
  // Evaluates `text` on `sch`; throws UserError where the language refuses it.
  void evaluate(Schedule& sch, const std::string& text) {
    SourceManager sources;
    const SourceFile& file = sources.add("plan.sched", text);
    InterpreterOptions io;
    io.print_to = nullptr;
    Interpreter(sch, sources, io).run_program(parsed(file));
  }

 private:
  std::shared_ptr<const ast::Program> parsed(const SourceFile& file) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::shared_ptr<const ast::Program>& program = programs_[file.text];
    if (!program) program = parse_program(file);
    return program;
  }

  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const ast::Program>> programs_;  // by text
};

// The value `cache` holds for `key`, made by `make` (outside the lock, so threads making others
// go on) when it holds none; when two threads make the same one, the first kept wins.
template <class Cache, class Make>
typename Cache::mapped_type remembered(std::mutex& mutex, Cache& cache, const typename Cache::key_type& key, Make make) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto known = cache.find(key); known != cache.end()) return known->second;
  }
  typename Cache::mapped_type made = make();
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(made)).first->second;
}

// A plan structure's lines (plan_schedule_parts), evaluated once for all the points of its mesh.
struct EvaluatedStructure {
  std::unique_ptr<Schedule> schedule;  // null when the language refused it
  std::string refusal;
};

// The model's FLOPs in one step over every rank: forward and backward (twice the forward) of
// each replica's micro-batches; recomputation is not counted (Megatron-LM's MFU).
double model_flops_per_step(const ir::OpTrace& trace, const PlanPoint& p, const PlannerOptions& o) {
  double forward = 0;
  for (const ir::TracedOp& op : trace.forward) forward += op.flops;
  return 3 * forward * static_cast<double>(o.accum) * p.dp(o.world);
}

// The bytes of a rank's model states, of a model of `parameters` elements: where they alone
// exceed the limit, simulating cannot help.
int64_t state_bytes_of(int64_t parameters, const PlanPoint& p) {
  double elements = static_cast<double>(parameters) / (p.tp * p.pp);
  return static_cast<int64_t>(model_state_bytes(elements, StateBytes::loom_adamw(), p.params, p.grads, p.optim));
}

}  // namespace

namespace {

// What became of one point of the space.
struct PointOutcome {
  enum { OverMemory, Refused, Simulated } what = Refused;
  bool simulated = false;  // OverMemory: by its simulated peak (else by its model states alone)
  int64_t least_bytes = 0;  // OverMemory: its simulated peak, or its model states' bytes (a bound below its peak)
  std::string refusal;     // Refused: why
  PlannedStep step;     // Simulated
};

// Evaluates the points of `points` by index, several threads at once: each takes the next index,
// writes its schedule, parses it (one thread at a time, once per text) and evaluates it, then lowers and
// simulates on its own copy of the cost model.
class PlanEvaluator {
 public:
  PlanEvaluator(std::shared_ptr<const ModuleTree> tree, const ir::OpTrace& trace, const ClusterCost& cost, const PlannerOptions& o,
                const std::vector<PlanPoint>& points, const std::function<void(size_t, size_t)>& progress)
      : tree_(std::move(tree)),
        parameters_(tree_->parameter_count()),
        trace_(trace),
        cost_(cost),
        o_(o),
        points_(points),
        progress_(progress),
        outcomes_(points.size()) {}

  std::vector<PointOutcome> run(int threads) {
    threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, threads)), std::max<size_t>(1, points_.size())));
    std::vector<std::thread> workers;
    try {
      for (int t = 1; t < threads; ++t) workers.emplace_back([this] { work(); });
    } catch (const std::system_error&) {
      // No more threads to be had: the ones started and this one share the points.
    }
    work();
    for (std::thread& w : workers) w.join();
    if (failure_) std::rethrow_exception(failure_);
    return std::move(outcomes_);
  }

 private:
  // Never throws: a thread's exception would end the process. The first failure stops every
  // thread and is rethrown by run().
  void work() {
    try {
      auto cost = std::make_shared<const ClusterCost>(cost_);  // its span and price caches are its own
      for (size_t i; (i = next_++) < points_.size();) {
        outcomes_[i] = evaluate(points_[i], cost);
        std::lock_guard<std::mutex> lock(language_);
        if (progress_) progress_(++done_, points_.size());
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(language_);
      if (!failure_) failure_ = std::current_exception();
      next_ = points_.size();
    }
  }

  PointOutcome evaluate(const PlanPoint& p, const std::shared_ptr<const ClusterCost>& priced) {
    const ClusterCost& cost = *priced;
    int64_t limit = o_.memory_limit > 0 ? o_.memory_limit : cost.cluster().device.memory_bytes;
    PointOutcome out;
    if (int64_t states = state_bytes_of(parameters_, p); states > limit) {
      out.what = PointOutcome::OverMemory;
      out.least_bytes = states;
      return out;
    }
    PlanText text = plan_schedule_parts(*tree_, p, o_.attention, o_.prefetch);
    PlannedStep step{p, text.structure + text.own};
    RuntimePlan plan;
    try {
      plan = runtime_plan_of(p, text);
    } catch (const UserError& e) {
      out.refusal = e.diagnostic().message;
      return out;
    }
    std::vector<ir::Program> stages;
    try {
      stages = lower_stages(p, plan, priced, limit);
    } catch (const UserError& e) {
      out.refusal = e.diagnostic().message;
      return out;
    }
    SimResult r = simulate(stages, cost, StateBytes::loom_adamw(), /*timeline=*/false);
    out.simulated = true;
    if (r.peak_bytes > limit) {
      out.what = PointOutcome::OverMemory;
      out.least_bytes = r.peak_bytes;
      return out;
    }
    const DeviceSpec& device = cost.cluster().device;
    double peak_flops = cost.precision() == Precision::Bf16 ? device.matrix_flops_bf16 : device.matrix_flops_fp32;
    step.step_s = r.step_s;
    step.compute_s = r.compute_s;
    step.exposed_comm_s = r.exposed_comm_s;
    step.peak_bytes = r.peak_bytes;
    step.comm_busy_s = std::move(r.comm_busy_s);
    step.mfu = model_flops_per_step(trace_, p, o_) / (r.step_s * o_.world * peak_flops);
    step.tokens_per_s_per_rank = static_cast<double>(o_.micro_batch * o_.seq * o_.accum) * p.dp(o_.world) / (r.step_s * o_.world);
    out.what = PointOutcome::Simulated;
    out.step = std::move(step);
    return out;
  }

  // The point's runtime plan: its own lines evaluated on a copy of its structure's schedule, then
  // the whole schedule's rules and its lowering; throws UserError where they refuse it.
  RuntimePlan runtime_plan_of(const PlanPoint& p, const PlanText& text) {
    std::shared_ptr<const EvaluatedStructure> structure = structure_of(p, text.structure);
    if (!structure->schedule) throw UserError(SourceRange{}, structure->refusal, "");
    std::unique_ptr<Schedule> sch = structure->schedule->clone();
    parser_.evaluate(*sch, text.own);
    check_schedule_rules(*sch);
    return lower_schedule(*sch);
  }

  std::shared_ptr<const EvaluatedStructure> structure_of(const PlanPoint& p, const std::string& text) {
    return remembered(structures_mutex_, structures_, {p.tp, p.pp}, [&]() -> std::shared_ptr<const EvaluatedStructure> {
      auto evaluated = std::make_shared<EvaluatedStructure>();
      evaluated->schedule = std::make_unique<Schedule>(tree_, ScheduleContext{o_.world, o_.local_world});
      try {
        parser_.evaluate(*evaluated->schedule, text);
      } catch (const UserError& e) {
        evaluated->schedule.reset();
        evaluated->refusal = e.diagnostic().message;
      }
      return evaluated;
    });
  }

  // One program per stage, as lower_stage_programs lowers them, from the initial programs of the
  // point's structure: lowered once per mesh and recomputation (all the initial program reads of
  // a plan but s_os), then given the point's sharding, what follows its s_os sized again, and its
  // passes, the memory-aware ones within `limit` on `cost`'s times. Lowering without re-verifying after each pass: the end
  // result is verified (the tests verify each pass).
  std::vector<ir::Program> lower_stages(const PlanPoint& p, const RuntimePlan& plan, const std::shared_ptr<const ClusterCost>& cost,
                                        int64_t limit) {
    StepOptions options;
    options.grad_norm = o_.grad_norm;
    options.accum = o_.accum;
    if (o_.prefetch == PlanPrefetch::MemoryAware) {
      options.memory.limit = limit;
      options.memory.plan_with(cost);
    }
    std::shared_ptr<const std::vector<ir::Program>> initial = initial_programs(p, plan, options);
    PipelineDebug checked_at_the_end;
    checked_at_the_end.verify_each_pass = false;
    std::vector<ir::Program> stages;
    for (int s = 0; s < plan.pp; ++s) {
      ir::Program program = (*initial)[static_cast<size_t>(s)];
      program.sharding = plan.factors;
      ir::size_by_optimizer_shards(program);
      options.rank = stage_rank(plan, o_.world, s);
      stages.push_back(finish_step_program(std::move(program), plan, options, nullptr, checked_at_the_end));
    }
    return stages;
  }

  std::shared_ptr<const std::vector<ir::Program>> initial_programs(const PlanPoint& p, const RuntimePlan& plan, StepOptions options) {
    return remembered(initial_mutex_, initial_, {p.tp, p.pp, p.checkpoint}, [&]() -> std::shared_ptr<const std::vector<ir::Program>> {
      auto programs = std::make_shared<std::vector<ir::Program>>();
      for (int s = 0; s < plan.pp; ++s) {
        options.rank = stage_rank(plan, o_.world, s);
        programs->push_back(initial_step_program(plan, trace_, options));
      }
      return programs;
    });
  }

  std::shared_ptr<const ModuleTree> tree_;
  int64_t parameters_;  // the model's
  const ir::OpTrace& trace_;
  const ClusterCost& cost_;
  const PlannerOptions& o_;
  const std::vector<PlanPoint>& points_;
  const std::function<void(size_t, size_t)>& progress_;
  std::vector<PointOutcome> outcomes_;
  std::atomic<size_t> next_{0};
  std::mutex language_;  // the progress callback and the first failure
  PlanTextParser parser_;
  std::mutex initial_mutex_, structures_mutex_;
  std::map<std::pair<int, int>, std::shared_ptr<const EvaluatedStructure>> structures_;  // (tp, pp)
  std::map<std::tuple<int, int, bool>, std::shared_ptr<const std::vector<ir::Program>>> initial_;  // (tp, pp, checkpoint)
  size_t done_ = 0;
  std::exception_ptr failure_;
};

}  // namespace

PlanReport plan_parallelism(std::shared_ptr<const ModuleTree> tree, const ir::OpTrace& trace, const ClusterCost& cost,
                            const PlannerOptions& o, const std::function<void(size_t, size_t)>& progress) {
  std::vector<PlanPoint> points = enumerate_plan_space(*tree, {o.world, o.local_world, o.checkpoint});
  int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<PointOutcome> outcomes = PlanEvaluator(tree, trace, cost, o, points, progress).run(threads);
  PlanReport report;
  report.configurations = outcomes.size();
  for (PointOutcome& out : outcomes) {  // in the space's order, whatever the threads did first
    if (out.what == PointOutcome::Refused && report.refused++ == 0) report.first_refusal = out.refusal;
    if (out.simulated) ++report.evaluated;
    if (out.what == PointOutcome::OverMemory) {
      ++report.over_memory;
      if (!out.simulated) ++report.over_memory_by_states;
      int64_t& least = out.simulated ? report.least_simulated_peak : report.least_state_bytes;
      if (least == 0 || out.least_bytes < least) least = out.least_bytes;
    }
    if (out.what == PointOutcome::Simulated) report.feasible.push_back(std::move(out.step));
  }
  // Best first by throughput: a plan with fewer data-parallel replicas (a mesh) processes fewer
  // tokens per step, so its step time alone would flatter it; for plans of the same tokens per
  // step this is their order by step time.
  std::stable_sort(report.feasible.begin(), report.feasible.end(), [](const PlannedStep& a, const PlannedStep& b) {
    return a.tokens_per_s_per_rank > b.tokens_per_s_per_rank;
  });
  return report;
}

}  // namespace loom
