// The instruction IR and its first passes on small hand-built graphs.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "backend/lower/directive_lowering.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/gradient_buckets.h"
#include "backend/lower/step_program.h"
#include "backend/ir/verifier.h"
#include "backend/passes/pass_pipeline.h"
#include "lang/diagnostics.h"

using namespace loom;
using ir::OpKind;

namespace {

// emb (wte) -> blk0.fc (w1) -> blk0.proj (w2) -> blk1.fc (w1 again) -> head (wte again, tied)
ir::OpTrace small_trace() {
  ir::OpTrace t;
  t.model = "toy";
  t.params = {{"wte", 1000, 4}, {"w1", 100, 4}, {"w2", 100, 4}};
  t.forward = {{"emb", {"wte"}}, {"blk0.fc", {"w1"}}, {"blk0.proj", {"w2"}}, {"blk1.fc", {"w1"}}, {"head", {"wte"}}};
  return t;
}

ir::Program run(const ir::OpTrace& t, ir::Sharding s, passes::PassInputs in = {}) {
  return run_passes(ir::lower(t, s), in, pipeline_passes(), nullptr, {});
}

// Index of the first instruction matching kind/phase/param (or module; "" matches any), from `from`.
int find(const ir::Program& p, OpKind kind, ir::Phase phase, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < p.instrs.size(); ++i) {
    const auto& in = p.instrs[i];
    if (in.kind != kind || in.phase != phase) continue;
    if (name.empty() || (kind == OpKind::Compute ? in.module == name : (!in.params.empty() && p.params[in.params[0]].name == name)))
      return static_cast<int>(i);
  }
  return -1;
}

// h.0 = fc, proj; h.1 = fc: parameters named by their modules.
ir::OpTrace two_blocks() {
  ir::OpTrace t;
  t.model = "blocks";
  t.params = {{"h.0.fc.w", 10, 4}, {"h.0.proj.w", 10, 4}, {"h.1.fc.w", 10, 4}};
  t.forward = {{"h.0.fc", {"h.0.fc.w"}}, {"h.0.proj", {"h.0.proj.w"}}, {"h.1.fc", {"h.1.fc.w"}}};
  return t;
}

int count(const ir::Program& p, OpKind kind) {
  int n = 0;
  for (auto& in : p.instrs) n += in.kind == kind;
  return n;
}

}  // namespace

TEST_CASE("an instruction's module path is one interned copy per text, read as a string") {
  ir::ModulePath a = std::string("h.0.") + "attn", b("h.0.attn"), other("h.1.attn"), none;
  CHECK(a == b);
  CHECK(&a.str() == &b.str());  // the same copy, compared as a pointer
  CHECK(a != other);
  CHECK(a == std::string("h.0.attn"));
  CHECK(a != "h.0");
  CHECK(none.empty());
  CHECK(none == ir::ModulePath(""));
  CHECK("layer " + a + "." == "layer h.0.attn.");
  const std::string& text = a;
  CHECK(ir::within("h.0.attn.c_attn", text));
  std::ostringstream printed;
  printed << other;
  CHECK(printed.str() == "h.1.attn");
}

TEST_CASE("lowering: forward in order, backward reversed, then the optimizer step") {
  ir::Program p = ir::lower(small_trace(), {}, /*grad_norm=*/false);
  REQUIRE(p.instrs.size() == 11);
  CHECK(p.instrs[0].module == "emb");
  CHECK(p.instrs[5].module == "head");
  CHECK(p.instrs[5].phase == ir::Phase::Backward);
  CHECK(p.instrs[9].module == "emb");
  CHECK(p.instrs[10].kind == OpKind::OptimizerStep);
  CHECK(ir::verify(p) == "");  // replicated parameters need no gathers
}

TEST_CASE("gather just before first use, release right after last use; a parameter used twice is released after the last") {
  ir::Program p = run(small_trace(), {2, 2, 2, 2});
  auto F = ir::Phase::Forward;
  int gather_w1 = find(p, OpKind::AllGather, F, "w1");
  int first_use = find(p, OpKind::Compute, F, "blk0.fc");
  int second_use = find(p, OpKind::Compute, F, "blk1.fc");
  int release_w1 = find(p, OpKind::Release, F, "w1");
  CHECK(gather_w1 < first_use);
  CHECK(p.instrs[gather_w1 + 1].kind == OpKind::Wait);
  CHECK(release_w1 == second_use + 1);  // not after blk0.fc
  // Tied weight: wte stays gathered from the embedding to the head.
  CHECK(find(p, OpKind::Release, F, "wte") == find(p, OpKind::Compute, F, "head") + 1);
  CHECK(count(p, OpKind::AllGather) == 6);  // each parameter once per phase
  CHECK(ir::verify(p) == "");
  // A gather moves its parameters' bytes, what the cost model prices it by: the verifier says
  // where a pass got that wrong.
  ir::Instr& gather = p.instrs[static_cast<size_t>(gather_w1)];
  int64_t held = ir::param_bytes(p, gather.params[0]);
  gather.bytes = held / 2;
  CHECK(ir::verify(p).find("moves " + std::to_string(held / 2) + " bytes where its parameters hold " + std::to_string(held)) !=
        std::string::npos);
}

TEST_CASE("gradient reduction follows the sharding factors") {
  auto kinds = [](const ir::Program& p) {
    std::string s;
    for (auto& in : p.instrs)
      if (in.phase == ir::Phase::Backward && in.kind != OpKind::Compute && in.kind != OpKind::Wait &&
          in.kind != OpKind::AllGather && in.kind != OpKind::Release && !in.params.empty() && p.params[in.params[0]].name == "w2")
        s += std::string(ir::op_name(in.kind)) + "(" + ir::role_name(in.group.role) + " " + std::to_string(in.group.size) + ") ";
    return s;
  };
  CHECK(kinds(run(small_trace(), {4, 1, 1, 1})) == "all_reduce(dp 4) ");                                   // data parallel
  CHECK(kinds(run(small_trace(), {4, 1, 1, 4})) == "all_reduce(dp 4) ");                                   // ZeRO-1
  CHECK(kinds(run(small_trace(), {4, 1, 4, 4})) == "all_reduce(replicas 4) select_drop(grads 4) ");        // ZeRO-2
  CHECK(kinds(run(small_trace(), {4, 4, 4, 4})) == "reduce_scatter(params 4) ");                           // ZeRO-3
  CHECK(kinds(run(small_trace(), {8, 2, 2, 2})) == "reduce_scatter(params 2) all_reduce(replicas 4) ");     // MiCS-style
  CHECK(kinds(run(small_trace(), {8, 2, 4, 4})) == "reduce_scatter(params 2) all_reduce(replicas 4) select_drop(grads 2) ");
  // Lins Table III's (4, 4, 8) at dp 8: updated parameters are broadcast in pairs.
  ir::Program lins = run(small_trace(), {8, 4, 4, 8});
  CHECK(count(lins, OpKind::Broadcast) == 3);
  CHECK(lins.instrs[find(lins, OpKind::Broadcast, ir::Phase::Step, "w1")].group.size == 2);
}

