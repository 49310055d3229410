// loom plan's search space (issue #15 §4): Lins' factor filters and Megatron's split of a block.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "backend/plan/plan_space.h"
#include "lang/replacements.h"

using namespace loom;

namespace {

// A GPT-like model: `blocks` blocks h.N of attn (c_attn, c_proj) and mlp (c_fc, c_proj), `width` wide.
ModuleTree gpt_like(int blocks, int64_t width = 128) {
  ModuleTree t("GPT");
  int h = t.add(0, "h", "ModuleList");
  auto linear = [&](int parent, const std::string& name, int64_t out, int64_t in) {
    int l = t.add(parent, name, "Linear");
    t.add_param(l, {"weight", {out, in}, "float32", ""});
    t.add_param(l, {"bias", {out}, "float32", ""});
  };
  for (int b = 0; b < blocks; ++b) {
    int block = t.add(h, std::to_string(b), "Block");
    int attn = t.add(block, "attn", "Attention");
    linear(attn, "c_attn", 3 * width, width);
    linear(attn, "c_proj", width, width);
    int mlp = t.add(block, "mlp", "MLP");
    linear(mlp, "c_fc", 4 * width, width);
    linear(mlp, "c_proj", width, 4 * width);
  }
  return t;
}

}  // namespace

TEST_CASE("Megatron's split of a block: the last Linear of each group row-parallel, the others column-parallel") {
  CHECK(tensor_parallel_directives(gpt_like(2), 2) ==
        "for b in sch[\"h.*\"] {\n"
        "    b[\"attn.c_attn\"].shard([\"weight\", \"bias\"], axis=0).sync(mode=\"bwd_post\", op=\"all_reduce\")\n"
        "    b[\"attn.c_proj\"].shard(\"weight\", axis=1).sync(mode=\"fwd_post\", op=\"all_reduce\")\n"
        "    b[\"mlp.c_fc\"].shard([\"weight\", \"bias\"], axis=0).sync(mode=\"bwd_post\", op=\"all_reduce\")\n"
        "    b[\"mlp.c_proj\"].shard(\"weight\", axis=1).sync(mode=\"fwd_post\", op=\"all_reduce\")\n"
        "}\n");
  CHECK(tensor_parallel_directives(gpt_like(2), 3).empty());  // 384 divides by 3, 128 does not
  ModuleTree flat("Flat");
  flat.add(0, "fc", "Linear");
  CHECK(tensor_parallel_directives(flat, 2).empty());  // no repeated blocks
}

TEST_CASE("the plan space: s_p | s_g | s_os | dp with s_g in {s_p, s_os}, factors fill a node first, meshes that fit") {
  ModuleTree t = gpt_like(4);
  std::vector<PlanPoint> points = enumerate_plan_space(t, {8, 8, "none"});
  auto has = [&](int tp, int pp, int p, int g, int o) {
    return std::any_of(points.begin(), points.end(), [&](const PlanPoint& x) {
      return x.tp == tp && x.pp == pp && x.params == p && x.grads == g && x.optim == o;
    });
  };
  CHECK(has(1, 1, 1, 1, 1));
  CHECK(has(1, 1, 1, 1, 8));  // ZeRO-1
  CHECK(has(1, 1, 1, 8, 8));  // ZeRO-2
  CHECK(has(1, 1, 8, 8, 8));  // ZeRO-3
  CHECK(has(1, 1, 2, 2, 8));
  CHECK_FALSE(has(1, 1, 1, 2, 8));  // s_g is s_p or s_os (lins.txt §IV-C3)
  CHECK_FALSE(has(1, 1, 4, 4, 2));  // s_p divides s_os
  CHECK(has(2, 2, 1, 1, 2));        // tp 2 x pp 2 leaves dp 2
  CHECK(has(8, 1, 1, 1, 1));
  CHECK_FALSE(has(1, 8, 1, 1, 1));  // 8 stages of 4 blocks
  CHECK(std::all_of(points.begin(), points.end(), [](const PlanPoint& p) { return !p.checkpoint; }));
  // dp 8 at tp 1, pp 1: 10 pairs s_p | s_os of 1, 2, 4, 8; s_g has one choice in the 4 where
  // they are equal and two in the other 6: 16 points.
  CHECK(std::count_if(points.begin(), points.end(), [](const PlanPoint& p) { return p.tp == 1 && p.pp == 1; }) == 16);
  // Two nodes of 4: a factor spanning nodes takes whole nodes (lins.txt Eq. 7): 8 of 8 is whole
  // nodes, and every factor of 8 either divides 4 or is a multiple of it.
  std::vector<PlanPoint> across = enumerate_plan_space(t, {8, 4, "none"});
  CHECK(std::none_of(across.begin(), across.end(), [](const PlanPoint& p) { return p.tp > 4; }));
  // Three nodes of 4 (dp 12 at tp 1): 3 does not divide a node, 6 spans one and a half.
  std::vector<PlanPoint> twelve = enumerate_plan_space(t, {12, 4, "none"});
  auto factor = [&](int f) {
    return std::any_of(twelve.begin(), twelve.end(), [&](const PlanPoint& p) { return p.tp == 1 && p.pp == 1 && p.params == f; });
  };
  CHECK(factor(2));
  CHECK(factor(4));
  CHECK(factor(12));
  CHECK_FALSE(factor(3));
  CHECK_FALSE(factor(6));
  // A tensor-parallel group stays inside a node: tp divides a node's ranks. At 384 wide the
  // blocks split 3 ways, which nodes of 6 take and nodes of 8 do not.
  auto tps = [](const std::vector<PlanPoint>& space) {
    std::set<int> out;
    for (const PlanPoint& p : space) out.insert(p.tp);
    return out;
  };
  CHECK(tps(enumerate_plan_space(gpt_like(4, 384), {24, 8, "none"})) == std::set<int>{1, 2, 4, 8});
  CHECK(tps(enumerate_plan_space(gpt_like(4, 384), {24, 6, "none"})) == std::set<int>{1, 2, 3, 6});
  // checkpoint auto doubles every point.
  CHECK(enumerate_plan_space(t, {8, 8, "auto"}).size() == 2 * points.size());
}

