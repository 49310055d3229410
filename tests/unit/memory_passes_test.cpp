// The memory-aware passes (issue #17) on hand-built programs whose right answer is worked out
// by hand: proactive_prefetch (deepcompile.txt Algorithm 1, Fig. 6), selective_unshard (§4.3),
// and the memory walk they plan with.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <algorithm>
#include <cstdlib>

#include "backend/cost/cluster.h"
#include "backend/cost/module_profile_cost.h"
#include "backend/ir/verifier.h"
#include "backend/lower/step_program.h"
#include "backend/passes/pass_pipeline.h"
#include "backend/sim/memory_walk.h"
#include "backend/sim/simulator.h"
#include "backend/sim/step_memory_check.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

using namespace loom;
using ir::OpKind;

namespace {

// Three layers of one 100-element fp32 weight each, at s_p = 2. The model states the step
// starts with, 300 elements at (2, 2, 2), are the parameter shards and optimizer slices: 300 x
// (4/2 + 8/2) = 1,800 bytes (gradient shards are held from their reductions to the optimizer
// step). A gather holds its 400-byte parameter, gathered in place, from its launch to its
// release (comm::all_gather allocates nothing more).
ir::OpTrace three_layers(int64_t activation_bytes = 0) {
  ir::OpTrace t;
  t.model = "three";
  t.params = {{"l0.w", 100, 4}, {"l1.w", 100, 4}, {"l2.w", 100, 4}};
  t.forward = {{"l0", {"l0.w"}}, {"l1", {"l1.w"}}, {"l2", {"l2.w"}}};
  for (ir::TracedOp& op : t.forward) op.activation_bytes = activation_bytes;
  return t;
}
constexpr int64_t kStates = 1800, kFull = 400;
const ir::Sharding kZero3{2, 2, 2, 2};

ir::Program lowered(const ir::OpTrace& t, const passes::PassInputs& in) {
  PipelineDebug each;
  each.verify_each_pass = true;
  return run_passes(ir::lower(t, kZero3), in, pipeline_passes(), nullptr, each);
}

// The program's instructions of `phase`, one word each: "ag(l0.w)", "wait", "c(l0)", "rel(l0.w)".
std::vector<std::string> words(const ir::Program& p, ir::Phase phase) {
  std::vector<std::string> out;
  for (const ir::Instr& in : p.instrs) {
    if (in.phase != phase) continue;
    std::string params;
    for (int q : in.params) params += (params.empty() ? "" : ",") + p.params[static_cast<size_t>(q)].name;
    switch (in.kind) {
      case OpKind::AllGather: out.push_back("ag(" + params + ")"); break;
      case OpKind::Wait: if (phase == ir::Phase::Forward) out.push_back("wait"); break;
      case OpKind::Release: out.push_back("rel(" + params + ")"); break;
      case OpKind::Compute: out.push_back("c(" + in.module + ")"); break;
      default: break;  // backward reductions: not what these tests are about
    }
  }
  return out;
}

// The most the memory walk holds at once over the step.
int64_t walk_peak(const ir::Program& p) { return memory::walk_peak(p, StateBytes::loom_adamw(), nullptr).bytes; }

passes::PassInputs auto_prefetch(int64_t limit) {
  passes::PassInputs in;
  in.prefetch = {{"l0", 0}, {"l1", 0}, {"l2", 0}};
  in.memory.limit = limit;
  return in;
}

}  // namespace

TEST_CASE("the memory walk: model states, gathered buffers from gather to release, activations from forward to backward") {
  ir::Program p = lowered(three_layers(50), {});
  std::vector<int64_t> around = memory::memory_around_each(p, StateBytes::loom_adamw(), nullptr);
  auto at = [&](OpKind kind, ir::Phase phase, size_t nth) {
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == kind && p.instrs[i].phase == phase && nth-- == 0) return around[i];
    return int64_t{-1};
  };
  CHECK(memory::resident_bytes(p, StateBytes::loom_adamw()) == kStates);
  CHECK(at(OpKind::AllGather, ir::Phase::Forward, 0) == kStates + kFull);      // its output
  CHECK(at(OpKind::Wait, ir::Phase::Forward, 0) == kStates + kFull);            // gathered in place: nothing changes
  CHECK(at(OpKind::Compute, ir::Phase::Forward, 0) == kStates + kFull + 50);    // its saved activation at its end
  CHECK(at(OpKind::Release, ir::Phase::Forward, 0) == kStates + kFull + 50);    // the peak around it: before it frees
  CHECK(at(OpKind::Compute, ir::Phase::Forward, 2) == kStates + kFull + 150);
  // The optimizer step: the states, the kept gradient shards (300 x 4 / 2 = 600 bytes) and
  // AdamW's two temporaries of the largest state slice (50 elements x 4 bytes, twice: 400).
  CHECK(at(OpKind::OptimizerStep, ir::Phase::Step, 0) == kStates + 600 + 400);
  // The simulator's peak is the walk's.
  ClusterCost cost(load_cluster("dgx-a100", cluster_dirs()), Precision::Bf16, 8);
  SimResult r = simulate({p}, cost);
  CHECK(r.peak_bytes == *std::max_element(around.begin(), around.end()));
  // walk_peak: that highest point and the first instruction at it (loom check names it).
  memory::WalkPeak peak = memory::walk_peak(p, StateBytes::loom_adamw(), nullptr);
  CHECK(peak.bytes == r.peak_bytes);
  CHECK(peak.instr == static_cast<size_t>(std::find(around.begin(), around.end(), peak.bytes) - around.begin()));
  CHECK(memory::walk_peak(ir::Program{}, StateBytes::loom_adamw(), nullptr).bytes == 0);
  // Over stages, the highest; check_step_memory refuses it over a limit with what would lower it.
  StagePeak highest = highest_stage_peak({ir::Program{}, p}, StateBytes::loom_adamw());
  CHECK((highest.bytes == peak.bytes && highest.stage == 1 && highest.instr == peak.instr));
  RuntimePlan plan;
  plan.factors = kZero3;
  CheckedStep step{peak.bytes, 1, 8, 1, "loom simulate ..."};
  CHECK(check_step_memory({p}, plan, step).bytes == peak.bytes);  // at the limit: fits
  step.limit = peak.bytes - 1;
  try {
    check_step_memory({p}, plan, step);
    FAIL("over the limit, not refused");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message.find("the step needs " + format_size(peak.bytes) + " per rank at its peak") == 0);
    // Already ZeRO-3, nothing recomputed or offloaded: recompute, offload, a smaller batch.
    CHECK(e.diagnostic().hint ==
          "checkpoint() the blocks, offload(\"optimizer\", budget=auto), or a smaller --micro-batch or --seq; `loom simulate ...` draws where the memory goes");
  }
  // Recomputing and offloading already: only the batch is left to suggest.
  plan.checkpoint = {"l0", "l1", "l2"};
  plan.offload = true;
  try {
    check_step_memory({p}, plan, step);
    FAIL("over the limit, not refused");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().hint == "a smaller --micro-batch or --seq; `loom simulate ...` draws where the memory goes");
  }
}