TEST_CASE("prefetch issues the next block's gathers before the current block computes") {
  ir::OpTrace t;
  t.model = "blocks";
  t.params = {{"a", 10, 4}, {"b", 10, 4}, {"c", 10, 4}};
  t.forward = {{"h.0.fc", {"a"}}, {"h.1.fc", {"b"}}, {"h.2.fc", {"c"}}};
  passes::PassInputs in;
  for (auto m : {"h.0", "h.1", "h.2"}) in.prefetch.push_back({m, 0});
  ir::Program plain = run(t, {2, 2, 2, 2});
  ir::Program ahead = run(t, {2, 2, 2, 2}, in);
  auto F = ir::Phase::Forward;
  CHECK(find(plain, OpKind::AllGather, F, "b") > find(plain, OpKind::Compute, F, "h.0.fc"));
  CHECK(find(ahead, OpKind::AllGather, F, "b") < find(ahead, OpKind::Compute, F, "h.0.fc"));
  CHECK(find(ahead, OpKind::AllGather, F, "c") < find(ahead, OpKind::Compute, F, "h.1.fc"));
  CHECK(find(ahead, OpKind::AllGather, F, "c") > find(ahead, OpKind::Compute, F, "h.0.fc"));  // one block ahead, not two
  // b's wait stays after block 0's compute, so its transfer overlaps that compute.
  int handle_b = ahead.instrs[find(ahead, OpKind::AllGather, F, "b")].handle;
  int wait_b = -1;
  for (size_t i = 0; i < ahead.instrs.size(); ++i)
    if (ahead.instrs[i].kind == OpKind::Wait && ahead.instrs[i].handle == handle_b) wait_b = static_cast<int>(i);
  CHECK(wait_b > find(ahead, OpKind::Compute, F, "h.0.fc"));
  CHECK(wait_b < find(ahead, OpKind::Compute, F, "h.1.fc"));
  // A budget of two blocks moves c's gather two blocks ahead.
  for (auto& r : in.prefetch) r.budget = 80;
  ir::Program budget = run(t, {2, 2, 2, 2}, in);
  CHECK(find(budget, OpKind::AllGather, F, "c") < find(budget, OpKind::Compute, F, "h.0.fc"));
}

TEST_CASE("every rank lowers to the same collectives") {
  ir::Program a = run(small_trace(), {8, 4, 4, 8});
  ir::Program b = run(small_trace(), {8, 4, 4, 8});
  CHECK(ir::compare_collectives(a, b) == "");
  CHECK(a == b);
  CHECK(ir::compare_collectives(a, run(small_trace(), {8, 2, 2, 2})) != "");
}

namespace {
// A deliberately broken pass: moves the first release in front of the compute that precedes it.
bool release_too_early(ir::Program& p, const passes::PassInputs&) {
  for (size_t i = 1; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Release) {
      std::swap(p.instrs[i], p.instrs[i - 1]);
      return true;
    }
  return false;
}
bool drop_a_wait(ir::Program& p, const passes::PassInputs&) {
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].phase == ir::Phase::Backward) {
      p.instrs.erase(p.instrs.begin() + i);
      return true;
    }
  return false;
}
// Moves instruction `from` to the start of the backward phase.
void move_to_backward_start(ir::Program& p, size_t from) {
  size_t first_backward = 0;
  while (p.instrs[first_backward].phase != ir::Phase::Backward) ++first_backward;
  ir::Instr moved = p.instrs[from];
  p.instrs.erase(p.instrs.begin() + static_cast<long>(from));
  p.instrs.insert(p.instrs.begin() + static_cast<long>(first_backward), moved);
}
// Moves the first reduce-scatter before its gradient exists.
bool reduce_too_early(ir::Program& p, const passes::PassInputs&) {
  move_to_backward_start(p, static_cast<size_t>(find(p, OpKind::ReduceScatter, ir::Phase::Backward, "")));
  return true;
}
// Moves the gradient-norm all-reduce before the reductions.
bool norm_too_early(ir::Program& p, const passes::PassInputs&) {
  move_to_backward_start(p, static_cast<size_t>(find(p, OpKind::GradNorm, ir::Phase::Step, "")));
  return true;
}

// ZeRO-3 on small_trace() through the pipeline with `pass` inserted at `position` (default: last).
ir::Program run_with_pass(const char* name, passes::Pass pass, size_t position = static_cast<size_t>(-1)) {
  auto list = pipeline_passes();
  list.insert(list.begin() + static_cast<long>(std::min(position, list.size())), {name, pass});
  return run_passes(ir::lower(small_trace(), {2, 2, 2, 2}), {}, list, nullptr, {});
}
}  // namespace

TEST_CASE("the verifier catches a reduction before its gradient is complete, and a norm before the reductions") {
  CHECK_THROWS_WITH_AS(run_with_pass("reduce_too_early", reduce_too_early), doctest::Contains("before its last backward use"),
                       InternalError);
  CHECK_THROWS_WITH_AS(run_with_pass("norm_too_early", norm_too_early),
                       doctest::Contains("measures the gradient norm before the gradient of"), InternalError);
}

TEST_CASE("the verifier catches a broken pass and names it") {
  CHECK_THROWS_WITH_AS(run_with_pass("release_too_early", release_too_early),
                       doctest::Contains("IR verifier, after pass 'release_too_early': instruction"), InternalError);
  CHECK_THROWS_WITH_AS(run_with_pass("drop_a_wait", drop_a_wait, 1), doctest::Contains("after pass 'drop_a_wait'"), InternalError);
}

TEST_CASE("a memory limit on gathered parameters is enforced") {
  ir::Program p = ir::lower(small_trace(), {2, 2, 2, 2});
  p.memory_limit = 4000;  // wte alone is 4000 bytes; wte + w1 is over
  CHECK_THROWS_WITH_AS(run_passes(p, {}, pipeline_passes(), nullptr, {}), doctest::Contains("over the limit of 4000"),
                       InternalError);
}

TEST_CASE("the pipeline logs each pass, and prints the IR when it changed") {
  std::ostringstream log;
  PipelineDebug debug{2, true, &log};
  std::vector<PassRecord> records;
  run_passes(ir::lower(small_trace(), {2, 2, 2, 2}), {}, pipeline_passes(), &records, debug);
  REQUIRE(records.size() == pipeline_passes().size());
  CHECK(records[0].changed);
  CHECK(!records[2].changed);  // s_os = s_p: no broadcast
  CHECK(log.str().find("[loom] pass insert_gather_release: changed") != std::string::npos);
  CHECK(log.str().find("all_gather") != std::string::npos);
  CHECK(log.str().find(" ms") != std::string::npos);
}