TEST_CASE("a plan's schedule") {
  ModuleTree t = gpt_like(4);
  // Sharded parameters are gathered a block ahead (the overlap Lins' runtimes have).
  CHECK(plan_schedule_text(t, {1, 1, 2, 2, 8, false}) == "sch.shard_states(params=2, grads=2, optim=8)\nsch.blocks().prefetch()\n");
  CHECK(plan_schedule_text(t, {1, 1, 1, 1, 8, false}) == "sch.shard_states(params=1, grads=1, optim=8)\n");
  std::string mesh = plan_schedule_text(t, {2, 2, 1, 1, 1, true});
  CHECK(mesh.rfind("sch.mesh(tp=2, pp=2)\nfor b in sch[\"h.*\"] {\n", 0) == 0);
  CHECK(mesh.find("sch.shard_states(params=1, grads=1, optim=1)\nsch.blocks().checkpoint()\n") != std::string::npos);
  // The memory-aware passes: prefetched and kept gathered as the limit allows; under tensor
  // parallelism prefetched only (unshard(auto) would undo its shards); nothing to gather otherwise.
  const PlanPrefetch aware = PlanPrefetch::MemoryAware;
  CHECK(plan_schedule_text(t, {1, 1, 4, 4, 8, false}, "", aware) ==
        "sch.shard_states(params=4, grads=4, optim=8)\nsch.blocks().prefetch(budget=auto)\nsch.blocks().unshard(auto)\n");
  CHECK(plan_schedule_text(t, {1, 2, 2, 2, 2, false}, "", aware).find("sch.blocks().unshard(auto)\n") != std::string::npos);
  std::string tensor_parallel = plan_schedule_text(t, {2, 1, 2, 2, 2, false}, "", aware);
  CHECK(tensor_parallel.find("sch.blocks().prefetch(budget=auto)\n") != std::string::npos);
  CHECK(tensor_parallel.find("unshard") == std::string::npos);
  CHECK(plan_schedule_text(t, {1, 1, 1, 1, 8, false}, "", aware) == "sch.shard_states(params=1, grads=1, optim=8)\n");
}

TEST_CASE("a plan's attention: one replace() per position in the blocks, each module outside them by its path") {
  ModuleTree t = gpt_like(3);
  t.add(0, "pool", "Attention");  // an attention module outside the blocks
  ReplacementRegistry::global().add({"test_attention", {"Attention"}, "test entry"});
  std::vector<ModuleReplacement> r = replacements_of(t, "test_attention");
  REQUIRE(r.size() == 4);
  CHECK(r[0].module == "h.0.attn");
  CHECK(r[3].module == "pool");
  CHECK(replacements_of(t, "no_such_implementation").empty());
  CHECK(plan_schedule_text(t, {1, 1, 1, 1, 1, false}, "test_attention") ==
        "sch[\"h.*.attn\"].replace(\"test_attention\")\nsch[\"pool\"].replace(\"test_attention\")\n"
        "sch.shard_states(params=1, grads=1, optim=1)\n");
}