TEST_CASE("the optimizer step's temporaries: twice the largest state slice it updates on the device") {
  ir::OpTrace t = three_layers();
  t.params[1].numel = 300;  // l1.w: 150 elements a slice at s_os = 2, 600 bytes of fp32
  ir::Program p = lowered(t, {});
  ir::Instr step;
  for (const ir::Instr& in : p.instrs)
    if (in.kind == OpKind::OptimizerStep) step = in;
  REQUIRE(step.kind == OpKind::OptimizerStep);
  CHECK(memory::optimizer_step_workspace(p, step) == 2 * 600);
  // Stepped on the host (offload_optimizer), l1.w's slice needs no device temporaries: l0.w's 50
  // elements are the largest left.
  ir::Instr to_host;
  to_host.kind = OpKind::Offload;
  to_host.phase = ir::Phase::Step;
  to_host.params = {1};
  p.instrs.push_back(to_host);
  CHECK(memory::optimizer_step_workspace(p, step) == 2 * 200);
}

TEST_CASE("a tied parameter's first gradient is held by autograd from its first backward use to its last") {
  // l0 and l2 share w (100 fp32 elements, 400 bytes), as gpt2's embedding and head do; data
  // parallelism keeps gradients resident, so only autograd's buffered first gradient moves.
  ir::OpTrace t;
  t.model = "tied";
  t.params = {{"w", 100, 4}, {"l1.w", 100, 4}};
  t.forward = {{"l0", {"w"}}, {"l1", {"l1.w"}}, {"l2", {"w"}}};
  ir::Program p = run_passes(ir::lower(t, ir::Sharding{2, 1, 1, 1}), {}, pipeline_passes(), nullptr, PipelineDebug{});
  memory::TiedGradients tied(p);
  std::vector<std::pair<std::string, int64_t>> backward;
  for (const ir::Instr& in : p.instrs)
    if (in.kind == OpKind::Compute && in.phase == ir::Phase::Backward) backward.push_back({in.module, tied.change(in)});
  CHECK(backward == std::vector<std::pair<std::string, int64_t>>{{"l2", 400}, {"l1", 0}, {"l0", -400}});
  // Sharded gradients: the executor's full gradient buffer from the first use already counts it.
  ir::Program sharded = run_passes(ir::lower(t, kZero3), {}, pipeline_passes(), nullptr, PipelineDebug{});
  memory::TiedGradients none(sharded);
  int64_t moved = 0;
  for (const ir::Instr& in : sharded.instrs) moved += std::abs(none.change(in));
  CHECK(moved == 0);
}

TEST_CASE("proactive prefetch places Fig. 6's gathers: two at the start, the third after the first release") {
  // Room for two gathers beside the states (2,600 bytes), not for the third above l0's release
  // (the states, l0.w, l1.w and its own output: 3,000); after l0's release it needs 2,600.
  ir::Program p = lowered(three_layers(), auto_prefetch(kStates + 2 * kFull + 200));
  CHECK(words(p, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "wait", "c(l0)", "rel(l0.w)", "ag(l2.w)",
                                                                  "wait", "c(l1)", "rel(l1.w)", "wait", "c(l2)", "rel(l2.w)"});
  // The forward never holds more than the limit.
  std::vector<int64_t> around = memory::memory_around_each(p, StateBytes::loom_adamw(), nullptr);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == ir::Phase::Forward) CHECK(around[i] <= kStates + 2 * kFull + 200);
  // In backward a full gradient (400 bytes until its reduce-scatter completes) and the
  // reduce-scatter's own buffers (its 200-byte output and the 400 it receives into) leave no room
  // for a gather above the last layer's release, so nothing moves there.
  CHECK(words(p, ir::Phase::Backward) == words(lowered(three_layers(), {}), ir::Phase::Backward));
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("proactive prefetch: room for one buffer moves nothing, room for all moves every gather to the start") {
  // ZeRO-3's forward holds 2,200 at most (the states and a gather); one gather ahead needs 2,600.
  ir::Program tight = lowered(three_layers(), auto_prefetch(kStates + kFull + 100));
  CHECK(words(tight, ir::Phase::Forward) == words(lowered(three_layers(), {}), ir::Phase::Forward));
  ir::Program roomy = lowered(three_layers(), auto_prefetch(kStates + 3 * kFull));  // three outputs
  std::vector<std::string> forward = words(roomy, ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "ag(l2.w)"});
  // Activations count: without them a 3,100-byte limit takes every gather to the start (3,000).
  // With 150 bytes saved per layer the third fits from l0's release on (the states, l0's
  // activation, l1.w and its own output: 2,750 bytes), not above it (the states, l0.w and its
  // activation, l1.w and its own output: 3,150).
  ir::Program saving = lowered(three_layers(150), auto_prefetch(kStates + 3 * kFull + 100));
  CHECK(words(saving, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "wait", "c(l0)", "rel(l0.w)",
                                                                       "ag(l2.w)", "wait", "c(l1)", "rel(l1.w)", "wait", "c(l2)",
                                                                       "rel(l2.w)"});
  // M_prefetch bounds the bytes gathered ahead: one buffer ahead at a time.
  passes::PassInputs grouped = auto_prefetch(kStates + 3 * kFull);
  grouped.memory.prefetch_group_bytes = kFull;
  CHECK(words(lowered(three_layers(), grouped), ir::Phase::Forward) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "wait", "c(l0)", "rel(l0.w)", "ag(l2.w)", "wait", "c(l1)", "rel(l1.w)",
                                 "wait", "c(l2)", "rel(l2.w)"});
}