TEST_CASE("bucket merges a module's gathers into the first and its reductions into the last, one wait each") {
  ir::OpTrace t = two_blocks();
  passes::PassInputs in;
  in.reductions_in_flight = 0;  // each wait where the bucket pass puts it (window_reductions has its own test)
  ir::Program plain = run(t, {2, 2, 2, 2}, in);
  in.buckets = {"h.0"};
  ir::Program bucketed = run(t, {2, 2, 2, 2}, in);
  auto F = ir::Phase::Forward, B = ir::Phase::Backward;
  CHECK(count(plain, OpKind::AllGather) - count(bucketed, OpKind::AllGather) == 2);  // forward and backward
  CHECK(count(plain, OpKind::ReduceScatter) - count(bucketed, OpKind::ReduceScatter) == 1);
  CHECK(count(plain, OpKind::Wait) - count(bucketed, OpKind::Wait) == 3);
  // Forward: one gather of both, where fc's was, waited before fc computes.
  const ir::Instr& g = bucketed.instrs[find(bucketed, OpKind::AllGather, F, "h.0.fc.w")];
  CHECK(g.params.size() == 2);
  CHECK(g.bytes == 80);
  CHECK(find(bucketed, OpKind::AllGather, F, "h.0.proj.w") == -1);
  // Backward runs proj then fc: the one reduce-scatter comes after fc, the last to complete.
  int rs = find(bucketed, OpKind::ReduceScatter, B, "h.0.proj.w");
  REQUIRE(rs >= 0);
  CHECK(bucketed.instrs[rs].params.size() == 2);
  CHECK(rs > find(bucketed, OpKind::Compute, B, "h.0.fc"));
  CHECK(bucketed.instrs[rs + 1].kind == OpKind::Wait);
  CHECK(bucketed.instrs[rs + 1].handle == bucketed.instrs[rs].handle);
  // h.1 is not in the bucket.
  CHECK(bucketed.instrs[find(bucketed, OpKind::AllGather, F, "h.1.fc.w")].params.size() == 1);
  CHECK(ir::verify_complete(bucketed) == "");
  // Under plain data parallelism the three small gradients share one DDP bucket; bucket()
  // gives h.0 a bucket of its own, so h.1's is another.
  CHECK(count(run(t, {2, 1, 1, 1}), OpKind::AllReduce) == 1);
  ir::Program dp = run(t, {2, 1, 1, 1}, in);
  REQUIRE(count(dp, OpKind::AllReduce) == 2);
  CHECK(dp.instrs[find(dp, OpKind::AllReduce, B, "h.1.fc.w")].params.size() == 1);
  CHECK(dp.instrs[find(dp, OpKind::AllReduce, B, "h.0.proj.w")].params.size() == 2);
}

TEST_CASE("DDP buckets: gradients in completion order fill buckets up to the size; bucket() groups stand alone") {
  CHECK(plan_gradient_buckets({40, 40, 40}, {}, 100) == std::vector<std::vector<size_t>>{{0, 1}, {2}});
  CHECK(plan_gradient_buckets({400, 40}, {}, 100) == std::vector<std::vector<size_t>>{{0}, {1}});  // a large one alone
  CHECK(plan_gradient_buckets({40, 40, 40, 40}, {-1, 7, -1, 7}, 100) == std::vector<std::vector<size_t>>{{0}, {1, 3}, {2}});
  // In the IR: each bucket's all-reduce where its last gradient completes, one wait each, before the step.
  passes::PassInputs in;
  in.data_parallel_bucket_bytes = 80;  // two of two_blocks()' 40-byte gradients
  ir::Program p = run(two_blocks(), {2, 1, 1, 1}, in);
  auto B = ir::Phase::Backward;
  REQUIRE(count(p, OpKind::AllReduce) == 2);
  int first = find(p, OpKind::AllReduce, B, "h.1.fc.w");  // backward completes h.1 first
  REQUIRE(first >= 0);
  CHECK(p.instrs[first].params.size() == 2);
  CHECK(p.params[p.instrs[first].params[1]].name == "h.0.proj.w");
  CHECK(first > find(p, OpKind::Compute, B, "h.0.proj"));
  CHECK(first < find(p, OpKind::Compute, B, "h.0.fc"));
  CHECK(count(p, OpKind::Wait) == 2 + 1 + 1);  // the buckets', the gradient norm's and the loss's
  CHECK(ir::verify_complete(p) == "");
  // A bucket() module of one parameter is a bucket of its own too.
  in.buckets = {"h.1"};
  ir::Program own = run(two_blocks(), {2, 1, 1, 1}, in);
  REQUIRE(count(own, OpKind::AllReduce) == 2);
  CHECK(own.instrs[find(own, OpKind::AllReduce, B, "h.1.fc.w")].params.size() == 1);
  CHECK(own.instrs[find(own, OpKind::AllReduce, B, "h.0.proj.w")].params.size() == 2);
}

namespace {
// The bytes each wait of `p` unpacks, keyed by the first parameter of the collective it waits for.
std::map<std::string, int64_t> unpacked_by_param(const ir::Program& p, ir::Phase phase) {
  std::map<int, std::string> param_of;
  std::map<std::string, int64_t> out;
  for (const ir::Instr& in : p.instrs) {
    if (in.kind != OpKind::Wait && in.handle >= 0 && !in.params.empty()) param_of[in.handle] = p.params[in.params[0]].name;
    if (in.kind == OpKind::Wait && in.phase == phase && param_of.count(in.handle)) out[param_of[in.handle]] += in.unpack_bytes;
  }
  return out;
}
}  // namespace

TEST_CASE("mark_unpacks: a wait copies out a bucket's or a padded parameter's gather, and data parallelism's averaged gradients") {
  auto F = ir::Phase::Forward, B = ir::Phase::Backward;
  // ZeRO-3 with every parameter gathered alone into its own storage (40 bytes: 10 elements, 5 a rank): nothing.
  ir::Program plain = run(two_blocks(), {2, 2, 2, 2});
  for (const ir::Instr& in : plain.instrs) CHECK(in.unpack_bytes == 0);
  // bucket("h.0"): its gathers' waits copy both 40-byte members out, in forward and in backward.
  passes::PassInputs in;
  in.buckets = {"h.0"};
  ir::Program bucketed = run(two_blocks(), {2, 2, 2, 2}, in);
  CHECK(unpacked_by_param(bucketed, F).at("h.0.fc.w") == 80);
  CHECK(unpacked_by_param(bucketed, B).at("h.0.proj.w") == 80);  // backward gathers proj first
  CHECK(unpacked_by_param(bucketed, F).at("h.1.fc.w") == 0);
  // A parameter of 11 elements at s_os = 2 is gathered padded to 12, and copied out: 44 bytes.
  ir::OpTrace odd = two_blocks();
  odd.params[0].numel = 11;
  CHECK(unpacked_by_param(run(odd, {2, 2, 2, 2}), F).at(odd.params[0].name) == 44);
  // Data parallelism: each bucket's averaged gradients, at its wait; the norm's and the loss's waits unpack nothing.
  ir::Program dp = run(two_blocks(), {2, 1, 1, 1});
  int64_t unpacked = 0;
  for (const ir::Instr& in : dp.instrs) unpacked += in.unpack_bytes;
  CHECK(unpacked == 3 * 40);
  CHECK(dp.to_text().find("unpacks 120 B") != std::string::npos);
  CHECK(dp.to_json().find("\"unpack_bytes\": 120") != std::string::npos);
  // ZeRO-1 (the sharded executor, s_os > 1): each all-reduce's wait keeps a copy of the
  // gradient's optimizer slice, half of its 40 bytes.
  int64_t sliced = 0;
  for (const ir::Instr& in : run(two_blocks(), {2, 1, 1, 2}).instrs) sliced += in.unpack_bytes;
  CHECK(sliced == 3 * 20);
  // ZeRO-3 at world 4 in pairs with bucket("h.0"): the bucket's sum over the two replicas is
  // copied back into both members' 20-byte shards, which are the optimizer slices (s_os = s_p).
  ir::Program replicas = run(two_blocks(), {4, 2, 2, 2}, in);
  CHECK(unpacked_by_param(replicas, B).at("h.0.proj.w") == 80 + 40);  // the gather's copy-out, the sum's copy-back
  // Only a wait unpacks.
  dp.instrs[0].unpack_bytes = 8;
  CHECK(ir::verify(dp).find("unpacks 8 bytes: only a wait unpacks, and never a negative number") != std::string::npos);
}

