// Lins Table III (issue #15 §5): loom plan on lins-a800 at lins.txt §VI-A's setting (1,024
// ranks, 8 per node, seq 4096, one micro-batch of one sequence per step, 80 GiB), every attention
// running the memory-efficient kernel (the paper runs FlashAttention-2), gathers prefetched a block
// ahead (the paper's runtimes overlap them). What it reproduces, and where it departs and why
// (docs/simulate.md, "Against Lins' Table III"):
// - LLaMA-30B: the paper's plan, (8, 8, 8) with every layer recomputed, is loom plan's best, at
//   a simulated MFU near the paper's 42%.
// - LLaMA-13B: the paper's (4, 4, 8) fits and is within 3% of the best plan's step, (8, 8, 8)
//   with recomputation; the paper runs it without recomputation, which does not fit Loom's
//   runtime (fp32 parameters and gradients, fp32 activations: 4/4/8 bytes of states where the
//   paper keeps 2/2/12).
// - LLaMA-7B: the paper's (1, 1, 8) fits with and without recomputation (without, 74 GiB: full
//   fp32 parameters on every rank, each gradient full only until its all-reduce's wait), its
//   step 13-14% longer than the best's.
// And beyond the paper, LLaMA-7B planned with DeepCompile's memory-aware passes (--memory-passes
// auto): sharded plans keep what fits of their gathered parameters for backward, so the best plan
// shards further and its step is shorter than any plan gathering a block ahead.
#include "doctest_torch.h"

#include "backend/cost/cluster.h"
#include "backend/instrument/model_trace.h"
#include "backend/plan/plan_space.h"
#include "backend/plan/planner.h"
#include "models/zoo.h"

using namespace loom;

namespace {

struct TableRun {
  PlanReport report;
  // A plan of the report at tp = pp = 1 with these factors and recomputation, or null when it
  // is not among the feasible ones.
  const PlannedStep* find(int s_p, int s_g, int s_os, bool checkpoint) const {
    for (const PlannedStep& s : report.feasible)
      if (s.point.tp == 1 && s.point.pp == 1 && s.point.params == s_p && s.point.grads == s_g && s.point.optim == s_os &&
          s.point.checkpoint == checkpoint)
        return &s;
    return nullptr;
  }
};

TableRun plan_table3(const std::string& model, PlanPrefetch prefetch = PlanPrefetch::BlockAhead) {
  auto tree = module_tree_of(model);
  std::vector<ModuleReplacement> attention = replacements_of(*tree, "memory_efficient_attention");
  REQUIRE(!attention.empty());
  ir::OpTrace trace = trace_model(model, {1, 4096}, attention);
  ClusterCost cost(load_cluster("lins-a800", cluster_dirs()), Precision::Bf16, 8);
  PlannerOptions o;
  o.world = 1024;
  o.local_world = 8;
  o.micro_batch = 1;
  o.seq = 4096;
  o.checkpoint = "auto";
  o.attention = "memory_efficient_attention";
  o.memory_limit = int64_t{80} << 30;
  o.prefetch = prefetch;
  TableRun run{plan_parallelism(tree, trace, cost, o)};
  REQUIRE(!run.report.feasible.empty());
  const PlannedStep& best = run.report.feasible[0];
  MESSAGE(model << ": best (" << best.point.params << ", " << best.point.grads << ", " << best.point.optim << ") tp "
                << best.point.tp << " pp " << best.point.pp << std::string(best.point.checkpoint ? " recomputed" : "") << ", MFU "
                << best.mfu << ", step " << best.step_s << " s");
  return run;
}

}  // namespace

TEST_CASE("Lins Table III, LLaMA-30B: the paper's (8, 8, 8) with recomputation is loom plan's best, near its 42% MFU") {
  TableRun run = plan_table3("llama-30b");
  const PlannedStep& best = run.report.feasible[0];
  CHECK(best.point.tp == 1);
  CHECK(best.point.pp == 1);
  CHECK(best.point.params == 8);
  CHECK(best.point.grads == 8);
  CHECK(best.point.optim == 8);
  CHECK(best.point.checkpoint);
  CHECK(best.mfu == doctest::Approx(0.42).epsilon(0.25));  // 42% +- a quarter of it
}