TEST_CASE("proactive prefetch fuses gathers that land together when T_c(V1) + T_c(V2) > 1.5 T_c(V1 + V2)") {
  // Room for every gather at the start and for the fused one's extra 1,200 bytes over the
  // separate outputs (its members' shards concatenated, 400, and at its wait their 800 bytes of
  // storage beside the output).
  passes::PassInputs in = auto_prefetch(kStates + 4 * kFull + 1200);
  double alpha = 1.0, beta = 0.001;  // seconds, seconds per byte
  in.memory.instruction_seconds = [&](const ir::Program&, const ir::Instr& g) { return alpha + beta * static_cast<double>(g.bytes); };
  // Latency-bound: 2 x (1 + 0.4) = 2.8 > 1.5 x (1 + 0.8) = 2.7: the two moved gathers become one.
  ir::Program fused = lowered(three_layers(), in);
  std::vector<std::string> forward = words(fused, ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w,l2.w)", "wait"});
  CHECK(ir::verify_complete(fused) == "");
  std::vector<int64_t> around = memory::memory_around_each(fused, StateBytes::loom_adamw(), nullptr);
  for (size_t i = 0; i < fused.instrs.size(); ++i)
    if (fused.instrs[i].phase == ir::Phase::Forward) CHECK(around[i] <= in.memory.limit);
  // A re-plan's round that times no group yet (pass.h's TimedGroup): the fusion rule has no
  // times and leaves the gathers separate. Timing the prefetch group through is enough to fuse.
  in.memory.timed_through = TimedGroup::None;
  forward = words(lowered(three_layers(), in), ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "ag(l2.w)"});
  in.memory.timed_through = TimedGroup::Overlap;
  CHECK(words(lowered(three_layers(), in), ir::Phase::Forward) == words(fused, ir::Phase::Forward));
  in.memory.timed_through = kLastTimedGroup;
  // A later round, the prefetch group settled by an earlier one: it plans with what it planned
  // with then, by sizes (a round that kept the program planned without times) or with the
  // times of that round, whatever the times of this one.
  in.memory.settled[TimedGroup::Overlap] = {};
  forward = words(lowered(three_layers(), in), ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "ag(l2.w)"});
  in.memory.settled[TimedGroup::Overlap] = {in.memory.instruction_seconds, nullptr};
  in.memory.instruction_seconds = [](const ir::Program&, const ir::Instr& g) { return 0.01 * static_cast<double>(g.bytes); };
  CHECK(words(lowered(three_layers(), in), ir::Phase::Forward) == words(fused, ir::Phase::Forward));
  in.memory.instruction_seconds = in.memory.settled[TimedGroup::Overlap].instruction_seconds;
  in.memory.settled.clear();
  // Room for the three gathers at the start but not for the fused one's extra bytes: left separate.
  in.memory.limit = kStates + 4 * kFull;
  forward = words(lowered(three_layers(), in), ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "ag(l2.w)"});
  in.memory.limit = kStates + 4 * kFull + 1200;
  // Bandwidth-bound: 2 x (1 + 4) = 10 < 1.5 x (1 + 8) = 13.5: left separate.
  beta = 0.01;
  forward = words(lowered(three_layers(), in), ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "ag(l2.w)"});
}

TEST_CASE("prefetch(budget=auto) without a memory limit is one block ahead; budget=BYTES is unchanged by a limit") {
  passes::PassInputs unlimited = auto_prefetch(0);
  std::vector<std::string> forward = words(lowered(three_layers(), unlimited), ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) == std::vector<std::string>{"ag(l0.w)", "wait", "ag(l1.w)"});
  passes::PassInputs bytes;
  bytes.prefetch = {{"l0", 400}, {"l1", 400}, {"l2", 400}};
  std::vector<std::string> without = words(lowered(three_layers(), bytes), ir::Phase::Forward);
  bytes.memory.limit = kStates + 4 * kFull;
  CHECK(words(lowered(three_layers(), bytes), ir::Phase::Forward) == without);
}

TEST_CASE("the limit the passes plan within: a given one, else 90% of a device's memory, and 0 is none everywhere") {
  const int64_t gpu = 80LL << 30;
  CHECK(MemoryPlanning::limit_or_default(-1, gpu) == gpu / 10 * 9);  // not given, on a GPU or a cluster's device
  CHECK(MemoryPlanning::limit_or_default(-1, 0) == 0);               // not given, on a CPU: none
  CHECK(MemoryPlanning::limit_or_default(-1, 5) == 1);               // a device of a few bytes: a limit of one, never none
  CHECK(MemoryPlanning::limit_or_default(0, gpu) == 0);              // --memory-limit 0: none, on a GPU too
  CHECK(MemoryPlanning::limit_or_default(600LL << 20, gpu) == 600LL << 20);
  CHECK(MemoryPlanning::limit_or_default(600LL << 20, 0) == 600LL << 20);
  // A plan or a tuning point is judged against some limit: there 0 is all of the device's memory.
  CHECK(MemoryPlanning::judging_limit(-1, gpu) == gpu / 10 * 9);
  CHECK(MemoryPlanning::judging_limit(0, gpu) == gpu);
  CHECK(MemoryPlanning::judging_limit(600LL << 20, gpu) == 600LL << 20);
}

TEST_CASE("selective unsharding keeps the parameters with the highest T_c(B)/B that fit under the limit") {
  // l0.w 100, l1.w 50, l2.w 25 elements: 400, 200 and 100 bytes kept if unsharded.
  ir::OpTrace t = three_layers(100);
  t.params = {{"l0.w", 100, 4}, {"l1.w", 50, 4}, {"l2.w", 25, 4}};
  int64_t states = 175 * 6;
  passes::PassInputs in;
  in.unshard = {{"l0", true}, {"l1", true}, {"l2", true}};
  // Ranked by size (no times): l2.w, l1.w, l0.w. Nothing lies between l2.w's forward release and
  // backward gather, so it is kept. Between l1.w's the walk peaks at 1,658 bytes (l2's backward
  // wait: the states, three activations, l2.w's padded 104-byte output and the process group's
  // flat output, and its 100 bytes of storage); keeping l1.w adds 200. Between l0.w's it peaks at
  // 2,110 (l1's reduce-scatter launch); l0.w would add 400. Under states + 1,000 = 2,050, l2.w and
  // l1.w are kept, l0.w is not.
  in.memory.limit = states + 1000;
  ir::Program kept = lowered(t, in);
  CHECK(words(kept, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w)", "wait", "c(l0)", "rel(l0.w)", "ag(l1.w)", "wait",
                                                                     "c(l1)", "ag(l2.w)", "wait", "c(l2)"});
  std::vector<std::string> backward = words(kept, ir::Phase::Backward);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l0.w)") == 1);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l1.w)") == 0);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l2.w)") == 0);
  // Keeping adds nothing above the base placement's own peak (l0's backward, with its gradient).
  auto peak = [](const ir::Program& p) {
    std::vector<int64_t> around = memory::memory_around_each(p, StateBytes::loom_adamw(), nullptr);
    return *std::max_element(around.begin(), around.end());
  };
  CHECK(peak(kept) == peak(lowered(t, {})));
  CHECK(ir::verify_complete(kept) == "");
  // No limit: nothing is kept.
  in.memory.limit = 0;
  std::vector<std::string> none = words(lowered(t, in), ir::Phase::Backward);
  CHECK(std::count(none.begin(), none.end(), "ag(l0.w)") == 1);
}