TEST_CASE("the step's tail: the gradient norm (an all-reduce where optimizer states are sharded), the loss all-reduce") {
  auto tail = [](const ir::Program& p) {
    std::vector<std::string> ops;
    for (auto& in : p.instrs)
      if (in.phase == ir::Phase::Step && in.kind != OpKind::Wait && in.kind != OpKind::Broadcast) ops.push_back(ir::op_name(in.kind));
    return ops;
  };
  CHECK(tail(run(two_blocks(), {1, 1, 1, 1})) == std::vector<std::string>{"grad_norm", "optimizer_step"});
  ir::Program ddp = run(two_blocks(), {2, 1, 1, 1});
  CHECK(tail(ddp) == std::vector<std::string>{"grad_norm", "optimizer_step", "loss_reduce"});
  // Every rank holds every gradient: the norm is measured alone, no collective is issued.
  const ir::Instr& local = ddp.instrs[find(ddp, OpKind::GradNorm, ir::Phase::Step, "")];
  CHECK(local.group.size == 1);
  CHECK(ir::issued_collective(local) == nullptr);
  ir::Program zero3 = run(two_blocks(), {2, 2, 2, 2});
  CHECK(tail(zero3) == std::vector<std::string>{"grad_norm", "optimizer_step", "loss_reduce"});
  const ir::Instr& norm = zero3.instrs[find(zero3, OpKind::GradNorm, ir::Phase::Step, "")];
  CHECK(norm.group.role == ir::Role::OptimBlock);
  CHECK(std::string(ir::collective_op(norm.kind)) == "all_reduce");
  // Without clipping or metrics the norm is not measured.
  ir::Program unclipped = run_passes(ir::lower(two_blocks(), {2, 2, 2, 2}, false), {}, pipeline_passes(), nullptr, {});
  CHECK(count(unclipped, OpKind::GradNorm) == 0);
  CHECK(ir::verify_complete(zero3) == "");
}

TEST_CASE("unshard keeps a module's parameters gathered from the forward gather to the last backward use") {
  ir::OpTrace t = two_blocks();
  passes::PassInputs in;
  in.unshard = {{"h.0.proj"}};
  ir::Program plain = run(t, {2, 2, 2, 2});
  ir::Program kept = run(t, {2, 2, 2, 2}, in);
  auto F = ir::Phase::Forward, B = ir::Phase::Backward;
  // No forward release, no backward gather; released after its backward compute.
  CHECK(find(plain, OpKind::Release, F, "h.0.proj.w") >= 0);
  CHECK(find(kept, OpKind::Release, F, "h.0.proj.w") == -1);
  CHECK(find(kept, OpKind::AllGather, B, "h.0.proj.w") == -1);
  int release = find(kept, OpKind::Release, B, "h.0.proj.w");
  CHECK(release > find(kept, OpKind::Compute, B, "h.0.proj"));
  CHECK(release < find(kept, OpKind::Compute, B, "h.0.fc"));
  CHECK(count(plain, OpKind::AllGather) - count(kept, OpKind::AllGather) == 1);
  CHECK(count(plain, OpKind::Wait) - count(kept, OpKind::Wait) == 1);
  CHECK(ir::verify_complete(kept) == "");
  // The others are gathered again for backward.
  CHECK(find(kept, OpKind::AllGather, B, "h.0.fc.w") >= 0);
}

TEST_CASE("unshard under accumulation keeps the parameters gathered across micro-batches: gathered in the first, released in the last") {
  auto F = ir::Phase::Forward, B = ir::Phase::Backward;
  auto wait_of = [](const ir::Program& p, int gather) {
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].handle == p.instrs[gather].handle) return static_cast<int>(i);
    return -1;
  };
  // unshard(true): the parameter's own gather runs once.
  passes::PassInputs outright;
  outright.unshard = {{"h.0.proj"}};
  ir::Program alone = run_passes(ir::lower(two_blocks(), {2, 2, 2, 2}, true, 3), outright, pipeline_passes(), nullptr, {});
  int own = find(alone, OpKind::AllGather, F, "h.0.proj.w");
  REQUIRE(own >= 0);
  CHECK(alone.instrs[own].runs_in == ir::MicroBatches::First);
  CHECK(alone.instrs[wait_of(alone, own)].runs_in == ir::MicroBatches::First);
  CHECK(alone.instrs[find(alone, OpKind::Release, B, "h.0.proj.w")].runs_in == ir::MicroBatches::Last);
  CHECK(ir::verify_complete(alone) == "");
  // unshard(auto) with room for it, after bucket() made h.0's two parameters one gather: the kept
  // one is split out of it, with a handle and a wait of its own before the bucket's.
  passes::PassInputs in;
  in.unshard = {{"h.0.proj", true}};
  in.buckets = {"h.0"};
  in.memory.limit = int64_t(1) << 40;
  passes::PassInputs bucket_only;
  bucket_only.buckets = in.buckets;
  ir::Program bucketed = run_passes(ir::lower(two_blocks(), {2, 2, 2, 2}, true, 3), bucket_only, pipeline_passes(), nullptr, {});
  ir::Program p = run_passes(ir::lower(two_blocks(), {2, 2, 2, 2}, true, 3), in, pipeline_passes(), nullptr, {});
  int gather = find(p, OpKind::AllGather, F, "h.0.proj.w");
  REQUIRE(gather >= 0);
  CHECK(p.instrs[gather].params.size() == 1);
  CHECK(p.instrs[gather].runs_in == ir::MicroBatches::First);
  CHECK(p.instrs[gather].bytes == ir::param_bytes(p, p.instrs[gather].params[0]));
  CHECK(ir::times_per_step(p, p.instrs[gather]) == 1);
  int partner = find(p, OpKind::AllGather, F, "h.0.fc.w");
  REQUIRE(partner >= 0);
  CHECK(p.instrs[partner].params.size() == 1);  // the bucket's other member, still gathered in every micro-batch
  CHECK(p.instrs[partner].runs_in == ir::MicroBatches::All);
  CHECK(p.instrs[partner].bytes == ir::param_bytes(p, p.instrs[partner].params[0]));
  CHECK(p.instrs[gather].handle != p.instrs[partner].handle);
  int wait = wait_of(p, gather);
  REQUIRE(wait > gather);
  CHECK(p.instrs[wait].runs_in == ir::MicroBatches::First);
  CHECK(wait + 1 == wait_of(p, partner));  // just before the bucket's own wait
  CHECK(wait < find(p, OpKind::Compute, F, "h.0.proj"));
  // Without the unsharding the bucket is one gather of both.
  int both = find(bucketed, OpKind::AllGather, F, "h.0.fc.w");
  REQUIRE(both >= 0);
  CHECK(bucketed.instrs[both].params.size() == 2);
  int release = find(p, OpKind::Release, B, "h.0.proj.w");
  REQUIRE(release >= 0);
  CHECK(p.instrs[release].runs_in == ir::MicroBatches::Last);
  CHECK(find(p, OpKind::Release, F, "h.0.proj.w") == -1);
  CHECK(ir::verify_complete(p) == "");
  // The verifier follows each micro-batch: released in every one, the kept parameter is not
  // gathered when the next micro-batch uses it; gathered in every one, it is gathered twice.
  ir::Program every = p;
  every.instrs[release].runs_in = ir::MicroBatches::All;
  CHECK(ir::verify_complete(every) ==
        "instruction " + std::to_string(find(p, OpKind::Compute, F, "h.0.proj")) +
            " (fwd compute h.0.proj): uses h.0.proj.w while it is not gathered in micro-batch 2 of 3");
  ir::Program again = p;
  again.instrs[gather].runs_in = again.instrs[wait].runs_in = ir::MicroBatches::All;
  CHECK(ir::verify_complete(again) ==
        "instruction " + std::to_string(gather) + " (fwd all_gather): gathers h.0.proj.w, which is already gathered in micro-batch 2 of 3");
}