TEST_CASE("Lins Table III, LLaMA-13B: the paper's (4, 4, 8) fits, within 3% of the best plan, only with recomputation") {
  TableRun run = plan_table3("llama-13b");
  const PlannedStep* lins = run.find(4, 4, 8, /*checkpoint=*/true);
  REQUIRE(lins != nullptr);
  MESSAGE("(4, 4, 8) recomputed: MFU " << lins->mfu << ", step " << lins->step_s << " s");
  CHECK(lins->step_s <= 1.03 * run.report.feasible[0].step_s);
  CHECK(run.find(4, 4, 8, /*checkpoint=*/false) == nullptr);  // over 80 GiB with Loom's fp32 states and activations
}

TEST_CASE("Lins Table III, LLaMA-7B: the paper's (1, 1, 8) fits, with and without recomputation, its step 13% longer than the best's") {
  TableRun run = plan_table3("llama-7b");
  for (bool checkpoint : {false, true}) {
    const PlannedStep* lins = run.find(1, 1, 8, checkpoint);
    REQUIRE(lins != nullptr);
    std::string plan = checkpoint ? "(1, 1, 8) recomputed" : "(1, 1, 8)";
    MESSAGE(plan << ": MFU " << lins->mfu << ", step " << lins->step_s << " s, peak " << lins->peak_bytes / double(int64_t{1} << 30)
                 << " GiB");
    CHECK(lins->step_s == doctest::Approx(1.13 * run.report.feasible[0].step_s).epsilon(0.05));
  }
  // MFU as Megatron-LM counts it, worked by hand from LLaMA-7B's shape: each token's forward and
  // backward matrix products, 6 FLOPs a weight (the 32 blocks' attention and SwiGLU weights and
  // the output head; the embedding is a lookup), plus attention's two s x s products, 12 s^2 h a
  // block (no causal halving), recomputation not counted; over the step at A800's bf16 peak. Each
  // replica (tp = pp = 1 here) runs one 4,096-token sequence a step.
  const double h = 4096, layers = 32, ffn = 11008, vocab = 32000, s = 4096;
  const double weights = layers * (4 * h * h + 3 * h * ffn) + h * vocab;
  const double flops_per_replica = 6 * weights * s + 12 * s * s * h * layers;
  const double peak = load_cluster("lins-a800", cluster_dirs()).device.matrix_flops_bf16;
  for (const PlannedStep& plan : run.report.feasible) {
    if (plan.point.tp * plan.point.pp != 1) continue;
    CHECK(plan.mfu == doctest::Approx(flops_per_replica / (plan.step_s * peak)).epsilon(0.005));
  }
}

TEST_CASE("LLaMA-7B planned with the memory-aware passes: the best plan shards further and keeps gathered what fits in 80 GiB") {
  TableRun ahead = plan_table3("llama-7b");
  TableRun aware = plan_table3("llama-7b", PlanPrefetch::MemoryAware);
  const PlannedStep& best = aware.report.feasible[0];
  MESSAGE("block ahead: step " << ahead.report.feasible[0].step_s << " s; memory-aware: step " << best.step_s << " s at ("
                               << best.point.params << ", " << best.point.grads << ", " << best.point.optim << "), peak "
                               << best.peak_bytes / double(int64_t{1} << 30) << " GiB");
  CHECK(best.point.params > ahead.report.feasible[0].point.params);
  CHECK(best.schedule.find("sch.blocks().unshard(auto)") != std::string::npos);
  CHECK(best.peak_bytes <= int64_t{80} << 30);
  CHECK(best.step_s < 0.85 * ahead.report.feasible[0].step_s);  // 1,068 against 1,392 ms when written
  // The same factors gathering a block ahead: the passes alone make the difference.
  const PlannedStep* same = ahead.find(best.point.params, best.point.grads, best.point.optim, best.point.checkpoint);
  REQUIRE(same != nullptr);
  CHECK(best.step_s < same->step_s);
  CHECK(best.peak_bytes > same->peak_bytes);  // the memory they spent on it
}