TEST_CASE("selective unsharding leaves room for the memory a profile measured outside the model") {
  // The first case's program and limit, planned on a GPU profile that measured 250 bytes held
  // outside the model: between l1.w's release and gather the walk now peaks at 1,908, and
  // keeping l1.w (200) would pass 2,050; l2.w, with nothing between, is still kept.
  ir::OpTrace t = three_layers(100);
  t.params = {{"l0.w", 100, 4}, {"l1.w", 50, 4}, {"l2.w", 25, 4}};
  passes::PassInputs in;
  in.unshard = {{"l0", true}, {"l1", true}, {"l2", true}};
  in.memory.limit = 175 * 6 + 1000;
  auto measured = std::make_shared<ModuleProfileCost>(Profile{}, std::vector<MemoryCalibration>{{1, 250}});
  in.memory.cost = measured;
  auto gathered_in_backward = [&](const std::string& param) {
    std::vector<std::string> backward = words(lowered(t, in), ir::Phase::Backward);
    return std::count(backward.begin(), backward.end(), "ag(" + param + ")");
  };
  CHECK(gathered_in_backward("l0.w") == 1);
  CHECK(gathered_in_backward("l1.w") == 1);
  CHECK(gathered_in_backward("l2.w") == 0);
  // The same memory in a group an earlier round settled: the group plans with it, not with
  // this round's (none here, which keeps l1.w).
  in.memory.cost = nullptr;
  CHECK(gathered_in_backward("l1.w") == 0);
  in.memory.settled[TimedGroup::Unshard] = {nullptr, measured};
  CHECK(gathered_in_backward("l0.w") == 1);
  CHECK(gathered_in_backward("l1.w") == 1);
  CHECK(gathered_in_backward("l2.w") == 0);
}

namespace {

// Four layers of one 100-element weight: gathers of 400 bytes, model states at the step's start
// of 400 x (4/2 + 8/2) = 2,400 bytes.
ir::OpTrace four_layers() {
  ir::OpTrace t;
  t.model = "four";
  t.params = {{"l0.w", 100, 4}, {"l1.w", 100, 4}, {"l2.w", 100, 4}, {"l3.w", 100, 4}};
  t.forward = {{"l0", {"l0.w"}}, {"l1", {"l1.w"}}, {"l2", {"l2.w"}}, {"l3", {"l3.w"}}};
  return t;
}

// Synthetic times: a forward op 1 s, a backward op 2 s, an all-gather 0.3 s + 0.5 ms a byte, a
// reduce-scatter 0.1 s + 0.5 ms a byte.
double synthetic_seconds(const ir::Program&, const ir::Instr& in) {
  switch (in.kind) {
    case OpKind::Compute: return in.phase == ir::Phase::Forward ? 1.0 : 2.0;
    case OpKind::AllGather: return 0.3 + 0.0005 * static_cast<double>(in.bytes);
    case OpKind::ReduceScatter: return 0.1 + 0.0005 * static_cast<double>(in.bytes);
    default: return 0;
  }
}

passes::PassInputs auto_buckets(int64_t limit) {
  passes::PassInputs in;
  in.sized_buckets = {{"l0", 0, true}, {"l1", 0, true}, {"l2", 0, true}, {"l3", 0, true}};
  in.memory.limit = limit;
  in.memory.instruction_seconds = synthetic_seconds;
  return in;
}

}  // namespace

TEST_CASE("selective unsharding ranks by T_c(B)/B: of two parameters with one interval, the one saving more per byte") {
  // One layer of a 100-element weight and a 10-element bias: the same forward release and
  // backward gather; room for the weight's 400 bytes or the bias's 40, not both.
  ir::OpTrace t;
  t.model = "one";
  t.params = {{"l0.w", 100, 4}, {"l0.b", 10, 4}, {"l1.w", 100, 4}};
  t.forward = {{"l0", {"l0.w", "l0.b"}}, {"l1", {"l1.w"}}};
  ir::Program base = lowered(t, {});
  std::vector<int64_t> around = memory::memory_around_each(base, StateBytes::loom_adamw(), nullptr);
  size_t release = base.instrs.size(), gather = base.instrs.size();
  for (size_t i = 0; i < base.instrs.size(); ++i) {
    const ir::Instr& in = base.instrs[i];
    bool of_l0 = !in.params.empty() && base.params[static_cast<size_t>(in.params[0])].name == "l0.w";
    if (of_l0 && in.kind == OpKind::Release && in.phase == ir::Phase::Forward) release = i;
    if (of_l0 && in.kind == OpKind::AllGather && in.phase == ir::Phase::Backward) gather = i;
  }
  REQUIRE(release < gather);
  int64_t between = *std::max_element(around.begin() + static_cast<long>(release) + 1, around.begin() + static_cast<long>(gather));
  passes::PassInputs in;
  in.unshard = {{"l0", true}};
  in.memory.limit = between + 400;
  // Without times, by size: the bias first; then the weight no longer fits.
  std::vector<std::string> by_size = words(lowered(t, in), ir::Phase::Forward);
  CHECK(std::count(by_size.begin(), by_size.end(), "rel(l0.w)") == 1);
  CHECK(std::count(by_size.begin(), by_size.end(), "rel(l0.b)") == 0);
  // With a cost that grows with the square of the bytes (no real link's, but it puts the larger
  // buffer first by T_c(B)/B): the weight, and then the bias no longer fits.
  in.memory.instruction_seconds = [](const ir::Program&, const ir::Instr& g) { return static_cast<double>(g.bytes * g.bytes); };
  std::vector<std::string> by_time = words(lowered(t, in), ir::Phase::Forward);
  CHECK(std::count(by_time.begin(), by_time.end(), "rel(l0.w)") == 0);
  CHECK(std::count(by_time.begin(), by_time.end(), "rel(l0.b)") == 1);
  // A re-plan's first round (the prefetch group timed, pass.h): unsharding still ranks by size.
  in.memory.timed_through = TimedGroup::Overlap;
  CHECK(words(lowered(t, in), ir::Phase::Forward) == by_size);
  in.memory.timed_through = TimedGroup::Unshard;
  CHECK(words(lowered(t, in), ir::Phase::Forward) == by_time);
}