TEST_CASE("compress turns a compressed parameter's reduce-scatter into TAGC's, priced at sketch plus index") {
  passes::PassInputs in;
  in.compress = {{"h.0.fc", 10}};
  in.reductions_in_flight = 0;  // the bound right after its compress, as the pass puts it
  ir::Program p = run(two_blocks(), {2, 2, 2, 2}, in);
  auto B = ir::Phase::Backward;
  int c = find(p, OpKind::Compress, B, "h.0.fc.w");
  REQUIRE(c >= 0);
  CHECK(p.instrs[c].bytes == 40 / 10);  // the sketch: 10 fp32 values / 10
  CHECK(p.instrs[c - 2].kind == OpKind::CompressIndex);  // 10 index bits in 2 bytes, OR-reduced first
  CHECK(p.instrs[c - 2].bytes == 2);
  CHECK(p.instrs[c + 1].kind == OpKind::Wait);
  CHECK(p.instrs[c + 2].kind == OpKind::CompressBound);  // then the bound, agreed over the group
  CHECK(std::string(ir::collective_op(p.instrs[c + 2].kind)) == "all_reduce");
  CHECK(find(p, OpKind::ReduceScatter, B, "h.0.fc.w") == -1);
  CHECK(find(p, OpKind::ReduceScatter, B, "h.0.proj.w") >= 0);
  CHECK(ir::verify_complete(p) == "");
  // Without sharded parameters there is no reduce-scatter to replace.
  CHECK(count(run(two_blocks(), {2, 1, 1, 2}, in), OpKind::Compress) == 0);
}

TEST_CASE("bucket leaves a compress()ed parameter's reductions out, its gathers in: its replica sum stays TAGC's own") {
  passes::PassInputs in;
  in.compress = {{"h.0.fc", 10}};
  in.buckets = {"h.0"};
  in.reductions_in_flight = 0;
  ir::OpTrace t = two_blocks();  // h.0 with a third parameter: two reduced as one bucket beside the compressed one
  t.params.insert(t.params.begin() + 2, {"h.0.out.w", 10, 4});
  t.forward.insert(t.forward.begin() + 2, {"h.0.out", {"h.0.out.w"}});
  ir::Program p = run(t, {4, 2, 2, 2}, in);  // each shard on two replicas: its sum over them follows its reduction
  auto B = ir::Phase::Backward;
  CHECK(p.instrs[find(p, OpKind::AllGather, ir::Phase::Forward, "h.0.fc.w")].params.size() == 3);  // gathered as one
  std::vector<std::vector<std::string>> reduced, summed;  // the members of each reduce-scatter and replica sum
  for (const ir::Instr& i : p.instrs) {
    bool replica_sum = i.kind == OpKind::AllReduce && i.group.role == ir::Role::Replicas;
    if (i.phase != B || i.params.empty() || !(replica_sum || i.kind == OpKind::ReduceScatter)) continue;
    std::vector<std::string> names;
    for (int q : i.params) names.push_back(p.params[static_cast<size_t>(q)].name);
    std::sort(names.begin(), names.end());
    (replica_sum ? summed : reduced).push_back(names);
  }
  // proj and out reduced as one bucket and summed as one; fc compressed, then summed alone; h.1 alone.
  using Names = std::vector<std::vector<std::string>>;
  std::sort(reduced.begin(), reduced.end());
  std::sort(summed.begin(), summed.end());
  CHECK((reduced == Names{{"h.0.out.w", "h.0.proj.w"}, {"h.1.fc.w"}}));
  CHECK((summed == Names{{"h.0.fc.w"}, {"h.0.out.w", "h.0.proj.w"}, {"h.1.fc.w"}}));
  CHECK(find(p, OpKind::Compress, B, "h.0.fc.w") >= 0);
  CHECK(ir::verify_complete(p) == "");
}

namespace {
// Broken offloading: the updated values copied back before the step, or never.
bool reload_before_step(ir::Program& p, const passes::PassInputs&) {
  size_t reload = static_cast<size_t>(find(p, OpKind::Reload, ir::Phase::Step, ""));
  std::swap(p.instrs[reload], p.instrs[reload - 1]);
  return true;
}
bool drop_reload(ir::Program& p, const passes::PassInputs&) {
  p.instrs.erase(p.instrs.begin() + find(p, OpKind::Reload, ir::Phase::Step, ""));
  return true;
}
ir::Program offloaded(int64_t budget, PassList extra = {}) {
  passes::PassInputs in;
  in.offload = true;
  in.offload_budget = budget;
  auto list = pipeline_passes();
  list.insert(list.end(), extra.begin(), extra.end());
  return run_passes(ir::lower(small_trace(), {2, 2, 2, 2}), in, list, nullptr, {});
}
}  // namespace

TEST_CASE("offload: the parameters past the budget go to the host around the optimizer step, and come back") {
  ir::Program all = offloaded(0);
  int to_host = find(all, OpKind::Offload, ir::Phase::Step, "");
  REQUIRE(to_host >= 0);
  CHECK(all.instrs[to_host + 1].kind == OpKind::OptimizerStep);
  CHECK(all.instrs[to_host + 2].kind == OpKind::Reload);
  CHECK(all.instrs[to_host].params.size() == all.params.size());
  // A budget holding the first parameter's slice states keeps it on the device.
  int64_t first_slice = (all.params[0].numel + 1) / 2;
  ir::Program some = offloaded(8 * first_slice);
  CHECK(some.instrs[find(some, OpKind::Offload, ir::Phase::Step, "")].params.size() == all.params.size() - 1);
  // A budget holding every state offloads nothing.
  CHECK(find(offloaded(int64_t(1) << 40), OpKind::Offload, ir::Phase::Step, "") < 0);
  CHECK_THROWS_WITH_AS(offloaded(0, {{"reload_before_step", reload_before_step}}),
                       doctest::Contains("copies values to the device before the optimizer step"), InternalError);
  CHECK_THROWS_WITH_AS(offloaded(0, {{"drop_reload", drop_reload}}), doctest::Contains("never come back to the device"),
                       InternalError);
}

TEST_CASE("micro-batches: gradients cross replicas in the last one; with s_g > s_p the peers select & drop in the others") {
  // ZeRO-2 at dp 2 (s_p = 1, s_g = s_os = 2), three micro-batches a step.
  ir::Program p = run_passes(ir::lower(small_trace(), {2, 1, 2, 2}, true, 3), {}, pipeline_passes(), nullptr, {});
  CHECK(p.micro_batches == 3);
  int peers = 0, replicas = 0, drops_before_last = 0;
  for (const ir::Instr& in : p.instrs) {
    if (in.kind == OpKind::AllReduce && in.group.role == ir::Role::Grads) {
      ++peers;
      CHECK(in.runs_in == ir::MicroBatches::AllButLast);
      CHECK(ir::times_per_step(p, in) == 2);
    }
    if (in.kind == OpKind::AllReduce && in.group.role == ir::Role::Replicas) {
      ++replicas;
      CHECK(in.runs_in == ir::MicroBatches::Last);
      CHECK(ir::times_per_step(p, in) == 1);
    }
    if (in.kind == OpKind::SelectDrop && in.runs_in == ir::MicroBatches::AllButLast) ++drops_before_last;
    if (in.kind == OpKind::Compute) CHECK(ir::times_per_step(p, in) == 3);
    if (in.phase == ir::Phase::Step) CHECK(ir::times_per_step(p, in) == 1);
  }
  CHECK(peers == static_cast<int>(p.params.size()));
  CHECK(replicas == static_cast<int>(p.params.size()));
  CHECK(drops_before_last == static_cast<int>(p.params.size()));
  // One micro-batch: nothing runs in "all but the last".
  ir::Program one = run_passes(ir::lower(small_trace(), {2, 1, 2, 2}), {}, pipeline_passes(), nullptr, {});
  for (const ir::Instr& in : one.instrs) CHECK(in.runs_in != ir::MicroBatches::AllButLast);
}

namespace {
// Broken: waits for a last-micro-batch reduction in every micro-batch.
bool wait_every_micro_batch(ir::Program& p, const passes::PassInputs&) {
  for (ir::Instr& in : p.instrs)
    if (in.kind == OpKind::Wait && in.runs_in == ir::MicroBatches::Last) {
      in.runs_in = ir::MicroBatches::All;
      return true;
    }
  return false;
}
}  // namespace

TEST_CASE("the verifier catches a wait in other micro-batches than its collective") {
  auto list = pipeline_passes();
  list.push_back({"wait_every_micro_batch", wait_every_micro_batch});
  CHECK_THROWS_WITH_AS(run_passes(ir::lower(small_trace(), {2, 1, 1, 1}, true, 2), {}, list, nullptr, {}),
                       doctest::Contains("in other micro-batches than it runs in"), InternalError);
}

namespace {
// blk0 checkpointed, under ZeRO-3 at dp 2, through the pipeline plus `extra`.
ir::Program checkpointed_blk0(PassList extra = {}) {
  ir::OpTrace t = small_trace();
  t.forward[1].flops = 100, t.forward[1].activation_bytes = 400;
  t.forward[2].flops = 50, t.forward[2].activation_bytes = 200;
  ir::Program initial = ir::lower(t, {2, 2, 2, 2});
  lowering::insert_recomputation({"blk0", "blk0.fc"}, initial);
  auto list = pipeline_passes();
  list.insert(list.end(), extra.begin(), extra.end());
  return run_passes(initial, {}, list, nullptr, {});
}
// Broken: the recompute moved before the gathers of what it uses.
bool recompute_before_gathers(ir::Program& p, const passes::PassInputs&) {
  size_t at = static_cast<size_t>(find(p, OpKind::Recompute, ir::Phase::Backward, ""));
  move_to_backward_start(p, at);
  return true;
}
}  // namespace

TEST_CASE("checkpoint(): a recompute of the module before its ops' backward, after the gathers of what it uses") {
  ir::Program p = checkpointed_blk0();
  int recompute = find(p, OpKind::Recompute, ir::Phase::Backward, "");
  REQUIRE(recompute >= 0);
  const ir::Instr& r = p.instrs[recompute];
  CHECK(r.module == "blk0");  // blk0.fc is recomputed with it: one recompute
  CHECK(std::count_if(p.instrs.begin(), p.instrs.end(), [](const ir::Instr& in) { return in.kind == OpKind::Recompute; }) == 1);
  CHECK(r.params == std::vector<int>{1, 2});
  CHECK(r.flops == 150);
  CHECK(r.activation_bytes == 600);
  // Forward saves nothing for blk0's ops; their backward comes after the recompute.
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "blk0.fc")].activation_bytes == 0);
  CHECK(find(p, OpKind::Compute, ir::Phase::Backward, "blk0.proj") > recompute);
  CHECK(find(p, OpKind::Compute, ir::Phase::Backward, "blk0.fc") > recompute);
  // w2 is used by blk0.proj only: its backward gather (and wait) precede the recompute.
  int gather_w2 = find(p, OpKind::AllGather, ir::Phase::Backward, "w2");
  CHECK(gather_w2 >= 0);
  CHECK(gather_w2 < recompute);
  CHECK_THROWS_WITH_AS(checkpointed_blk0({{"recompute_before_gathers", recompute_before_gathers}}),
                       doctest::Contains("while it is not gathered"), InternalError);
}

namespace {
// emb -> l.0 -> l.1 -> head, the list "l" split into two stages of one entry each.
ir::OpTrace pipe_trace() {
  ir::OpTrace t;
  t.model = "pipe";
  t.params = {{"emb.w", 100, 4}, {"l.0.w", 10, 4}, {"l.1.w", 10, 4}, {"head.w", 20, 4}};
  t.forward = {{"emb", {"emb.w"}}, {"l.0", {"l.0.w"}}, {"l.1", {"l.1.w"}}, {"head", {"head.w"}}};
  for (auto& op : t.forward) op.input_bytes = op.output_bytes = 40, op.flops = 100;
  t.forward[3].output_bytes = 80;
  return t;
}
ir::Program pipe_stage(int stage) {
  RuntimePlan plan;
  plan.pp = 2;
  plan.stages = PipelineStages{"l", {0, 1, 2}};
  ir::Program p = ir::lower(pipe_trace(), {1, 1, 1, 1}, true, 1, {1, 2, stage, 0});
  lowering::lower_pipeline_stage(plan, pipe_trace(), p);
  return run_passes(p, {}, pipeline_passes(), nullptr, {});
}
std::vector<std::string> sequence(const ir::Program& p) {
  std::vector<std::string> out;
  for (const ir::Instr& in : p.instrs)
    if (in.kind != OpKind::Wait) out.push_back(std::string(ir::phase_name(in.phase)) + " " + ir::op_name(in.kind) + " " + in.module);
  return out;
}
}  // namespace