TEST_CASE("unsharding part of a bucket leaves its backward gather the bytes of the members it still gathers") {
  // l0's bucket gathers its 400-byte weight and 40-byte bias, 440 bytes. unshard(auto), which
  // runs after the buckets, has room for the bias only (smallest first without times): the
  // bucket's backward gather then moves the weight alone, 400 bytes, not half the bucket's by
  // member count (220), which the cost model priced and the executor never moved. (Releases are
  // one parameter each: the weight's stays 400.)
  ir::OpTrace t;
  t.model = "bucketed";
  t.params = {{"l0.w", 100, 4}, {"l0.b", 10, 4}, {"l1.w", 100, 4}};
  t.forward = {{"l0", {"l0.w", "l0.b"}}, {"l1", {"l1.w"}}};
  passes::PassInputs in;
  in.buckets = {"l0"};
  ir::Program base = lowered(t, in);
  int l0_weight = 0;
  while (base.params[static_cast<size_t>(l0_weight)].name != "l0.w") ++l0_weight;
  auto holds_weight = [l0_weight](const ir::Instr& in) { return std::count(in.params.begin(), in.params.end(), l0_weight) > 0; };
  size_t release = base.instrs.size(), gather = base.instrs.size();
  for (size_t i = 0; i < base.instrs.size(); ++i) {
    const ir::Instr& in = base.instrs[i];
    if (holds_weight(in) && in.kind == OpKind::Release && in.phase == ir::Phase::Forward) release = i;
    if (holds_weight(in) && in.kind == OpKind::AllGather && in.phase == ir::Phase::Backward) gather = i;
  }
  REQUIRE(release < gather);
  REQUIRE(base.instrs[gather].params.size() == 2);
  REQUIRE(base.instrs[gather].bytes == 440);
  std::vector<int64_t> around = memory::memory_around_each(base, StateBytes::loom_adamw(), nullptr);
  in.unshard = {{"l0", true}};
  in.memory.limit = *std::max_element(around.begin() + static_cast<long>(release) + 1, around.begin() + static_cast<long>(gather)) + 100;
  ir::Program p = lowered(t, in);
  int checked = 0;
  for (const ir::Instr& in : p.instrs) {
    bool backward_gather = in.phase == ir::Phase::Backward && in.kind == OpKind::AllGather;
    bool forward_release = in.phase == ir::Phase::Forward && in.kind == OpKind::Release;
    if (!(backward_gather || forward_release) || in.params != std::vector<int>{l0_weight}) continue;
    CHECK(in.bytes == 400);
    ++checked;
  }
  CHECK(checked == 2);
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("bucket(size=auto) grows a bucket while its gather hides behind the previous bucket's compute (SimpleFSDP Alg. 1)") {
  // Forward: the first bucket keeps l0 (nothing before it to hide behind); the next takes l1 and
  // l2 (0.3 + 0.4 s <= l0's 1 s) and l3 (0.3 + 0.6 s <= 1 s). Backward likewise, with the previous
  // bucket's reduce-scatter (0.3 s) added: l3; then l2, l1 (0.3 + 0.7 <= 2 s) and l0 (0.3 + 0.9).
  ir::Program p = lowered(four_layers(), auto_buckets(0));
  CHECK(words(p, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w)", "ag(l1.w,l2.w,l3.w)", "wait", "c(l0)", "rel(l0.w)",
                                                                  "wait", "c(l1)", "rel(l1.w)", "c(l2)", "rel(l2.w)", "c(l3)",
                                                                  "rel(l3.w)"});
  std::vector<std::string> backward = words(p, ir::Phase::Backward);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l2.w,l1.w,l0.w)") == 1);
  CHECK(backward[0] == "ag(l3.w)");
  CHECK(backward[1] == "ag(l2.w,l1.w,l0.w)");  // reordered before l3's wait (the backward's waits are not listed)
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("bucket(size=auto) says it changed the program exactly when it did") {
  // Under a limit too tight for any bucket or move every bucket is one gather and nothing moves:
  // the record says unchanged (the pass log and LOOM_DEBUG show no change); with room it merges.
  bool unchanged_seen = false, changed_seen = false;
  for (int64_t limit : {int64_t{1000}, int64_t{2900}, int64_t{5600}, int64_t{0}}) {
    CAPTURE(limit);
    std::vector<PassRecord> records;
    run_passes(ir::lower(four_layers(), kZero3), auto_buckets(limit), pipeline_passes(), &records, {});
    auto bucket = std::find_if(records.begin(), records.end(), [](const PassRecord& r) { return r.pass == "auto_bucket"; });
    REQUIRE(bucket != records.end());
    REQUIRE(bucket != records.begin());
    CHECK(bucket->changed == (bucket->digest != std::prev(bucket)->digest));
    (bucket->changed ? changed_seen : unchanged_seen) = true;
  }
  CHECK(unchanged_seen);
  CHECK(changed_seen);
}

TEST_CASE("bucket(size=auto): the memory constraint closes a bucket, and the next is prefetched one bucket ahead") {
  // 5,200 bytes. A bucket of k holds, at its wait, its output (400 bytes a member), the members'
  // shards concatenated (200) and their storage (400): 1,000 k beside the states' 2,400 (l0's
  // buffer is released by then). Three would walk to 5,400; two walk to 4,400, and l3's 400
  // gathered ahead of their wait to 4,800.
  ir::Program p = lowered(four_layers(), auto_buckets(5200));
  CHECK(words(p, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w)", "ag(l1.w,l2.w)", "wait", "c(l0)", "rel(l0.w)",
                                                                  "ag(l3.w)", "wait", "c(l1)", "rel(l1.w)", "c(l2)", "rel(l2.w)",
                                                                  "wait", "c(l3)", "rel(l3.w)"});
  std::vector<int64_t> around = memory::memory_around_each(p, StateBytes::loom_adamw(), nullptr);
  for (size_t i = 0; i < p.instrs.size(); ++i)
    if (p.instrs[i].phase == ir::Phase::Forward) CHECK(around[i] <= 5200);
  // In backward the full gradients (400 bytes each until reduced) leave no room: no bucket grows.
  std::vector<std::string> backward = words(p, ir::Phase::Backward);
  for (const std::string& w : backward) CHECK(w.find(',') == std::string::npos);
  CHECK(ir::verify_complete(p) == "");
}