TEST_CASE("a pipeline stage's program: its ops, the activation in and out and its gradient back, the shared gradients summed") {
  ir::Program first = pipe_stage(0), last = pipe_stage(1);
  CHECK(sequence(first) == std::vector<std::string>{"fwd compute emb", "fwd compute l.0", "fwd send l.0", "bwd recv l.0", "bwd compute l.0",
                                                    "bwd compute emb", "step all_reduce ", "step grad_norm ", "step optimizer_step ",
                                                    "step loss_reduce "});
  // The last stage runs the embedding forward (its output is replaced by what arrives), not backward.
  CHECK(sequence(last) == std::vector<std::string>{"fwd compute emb", "fwd recv l.1", "fwd compute l.1", "fwd compute head",
                                                   "bwd compute head", "bwd compute l.1", "bwd send l.1", "step all_reduce ",
                                                   "step grad_norm ", "step optimizer_step ", "step loss_reduce "});
  // A stage's parameters are those it holds (l.1's is the last stage's business), renumbered.
  auto names = [](const ir::Program& p) {
    std::vector<std::string> out;
    for (const auto& param : p.params) out.push_back(param.name);
    return out;
  };
  CHECK(names(first) == std::vector<std::string>{"emb.w", "l.0.w", "head.w"});
  CHECK(names(last) == std::vector<std::string>{"emb.w", "l.1.w", "head.w"});
  for (const ir::Instr& in : first.instrs) {
    if (in.kind == OpKind::Send || in.kind == OpKind::Recv) CHECK(in.bytes == 40);  // l.0's output, and its gradient
    if (in.kind == OpKind::AllReduce) {
      CHECK(in.group.role == ir::Role::Pipeline);
      CHECK(in.bytes == (100 + 20) * 4);  // the parameters outside the list
    }
    if (in.kind == OpKind::OptimizerStep) CHECK(in.params == std::vector<int>{0, 1, 2});  // every one it holds
    if (in.kind == OpKind::GradNorm) CHECK(in.group.size == 2);  // the model's tp x pp ranks
    if (in.kind == OpKind::LossReduce) CHECK(in.group.size == 2);  // the world
  }
}

TEST_CASE("a tensor-parallel rank's program: its slices, and each sync's collective after its module") {
  RuntimePlan plan;
  plan.tp = 2;
  plan.shards = {{"l.0", {"w"}, 0}};
  plan.syncs = {{"l.0", "fwd_post", "all_reduce"}, {"l.1", "bwd_post", "all_reduce"}, {"head", "fwd_post", "all_gather"}};
  ir::Program p = ir::lower(pipe_trace(), {1, 1, 1, 1}, true, 1, {2, 1, 0, 1});
  lowering::lower_tensor_parallel(plan, pipe_trace(), p);
  p = run_passes(p, {}, pipeline_passes(), nullptr, {});
  CHECK(p.params[1].numel == 5);
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "l.0")].flops == 50);  // its slice's share
  auto after = [&](OpKind kind, ir::Phase phase, const std::string& module) {
    int c = find(p, OpKind::Compute, phase, module);
    REQUIRE(c >= 0);
    const ir::Instr& sync = p.instrs[c + 1];
    CHECK(sync.kind == kind);
    CHECK(sync.group.role == ir::Role::Tp);
    CHECK(sync.module == module);
    return sync.bytes;
  };
  CHECK(after(OpKind::TpAllReduce, ir::Phase::Forward, "l.0") == 40);   // the output, summed
  CHECK(after(OpKind::TpAllReduce, ir::Phase::Backward, "l.1") == 40);  // the input's gradient, summed
  CHECK(after(OpKind::TpAllGather, ir::Phase::Forward, "head") == 80);  // the whole output
  CHECK(std::string(ir::issued_collective(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "head") + 1])) == "all_gather");
}

TEST_CASE("a tensor-parallel layer saves its slice: a column split its whole input and a slice of the rest, a row split a slice") {
  ir::OpTrace trace = pipe_trace();
  trace.forward[1].activation_bytes = 40 + 200;  // l.0: its input, and what follows its output (attention scores)
  trace.forward[2].activation_bytes = 40;        // l.1: its input
  RuntimePlan plan;
  plan.tp = 4;
  plan.shards = {{"l.0", {"w"}, 0}, {"l.1", {"w"}, 1}};
  ir::Program p = ir::lower(trace, {1, 1, 1, 1}, true, 1, {4, 1, 0, 1});
  lowering::lower_tensor_parallel(plan, trace, p);
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "l.0")].activation_bytes == 40 + 200 / 4);
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Backward, "l.0")].activation_bytes == 40 + 200 / 4);  // what backward frees
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "l.1")].activation_bytes == 40 / 4);
  CHECK(p.instrs[find(p, OpKind::Compute, ir::Phase::Forward, "l.1")].flops == 25);
}

TEST_CASE("checkpoint() under a mesh: a stage recomputes only its own entry; a recomputation replays its forward's tp collectives") {
  RuntimePlan plan;
  plan.pp = 2;
  plan.stages = PipelineStages{"l", {0, 1, 2}};
  for (int stage : {0, 1}) {
    ir::Program p = ir::lower(pipe_trace(), {1, 1, 1, 1}, true, 1, {1, 2, stage, 0});
    lowering::lower_pipeline_stage(plan, pipe_trace(), p);
    lowering::insert_recomputation({"l.0", "l.1"}, p);
    p = run_passes(p, {}, pipeline_passes(), nullptr, {});
    int recompute = find(p, OpKind::Recompute, ir::Phase::Backward, "");
    REQUIRE(recompute >= 0);
    CHECK(count(p, OpKind::Recompute) == 1);
    CHECK(p.instrs[recompute].module == (stage == 0 ? "l.0" : "l.1"));
    CHECK(recompute < find(p, OpKind::Compute, ir::Phase::Backward, stage == 0 ? "l.0" : "l.1"));
    if (stage == 0) CHECK(recompute > find(p, OpKind::Recv, ir::Phase::Backward, ""));  // after the gradient arrives
  }
  RuntimePlan tp;
  tp.tp = 2;
  tp.shards = {{"l.0", {"w"}, 1}};
  tp.syncs = {{"l.0", "fwd_post", "all_reduce"}};
  ir::Program p = ir::lower(pipe_trace(), {1, 1, 1, 1}, true, 1, {2, 1, 0, 0});
  lowering::lower_tensor_parallel(tp, pipe_trace(), p);
  lowering::insert_recomputation({"l.0"}, p);
  p = run_passes(p, {}, pipeline_passes(), nullptr, {});
  int recompute = find(p, OpKind::Recompute, ir::Phase::Backward, "");
  REQUIRE(recompute >= 0);
  CHECK(p.instrs[recompute].flops == 50);  // the slice's share, as the forward's
  const ir::Instr& again = p.instrs[recompute + 1];
  CHECK(again.kind == OpKind::TpAllReduce);
  CHECK(again.module == "l.0");
  CHECK(again.bytes == 40);
  CHECK(count(p, OpKind::TpAllReduce) == 2);  // the forward's, and the recomputation's
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("window_reductions: a completion comes after the run of launches one op's backward completes together") {
  // Each op has a weight and a bias: its backward completes both, and a rank launches both
  // reductions in the op's gradient hooks before it reaches the program's next instruction.
  ir::OpTrace t;
  t.model = "pairs";
  t.params = {{"a.w", 10, 4}, {"a.b", 10, 4}, {"b.w", 10, 4}, {"b.b", 10, 4}, {"c.w", 10, 4}, {"c.b", 10, 4}};
  t.forward = {{"a", {"a.w", "a.b"}}, {"b", {"b.w", "b.b"}}, {"c", {"c.w", "c.b"}}};
  passes::PassInputs in;
  in.reductions_in_flight = 1;
  ir::Program p = run(t, {2, 2, 2, 2}, in);
  auto B = ir::Phase::Backward;
  for (const char* op : {"c", "b", "a"}) {
    CAPTURE(op);
    int weight = find(p, OpKind::ReduceScatter, B, std::string(op) + ".w"), bias = find(p, OpKind::ReduceScatter, B, std::string(op) + ".b");
    REQUIRE(weight > find(p, OpKind::Compute, B, op));
    CHECK(bias == weight + 1);  // nothing between them, the window's waits least of all
  }
  // One in flight: past the window, the weight's reduction completes after its op's run of
  // launches (after the bias's launch), before the next op's backward.
  auto wait_of = [&](int launch) {
    for (size_t i = static_cast<size_t>(launch) + 1; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].handle == p.instrs[static_cast<size_t>(launch)].handle) return static_cast<int>(i);
    return -1;
  };
  for (auto [op, next] : {std::pair<const char*, const char*>{"c", "b"}, {"b", "a"}}) {
    CAPTURE(op);
    int waited = wait_of(find(p, OpKind::ReduceScatter, B, std::string(op) + ".w"));
    CHECK(waited > find(p, OpKind::ReduceScatter, B, std::string(op) + ".b"));
    CHECK(waited < find(p, OpKind::Compute, B, next));
  }
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("window_reductions: each reduce-scatter's wait follows the launch of the reduction `window` later") {
  // ZeRO-3 at dp 2 with accumulation: reduce-scatters, the gradient peers' all-reduces and select & drop.
  for (int window : {1, 2, 3}) {
    CAPTURE(window);
    passes::PassInputs in;
    in.reductions_in_flight = window;
    ir::Program p = run(two_blocks(), {2, 2, 2, 2}, in);
    std::vector<int> launches;  // positions of the backward reduce-scatters, in order
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == OpKind::ReduceScatter) launches.push_back(static_cast<int>(i));
    REQUIRE(launches.size() == 3);
    for (size_t k = 0; k < launches.size(); ++k) {
      int handle = p.instrs[launches[k]].handle, waited = -1;
      for (size_t i = 0; i < p.instrs.size(); ++i)
        if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].handle == handle) waited = static_cast<int>(i);
      REQUIRE(waited > launches[k]);
      if (k + window < launches.size()) {
        CHECK(waited > launches[k + window]);  // completed once `window` more are launched
        if (k + window + 1 < launches.size()) CHECK(waited < launches[k + window + 1]);
      } else {
        CHECK(waited < find(p, OpKind::OptimizerStep, ir::Phase::Step, ""));  // the last ones before the step
      }
    }
    CHECK(ir::verify_complete(p) == "");
  }
}

TEST_CASE("gradient deliveries: one for the uses outside recomputed modules, one per recomputation that uses it") {
  auto deliveries = [](std::vector<std::string> checkpointed) {
    ir::Program p = ir::lower(small_trace(), {1, 1, 1, 1});
    lowering::insert_recomputation(checkpointed, p);
    return ir::gradient_deliveries(p);  // wte, w1, w2
  };
  CHECK(deliveries({}) == std::vector<int>{1, 1, 1});
  // The tied wte: the head's use in the outer backward, the embedding's in its recomputation.
  CHECK(deliveries({"emb"}) == std::vector<int>{2, 1, 1});
  // w1 is used in blk0 (recomputed) and blk1 (not); w2 only inside blk0.
  CHECK(deliveries({"blk0"}) == std::vector<int>{1, 2, 1});
  CHECK(deliveries({"blk0", "blk1"}) == std::vector<int>{1, 2, 1});
  CHECK(deliveries({"blk0", "blk0.fc"}) == std::vector<int>{1, 2, 1});  // only the outer one recomputes
  // A pipeline stage that does not run a module's backward hands its parameters nothing.
  ir::Program stage1 = pipe_stage(1);
  std::vector<int> by_param = ir::gradient_deliveries(stage1);
  for (size_t q = 0; q < stage1.params.size(); ++q)
    CHECK_MESSAGE(by_param[q] == (stage1.params[q].name == "emb.w" ? 0 : 1), stage1.params[q].name);
}

// loom plan's planner shares an initial program among plans of one mesh and recomputation
// (lower_step.h): given their sharding, and sized again for their s_os, it finishes to each one's
// program exactly.
TEST_CASE("an initial program depends on the sharding only through dp and s_os") {
  ir::OpTrace t = two_blocks();
  auto plan_of = [](int s_p, int s_g) {
    RuntimePlan plan;
    plan.factors = {8, s_p, s_g, 8};
    plan.checkpoint = {"h.1"};
    plan.prefetch = {{"h.0", 0}, {"h.1", 0}};
    return plan;
  };
  StepOptions options;
  options.accum = 2;
  ir::Program shared = initial_step_program(plan_of(1, 1), t, options);
  for (auto [s_p, s_g] : std::vector<std::pair<int, int>>{{1, 1}, {1, 8}, {2, 2}, {2, 8}, {4, 4}, {8, 8}}) {
    CAPTURE(s_p);
    CAPTURE(s_g);
    RuntimePlan plan = plan_of(s_p, s_g);
    ir::Program from_shared = shared;
    from_shared.sharding = plan.factors;
    CHECK(finish_step_program(from_shared, plan, options, nullptr, {}) == lower_step(plan, t, nullptr, {}, options));
  }
  // Another s_os differs in the gradient norm's group: shared as it is, the program is wrong;
  // sized again for its s_os (size_by_optimizer_shards), it is the point's own.
  RuntimePlan four = plan_of(4, 4);
  four.factors.optim = 4;
  ir::Program from_shared = shared;
  from_shared.sharding = four.factors;
  CHECK_FALSE(finish_step_program(from_shared, four, options, nullptr, {}) == lower_step(four, t, nullptr, {}, options));
  ir::size_by_optimizer_shards(from_shared);
  CHECK(finish_step_program(from_shared, four, options, nullptr, {}) == lower_step(four, t, nullptr, {}, options));
}

TEST_CASE("a pipeline stage's initial program serves every s_os once sized again for it") {
  // Its shared gradients' sum moves the slices one rank updates, and its norm is summed over the
  // model's ranks times s_os: both follow s_os.
  auto plan_of = [](int s_os) {
    RuntimePlan plan;
    plan.pp = 2;
    plan.stages = PipelineStages{"l", {0, 1, 2}};
    plan.factors = {4, s_os, s_os, s_os};
    return plan;
  };
  StepOptions options;
  for (int stage = 0; stage < 2; ++stage) {
    options.rank = stage_rank(plan_of(1), 8, stage);
    ir::Program shared = initial_step_program(plan_of(1), pipe_trace(), options);
    for (int s_os : {2, 4}) {
      CAPTURE(stage);
      CAPTURE(s_os);
      RuntimePlan plan = plan_of(s_os);
      ir::Program sized = shared;
      sized.sharding = plan.factors;
      ir::Program own = initial_step_program(plan, pipe_trace(), options);
      CHECK_FALSE(sized == own);
      ir::size_by_optimizer_shards(sized);
      CHECK(sized == own);
    }
  }
}

TEST_CASE("two lowerings' records name the first pass that planned otherwise") {
  ir::OpTrace t = two_blocks();
  RuntimePlan plan;
  plan.factors = {8, 8, 8, 8};
  std::vector<PassRecord> plain, again, prefetched;
  lower_step(plan, t, &plain, {}, {});
  lower_step(plan, t, &again, {}, {});
  CHECK(first_differing_pass(plain, again).empty());
  plan.prefetch = {{"h.0", 0}, {"h.1", 0}};
  lower_step(plan, t, &prefetched, {}, {});
  // The passes before prefetch see no prefetch: their programs are the same.
  CHECK(first_differing_pass(plain, prefetched) == "prefetch");
}