namespace {

// Eight layers of one 100-element weight, each its own bucket(size=auto) request.
ir::OpTrace eight_layers() {
  ir::OpTrace t;
  t.model = "eight";
  for (int l = 0; l < 8; ++l) {
    std::string name = "l" + std::to_string(l);
    t.params.push_back({name + ".w", 100, 4});
    t.forward.push_back({name, {name + ".w"}});
  }
  return t;
}

passes::PassInputs eight_auto_buckets(int64_t limit) {
  passes::PassInputs in = auto_buckets(limit);
  in.sized_buckets.clear();
  for (int l = 0; l < 8; ++l) in.sized_buckets.push_back({"l" + std::to_string(l), 0, true});
  return in;
}

// Whether every gather of several parameters in `phase` is issued before another gather's wait:
// prefetched behind the previous bucket's compute, as simplefsdp.txt §3.2.2 reorders a bucket.
bool buckets_issued_ahead(const ir::Program& p, ir::Phase phase) {
  std::set<int> gathers;
  for (const ir::Instr& in : p.instrs)
    if (in.kind == OpKind::AllGather) gathers.insert(in.handle);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::Instr& g = p.instrs[i];
    if (g.kind != OpKind::AllGather || g.phase != phase || g.params.size() < 2) continue;
    bool ahead = false;
    for (size_t j = i + 1; j < p.instrs.size() && !(p.instrs[j].kind == OpKind::Wait && p.instrs[j].handle == g.handle); ++j)
      ahead |= p.instrs[j].kind == OpKind::Wait && gathers.count(p.instrs[j].handle) > 0;
    if (!ahead) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("bucket(size=auto) counts the reductions window_reductions keeps in flight: the step stays within the limit") {
  // Eight layers whose backward compute hides any reduction: the buckets grow until memory stops
  // them. Each bucket's reduce-scatter holds its output, what it receives, its members' copy and
  // their gradients until its wait, which comes two launches later: at a launch the two buckets
  // before it are in flight too. Whatever the limit, the lowered step's walk stays within it.
  int64_t base = walk_peak(lowered(eight_layers(), {}));
  bool grew = false;
  for (int64_t limit = base; limit <= base + 6000; limit += 200) {
    CAPTURE(limit);
    ir::Program p = lowered(eight_layers(), eight_auto_buckets(limit));
    CHECK(walk_peak(p) <= limit);
    for (const std::string& w : words(p, ir::Phase::Backward)) grew |= w.find(',') != std::string::npos;
  }
  CHECK(grew);  // some limit leaves room for buckets in backward
}

TEST_CASE("bucket(size=auto) sizes a bucket on the program it makes: every bucket of several is issued ahead of the previous one's wait") {
  // The memory constraint walks the program with the bucket merged and its gather moved before
  // the previous bucket's wait, so a bucket the limit lets grow is one the reordering moves: a
  // bucket that could not be prefetched would run its gather exposed, which SimpleFSDP's time
  // constraint (the gather hides behind the previous bucket's compute) is there to prevent.
  int64_t base = walk_peak(lowered(eight_layers(), {}));
  bool grew_forward = false, grew_backward = false;
  for (int64_t limit = base; limit <= base + 6000; limit += 100) {
    CAPTURE(limit);
    ir::Program p = lowered(eight_layers(), eight_auto_buckets(limit));
    CHECK(buckets_issued_ahead(p, ir::Phase::Forward));
    CHECK(buckets_issued_ahead(p, ir::Phase::Backward));
    CHECK(walk_peak(p) <= limit);
    for (const std::string& w : words(p, ir::Phase::Forward)) grew_forward |= w.find(',') != std::string::npos;
    for (const std::string& w : words(p, ir::Phase::Backward)) grew_backward |= w.find(',') != std::string::npos;
  }
  CHECK(grew_forward);
  CHECK(grew_backward);
  // 600 bytes above the base peak the forward's buckets are the time rule's (l0 alone; l1-l3,
  // 0.3 + 0.6 s within l0's 1 s; l4-l7 within l1-l3's 3 s), each issued ahead: the walk of the
  // unmerged program left l4-l7's gather behind l1-l3's wait there.
  ir::Program roomy = lowered(eight_layers(), eight_auto_buckets(base + 600));
  std::vector<std::string> gathers;
  for (const std::string& w : words(roomy, ir::Phase::Forward))
    if (w.rfind("ag(", 0) == 0) gathers.push_back(w);
  CHECK(gathers == std::vector<std::string>{"ag(l0.w)", "ag(l1.w,l2.w,l3.w)", "ag(l4.w,l5.w,l6.w,l7.w)"});
  CHECK(buckets_issued_ahead(roomy, ir::Phase::Forward));
}

TEST_CASE("bucket(size=BYTES) caps each bucket; bucket(size=auto) without times buckets each module whole") {
  passes::PassInputs capped;
  capped.sized_buckets = {{"l0", 800, false}, {"l1", 800, false}, {"l2", 800, false}, {"l3", 800, false}};
  ir::Program p = lowered(four_layers(), capped);
  CHECK(words(p, ir::Phase::Forward) == std::vector<std::string>{"ag(l0.w,l1.w)", "ag(l2.w,l3.w)", "wait", "c(l0)", "rel(l0.w)",
                                                                  "c(l1)", "rel(l1.w)", "wait", "c(l2)", "rel(l2.w)", "c(l3)",
                                                                  "rel(l3.w)"});
  CHECK(ir::verify_complete(p) == "");
  passes::PassInputs untimed = auto_buckets(0);
  untimed.memory.instruction_seconds = nullptr;
  untimed.sized_buckets = {{"l0", 0, true}, {"l1", 0, true}};  // l2, l3 outside the selection end the run
  CHECK(words(lowered(four_layers(), untimed), ir::Phase::Forward) ==
        std::vector<std::string>{"ag(l0.w)", "ag(l1.w)", "wait", "c(l0)", "rel(l0.w)", "wait", "c(l1)", "rel(l1.w)", "ag(l2.w)",
                                 "wait", "c(l2)", "rel(l2.w)", "ag(l3.w)", "wait", "c(l3)", "rel(l3.w)"});
}

namespace {

passes::PassInputs adaptive_offload_under(int64_t limit) {
  passes::PassInputs in;
  in.offload = in.offload_automatic = true;
  in.memory.limit = limit;
  return in;
}

// The program's instructions of `phase` as words, the state copies and their waits named:
// "off(l0.w)", "wait off(l0.w)", "re(l0.w)", "wait re(l0.w)"; other waits "wait".
std::vector<std::string> copy_words(const ir::Program& p, ir::Phase phase) {
  std::map<int, std::string> copy_of;
  std::vector<std::string> out;
  for (const ir::Instr& in : p.instrs) {
    std::string name = in.params.empty() ? "" : p.params[static_cast<size_t>(in.params[0])].name;
    if (in.kind == OpKind::OffloadStates) copy_of[in.handle] = "off(" + name + ")";
    if (in.kind == OpKind::ReloadStates) copy_of[in.handle] = "re(" + name + ")";
    if (in.phase != phase) continue;
    switch (in.kind) {
      case OpKind::OffloadStates:
      case OpKind::ReloadStates: out.push_back(copy_of[in.handle]); break;
      case OpKind::Wait: out.push_back(copy_of.count(in.handle) ? "wait " + copy_of[in.handle] : "wait"); break;
      case OpKind::AllGather: out.push_back("ag(" + name + ")"); break;
      case OpKind::Release: out.push_back("rel(" + name + ")"); break;
      case OpKind::ReduceScatter: out.push_back("rs(" + name + ")"); break;
      case OpKind::Compute: out.push_back("c(" + in.module + ")"); break;
      default: out.push_back(ir::op_name(in.kind)); break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("adaptive offloading (Algorithm 2): the fragments over the limit leave in forward, wait where memory needs it, come back in backward") {
  // Three layers saving 50 bytes each: the walk peaks at 5,600 bytes at l0's reduce-scatter
  // launch (the states 1,800; l0.w 400; l0's padded gradient 400 and autograd's copy 400; l1's
  // and l2's gradients, 400 each, with their reductions' output and receive buffers, 600 each,
  // still in flight; l0's own 600). A fragment is a slice's AdamW states, 50 elements x 8 = 400
  // bytes. Under M = 5,100: 5,600 - 400 > M, so l0.w's and l1.w's fragments are offloaded
  // (5,200 - 400 <= M).
  ir::Program base = lowered(three_layers(50), {});
  REQUIRE(walk_peak(base) == 5600);
  ir::Program p = lowered(three_layers(50), adaptive_offload_under(5100));
  std::vector<std::string> forward = copy_words(p, ir::Phase::Forward);
  CHECK(std::vector<std::string>(forward.begin(), forward.begin() + 3) == std::vector<std::string>{"off(l0.w)", "off(l1.w)", "ag(l0.w)"});
  // Waits: the first instruction above M is l0's reduce-scatter launch (5,600, and 5,200 with
  // one fragment freed), which the executor runs inside l0's backward op (its gradient hook):
  // both offloads are waited before that op. Reloads: each at the earliest instruction from
  // which the rest of the step, with it back, stays within M: not at the reduction wait after
  // l0's reduce-scatter (4,800 + 400 > M), but from the next instruction on (at most 4,000,
  // then 4,400 with l1.w's states back). The step waits for both at the end of the backward.
  CHECK(copy_words(p, ir::Phase::Backward) ==
        std::vector<std::string>{"ag(l2.w)", "wait", "c(l2)", "rs(l2.w)", "rel(l2.w)", "ag(l1.w)", "wait", "c(l1)", "rs(l1.w)",
                                 "rel(l1.w)", "ag(l0.w)", "wait", "wait off(l0.w)", "wait off(l1.w)", "c(l0)", "rs(l0.w)", "wait",
                                 "re(l1.w)", "re(l0.w)", "rel(l0.w)", "wait", "wait", "wait re(l0.w)", "wait re(l1.w)"});
  CHECK(walk_peak(p) == 4800);  // l0's reduce-scatter launch with both fragments on the host
  CHECK(ir::verify_complete(p) == "");
  // The simulator sees the copies: its peak is the walk's, and the copy stream carries them.
  ClusterCost cost(load_cluster("dgx-a100", cluster_dirs()), Precision::Bf16, 8);
  SimResult r = simulate({p}, cost);
  CHECK(r.peak_bytes == 4800);
}

TEST_CASE("adaptive offloading: a fitting peak moves nothing; without a limit budget=auto offloads every state with a host step") {
  ir::Program roomy = lowered(three_layers(50), adaptive_offload_under(5600));
  for (const ir::Instr& in : roomy.instrs) CHECK((in.kind != OpKind::OffloadStates && in.kind != OpKind::Offload));
  passes::PassInputs unlimited = adaptive_offload_under(0);
  ir::Program all = lowered(three_layers(50), unlimited);
  int offloads = 0, state_copies = 0;
  for (const ir::Instr& in : all.instrs) {
    if (in.kind == OpKind::Offload) offloads += static_cast<int>(in.params.size());
    if (in.kind == OpKind::OffloadStates) ++state_copies;
  }
  CHECK(offloads == 3);
  CHECK(state_copies == 0);
  // Under a limit no offload meets, every fragment goes, and the walk says by how much it is over.
  ir::Program tight = lowered(three_layers(50), adaptive_offload_under(3000));
  int fragments = 0;
  for (const ir::Instr& in : tight.instrs) fragments += in.kind == OpKind::OffloadStates;
  CHECK(fragments == 3);
  CHECK(walk_peak(tight) > 2000);
  CHECK(ir::verify_complete(tight) == "");
}

TEST_CASE("adaptive offloading with accumulation: offloads in the first micro-batch, reloads in the last") {
  ir::OpTrace t = three_layers(50);
  PipelineDebug each;
  each.verify_each_pass = true;
  ir::Program p = run_passes(ir::lower(t, kZero3, true, 2), adaptive_offload_under(5100), pipeline_passes(), nullptr, each);
  std::map<int, OpKind> launcher;
  for (const ir::Instr& in : p.instrs) {
    if (in.kind == OpKind::OffloadStates || in.kind == OpKind::ReloadStates) launcher[in.handle] = in.kind;
    if (!launcher.count(in.handle)) continue;  // not a copy nor a copy's wait
    CHECK(in.runs_in == (launcher[in.handle] == OpKind::OffloadStates ? ir::MicroBatches::First : ir::MicroBatches::Last));
  }
  CHECK(launcher.size() >= 2);
  CHECK(p.to_text().find("[first micro-batch]") != std::string::npos);
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("the IR verifier checks the state copies: reloaded after the offload's wait, back before the optimizer step") {
  ir::Program p = lowered(three_layers(50), adaptive_offload_under(5100));
  auto position = [&](OpKind kind, const std::string& param) {
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == kind && p.params[static_cast<size_t>(p.instrs[i].params.at(0))].name == param) return i;
    return p.instrs.size();
  };
  auto wait_of = [&](size_t launch) {
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].handle == p.instrs[launch].handle) return i;
    return p.instrs.size();
  };
  SUBCASE("a reload never waited") {
    p.instrs.erase(p.instrs.begin() + static_cast<long>(wait_of(position(OpKind::ReloadStates, "l1.w"))));
    CHECK(ir::verify(p).find("updates l1.w while its optimizer states are not back on the device (wait for their reload)") != std::string::npos);
  }
  SUBCASE("a reload before its offload's wait") {
    ir::Instr reload = p.instrs[position(OpKind::ReloadStates, "l0.w")];
    p.instrs.erase(p.instrs.begin() + static_cast<long>(position(OpKind::ReloadStates, "l0.w")));
    p.instrs.insert(p.instrs.begin() + static_cast<long>(wait_of(position(OpKind::OffloadStates, "l0.w"))), reload);
    CHECK(ir::verify(p).find("reloads the optimizer states of l0.w, which are not on the host (their offload must be waited first)") !=
          std::string::npos);
  }
  SUBCASE("a copy in the step's tail") {
    p.instrs[position(OpKind::OffloadStates, "l0.w")].phase = ir::Phase::Step;
    CHECK(ir::verify(p).find("copies optimizer states in the step's tail, where the optimizer needs them") != std::string::npos);
  }
}

TEST_CASE("the IR verifier: with accumulation, states leave in the first micro-batch and come back in the last only") {
  ir::OpTrace t = three_layers(50);
  ir::Program p = run_passes(ir::lower(t, kZero3, true, 2), adaptive_offload_under(5100), pipeline_passes(), nullptr, {});
  REQUIRE(ir::verify(p) == "");
  for (ir::Instr& in : p.instrs)
    if (in.kind == OpKind::OffloadStates) {
      in.runs_in = ir::MicroBatches::All;  // would leave again from the second micro-batch, freed already
      break;
    }
  CHECK(ir::verify(p).find("moves optimizer states in other micro-batches than the first (once a step each way)") != std::string::npos);
}

TEST_CASE("proactive prefetch in backward: a gather moves up over what stays under the limit with its output") {
  // Under these limits the forward's gathers all run at its start. In backward a gather moved
  // above a compute adds its 400-byte output to every instruction it moves over: l1.w's fits
  // above c(l2) from 4,000 bytes (the walk's most over that span is 3,600, while l2's
  // reduce-scatter runs).
  ir::Program base = lowered(three_layers(), {});
  std::vector<std::string> unmoved = words(base, ir::Phase::Backward);
  CHECK(unmoved == std::vector<std::string>{"ag(l2.w)", "c(l2)", "rel(l2.w)", "ag(l1.w)", "c(l1)", "rel(l1.w)", "ag(l0.w)", "c(l0)",
                                            "rel(l0.w)"});
  CHECK(words(lowered(three_layers(), auto_prefetch(3999)), ir::Phase::Backward) == unmoved);
  CHECK(words(lowered(three_layers(), auto_prefetch(4000)), ir::Phase::Backward) ==
        std::vector<std::string>{"ag(l2.w)", "ag(l1.w)", "c(l2)", "rel(l2.w)", "c(l1)", "rel(l1.w)", "ag(l0.w)", "c(l0)", "rel(l0.w)"});
  // l0.w's, from 5,000 (4,600 while l1's reduce-scatter runs).
  CHECK(words(lowered(three_layers(), auto_prefetch(4999)), ir::Phase::Backward) ==
        words(lowered(three_layers(), auto_prefetch(4000)), ir::Phase::Backward));
  ir::Program both = lowered(three_layers(), auto_prefetch(5000));
  CHECK(words(both, ir::Phase::Backward) ==
        std::vector<std::string>{"ag(l2.w)", "ag(l1.w)", "ag(l0.w)", "c(l2)", "rel(l2.w)", "c(l1)", "rel(l1.w)", "c(l0)", "rel(l0.w)"});
  CHECK(ir::verify_complete(both) == "");
  // Where a gather now runs, the memory is what the base held there plus the moved outputs: the
  // base's own peak (5,600, its reduce-scatters' buffers at the end) is not the pass's to lower.
  std::vector<int64_t> before = memory::memory_around_each(base, StateBytes::loom_adamw(), nullptr);
  std::vector<int64_t> after = memory::memory_around_each(both, StateBytes::loom_adamw(), nullptr);
  CHECK(*std::max_element(after.begin(), after.end()) == *std::max_element(before.begin(), before.end()));
}

TEST_CASE("selective unsharding under accumulation keeps a parameter across the micro-batches where that fits, else within each") {
  // The first case's program over two micro-batches, l2.w (100 bytes) the only candidate. Kept
  // across them (deepcompile.txt §4.3), it is held also before its forward gather and after its
  // backward release, which the pass bounds by every run of the body: there the walk reaches
  // the base program's own peak P (l0's backward), so across takes a limit of P + 100. Under
  // that, l2.w is kept within each micro-batch, which needs far less (the first case: +1,000).
  ir::OpTrace t = three_layers(100);
  t.params = {{"l0.w", 100, 4}, {"l1.w", 50, 4}, {"l2.w", 25, 4}};
  PipelineDebug each;
  each.verify_each_pass = true;
  auto planned = [&](int64_t limit) {
    passes::PassInputs in;
    in.unshard = {{"l2", true}};
    in.memory.limit = limit;
    return run_passes(ir::lower(t, kZero3, true, 2), in, pipeline_passes(), nullptr, each);
  };
  int64_t base_peak = walk_peak(planned(0));
  auto runs_in = [](const ir::Program& p, OpKind kind, ir::Phase phase) {
    for (const ir::Instr& in : p.instrs)
      if (in.kind == kind && in.phase == phase && in.params.size() == 1 && p.params[in.params[0]].name == "l2.w") return in.runs_in;
    FAIL("no such instruction of l2.w");
    return ir::MicroBatches::All;
  };
  ir::Program across = planned(base_peak + 100);
  CHECK(runs_in(across, OpKind::AllGather, ir::Phase::Forward) == ir::MicroBatches::First);
  CHECK(runs_in(across, OpKind::Release, ir::Phase::Backward) == ir::MicroBatches::Last);
  std::vector<std::string> backward = words(across, ir::Phase::Backward);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l2.w)") == 0);
  CHECK(walk_peak(across) <= base_peak + 100);
  CHECK(ir::verify_complete(across) == "");
  ir::Program within = planned(base_peak + 99);
  CHECK(runs_in(within, OpKind::AllGather, ir::Phase::Forward) == ir::MicroBatches::All);
  CHECK(runs_in(within, OpKind::Release, ir::Phase::Backward) == ir::MicroBatches::All);
  backward = words(within, ir::Phase::Backward);
  CHECK(std::count(backward.begin(), backward.end(), "ag(l2.w)") == 0);
  CHECK(walk_peak(within) == base_peak);
  CHECK(ir::verify_complete(within) == "");
}
