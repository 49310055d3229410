// The step simulator (issue #15 §2) on hand-built programs with fixed instruction times, whose
// timelines are worked out by hand in each case.
#include <doctest/doctest.h>

#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "backend/cost/instruction_cost.h"
#include "backend/cost/module_profile_cost.h"
#include "backend/passes/profile_planning.h"
#include "backend/sim/memory_calibration.h"
#include "backend/sim/memory_walk.h"
#include "backend/sim/simulator.h"
#include "lang/diagnostics.h"

using namespace loom;
using ir::OpKind;
using ir::Phase;

namespace {

// Every instruction of a kind takes the same time (and, if given, holds the same workspace).
struct FixedCost : InstructionCost {
  std::map<OpKind, double> by_kind;
  std::map<OpKind, int64_t> workspace_by_kind;
  double seconds(const ir::Program&, const ir::Instr& in) const override {
    auto it = by_kind.find(in.kind);
    return it == by_kind.end() ? 0 : it->second;
  }
  int64_t workspace_bytes(const ir::Program&, const ir::Instr& in) const override {
    auto it = workspace_by_kind.find(in.kind);
    return it == workspace_by_kind.end() ? 0 : it->second;
  }
};

ir::Instr instr(OpKind kind, Phase phase, std::string module = "", int handle = -1, ir::GroupRef group = {ir::Role::Params, 2}) {
  ir::Instr in;
  in.kind = kind;
  in.phase = phase;
  in.module = std::move(module);
  in.handle = handle;
  in.group = group;
  return in;
}
ir::Instr wait(int handle, Phase phase = Phase::Forward) { return instr(OpKind::Wait, phase, "", handle); }

// One parameter of 1000 fp32 elements, sharded over 2 ranks.
ir::Program one_param(std::vector<ir::Instr> instrs) {
  ir::Program p;
  p.params = {{"w", 1000, 4}};
  p.sharding = {2, 2, 2, 2};
  p.instrs = std::move(instrs);
  for (auto& in : p.instrs)
    if (in.kind == OpKind::AllGather || in.kind == OpKind::Release) in.params = {0};
  return p;
}

}  // namespace

TEST_CASE("a gather issued before a compute overlaps it; its wait exposes only what is left") {
  FixedCost cost;
  cost.by_kind = {{OpKind::AllGather, 2}, {OpKind::Compute, 3}};
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), instr(OpKind::Compute, Phase::Forward, "a"), wait(0),
                             instr(OpKind::Compute, Phase::Forward, "b")});
  SimResult hidden = simulate({p}, cost);
  CHECK(hidden.step_s == doctest::Approx(6));  // a 0-3 (the gather 0-2 beside it), b 3-6
  CHECK(hidden.compute_s == doctest::Approx(6));
  CHECK(hidden.exposed_comm_s == doctest::Approx(0));
  cost.by_kind[OpKind::AllGather] = 5;
  SimResult exposed = simulate({p}, cost);
  CHECK(exposed.step_s == doctest::Approx(8));  // a 0-3, the wait until 5, b 5-8
  CHECK(exposed.exposed_comm_s == doctest::Approx(2));
  REQUIRE(exposed.events.size() == 3);
  CHECK(exposed.events[0].stream == "collective");
  CHECK(exposed.events[2].start_s == doctest::Approx(5));
}

TEST_CASE("a step priced at infinity (a cluster's rates near 0) is a user error, not a step of inf ms") {
  FixedCost cost;
  cost.by_kind = {{OpKind::Compute, std::numeric_limits<double>::infinity()}};
  ir::Program p = one_param({instr(OpKind::Compute, Phase::Forward, "a")});
  CHECK_THROWS_WITH_AS(simulate({p}, cost),
                       "the simulated step takes more seconds than a number can hold: the cost model prices some of it at infinity or at no number",
                       UserError);
  cost.by_kind[OpKind::Compute] = 1e308;  // two of them overflow
  p.instrs.push_back(instr(OpKind::Compute, Phase::Forward, "b"));
  CHECK_THROWS_AS(simulate({p}, cost), UserError);
  CHECK_THROWS_AS(simulate_each_rank(p, {&cost, &cost}), UserError);
  cost.by_kind[OpKind::Compute] = 1e300;
  CHECK(simulate({p}, cost).step_s == doctest::Approx(2e300));
}

TEST_CASE("on a GPU the host dispatches kernels and goes on: a step of short kernels waits for the host") {
  // Each compute's kernels take `device` seconds, their dispatch `host` seconds of the host.
  struct GpuCost : InstructionCost {
    double device = 0, host = 0;
    double seconds(const ir::Program&, const ir::Instr& in) const override {
      return in.kind == OpKind::Compute ? device : in.kind == OpKind::AllReduce || in.kind == OpKind::OffloadStates ? 2 : 0;
    }
    double host_seconds(const ir::Program&, const ir::Instr& in) const override { return in.kind == OpKind::Compute ? host : -1; }
  };
  ir::GroupRef world{ir::Role::World, 2};
  ir::Program p = one_param({instr(OpKind::Compute, Phase::Forward, "a"), instr(OpKind::Compute, Phase::Forward, "b"),
                             instr(OpKind::AllReduce, Phase::Backward, "", 0, world), wait(0, Phase::Backward),
                             instr(OpKind::Compute, Phase::Backward, "c")});
  GpuCost cost;
  cost.device = 3, cost.host = 1;  // the host runs ahead: a 0-3, b 3-6, the all-reduce from 6 (the device reaches it) to 8, c 8-11
  SimResult device_bound = simulate({p}, cost);
  CHECK(device_bound.step_s == doctest::Approx(11));
  REQUIRE(device_bound.events.size() == 4);
  CHECK(device_bound.events[1].start_s == doctest::Approx(3));
  CHECK(device_bound.events[2].start_s == doctest::Approx(6));
  CHECK(device_bound.compute_s == doctest::Approx(9));
  cost.device = 1, cost.host = 3;  // the device waits for the dispatches: a 0-3, b 3-6, the all-reduce 6-8, c 8-11
  SimResult host_bound = simulate({p}, cost);
  CHECK(host_bound.step_s == doctest::Approx(11));
  CHECK(host_bound.events[1].start_s == doctest::Approx(3));
  CHECK(host_bound.compute_s == doctest::Approx(3));  // the kernels' own time; the rest is the host's
  cost.host = 0.5;  // the kernels: a 0-1, b 1-2 (dispatched at 0.5), all-reduce 2-4, c 4-5
  CHECK(simulate({p}, cost).step_s == doctest::Approx(5));
  // A copy of states waits for the device too: a 0-3 (the host at 1), the copy 3-5, its wait until 5.
  cost.device = 3, cost.host = 1;
  ir::Instr copy = instr(OpKind::OffloadStates, Phase::Forward, "", 5);
  copy.params = {0};
  ir::Program copying = one_param({instr(OpKind::Compute, Phase::Forward, "a"), copy, wait(5)});
  SimResult copied = simulate({copying}, cost);
  REQUIRE(copied.events.size() == 2);
  CHECK(copied.events[1].stream == "copy");
  CHECK(copied.events[1].start_s == doctest::Approx(3));
  CHECK(copied.step_s == doctest::Approx(5));
}

TEST_CASE("collectives queue on the collective stream in issue order") {
  FixedCost cost;
  cost.by_kind = {{OpKind::AllGather, 2}};
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), instr(OpKind::AllGather, Phase::Forward, "", 1),
                             wait(1)});
  SimResult r = simulate({p}, cost);
  CHECK(r.events[1].start_s == doctest::Approx(2));
  CHECK(r.step_s == doctest::Approx(4));
  CHECK(r.exposed_comm_s == doctest::Approx(4));
}

// Two stages: stage 0 runs a and sends its activation on; stage 1 runs b's forward and
// backward, then `before_send`, and sends the gradient back (handle 1) for a's backward, then
// `tail`.
std::vector<ir::Program> two_stages(std::vector<ir::Instr> before_send = {}, std::vector<ir::Instr> tail = {}) {
  ir::GroupRef pair{ir::Role::StagePair, 2};
  ir::Program first = one_param({instr(OpKind::Compute, Phase::Forward, "a"), instr(OpKind::Send, Phase::Forward, "l.0", 0, pair),
                                 wait(0), instr(OpKind::Recv, Phase::Backward, "l.0", 1, pair), wait(1, Phase::Backward),
                                 instr(OpKind::Compute, Phase::Backward, "a")});
  std::vector<ir::Instr> last = {instr(OpKind::Recv, Phase::Forward, "l.1", 0, pair), wait(0),
                                 instr(OpKind::Compute, Phase::Forward, "b"), instr(OpKind::Compute, Phase::Backward, "b")};
  last.insert(last.end(), before_send.begin(), before_send.end());
  last.push_back(instr(OpKind::Send, Phase::Backward, "l.1", 1, pair));
  last.push_back(wait(1, Phase::Backward));
  last.insert(last.end(), tail.begin(), tail.end());
  return {first, one_param(last)};
}

TEST_CASE("pipeline stages meet at their sends and receives") {
  FixedCost cost;
  cost.by_kind = {{OpKind::Send, 0.5}, {OpKind::Recv, 0.5}, {OpKind::Compute, 1}};
  std::vector<ir::Program> stages = two_stages();
  const ir::Program& first = stages[0];
  SimResult r = simulate(stages, cost);
  // Stage 0: a 0-1, the activation 1-1.5; stage 1: b 1.5-2.5, its backward 2.5-3.5, the
  // gradient back 3.5-4; stage 0: a's backward 4-5.
  CHECK(r.step_s == doctest::Approx(5));
  CHECK(r.critical_stage == 0);
  CHECK(r.compute_s == doctest::Approx(2));
  CHECK(r.exposed_comm_s == doctest::Approx(3));
  // A send whose recv never comes is a Loom bug, reported with where it waits.
  CHECK_THROWS_WITH_AS(simulate({first, one_param({})}, cost), doctest::Contains("stage 0 waits at instruction 1 (send)"),
                       InternalError);
}

TEST_CASE("each rank simulated at its own times: a collective starts when the last rank issues it") {
  // Forward a and b, an all-reduce over both ranks, its wait, then c; later a second all-reduce.
  struct ByModule : InstructionCost {
    std::map<std::string, double> compute;
    double seconds(const ir::Program&, const ir::Instr& in) const override {
      return in.kind == OpKind::Compute ? compute.at(in.module) : in.kind == OpKind::AllReduce ? 1 : 0;
    }
  };
  ir::GroupRef world{ir::Role::World, 2};
  ir::Program p = one_param({instr(OpKind::Compute, Phase::Forward, "a"), instr(OpKind::Compute, Phase::Forward, "b"),
                             instr(OpKind::AllReduce, Phase::Backward, "", 0, world), wait(0, Phase::Backward),
                             instr(OpKind::Compute, Phase::Backward, "c"), instr(OpKind::AllReduce, Phase::Backward, "", 1, world),
                             wait(1, Phase::Backward)});
  ByModule rank0, rank1, slowest;
  rank0.compute = {{"a", 3}, {"b", 1}, {"c", 2}};  // late in a
  rank1.compute = {{"a", 1}, {"b", 3}, {"c", 1}};  // late in b
  slowest.compute = {{"a", 3}, {"b", 3}, {"c", 2}};  // what a profile's per-op maxima say
  CHECK(simulate({p}, slowest).step_s == doctest::Approx(10));  // 3 + 3, all-reduce, 2, all-reduce
  SimResult each = simulate_each_rank(p, {&rank0, &rank1});
  // Both ranks issue the first all-reduce at 4 (4-5); rank 0's c ends at 7, rank 1's at 6, so the
  // second all-reduce starts at 7 (7-8) on both: rank 1 waits a second for rank 0.
  CHECK(each.step_s == doctest::Approx(8));
  CHECK(each.ranks_simulated == 2);
  CHECK(each.critical_rank == 0);
  CHECK(each.compute_s == doctest::Approx(6));
  CHECK(each.exposed_comm_s == doctest::Approx(2));
  // A rank that is slow throughout holds the other at each collective.
  rank1.compute = {{"a", 3}, {"b", 3}, {"c", 1}};
  SimResult waiting = simulate_each_rank(p, {&rank0, &rank1});
  // Rank 0 issues at 4, rank 1 at 6: 6-7. Then c: rank 0 7-9, rank 1 7-8; the second 9-10.
  CHECK(waiting.step_s == doctest::Approx(10));
  // Both end at 10; rank 1, with more compute, kept rank 0 waiting, so it is the critical one.
  CHECK(waiting.critical_rank == 1);
  CHECK(waiting.compute_s == doctest::Approx(7));
  CHECK(waiting.exposed_comm_s == doctest::Approx(3));
  REQUIRE(waiting.events.size() == 5);  // a, b, the all-reduce, c, the all-reduce (waits take no time)
  CHECK(waiting.events[2].stream == "collective");
  CHECK(waiting.events[2].start_s == doctest::Approx(6));
  CHECK(waiting.events[3].end_s == doctest::Approx(8));  // rank 1's c; it then waits for rank 0's
  CHECK(waiting.events[4].start_s == doctest::Approx(9));
  // The breakdown is the critical rank's: each all-reduce busy from when the last rank issued it.
  CHECK(waiting.comm_busy_s == std::map<std::string, double>{{"all_reduce on world", 2}});
  // Rank 1 late at the end: the step is its, and so is the timeline.
  rank1.compute = {{"a", 3}, {"b", 3}, {"c", 4}};
  SimResult late = simulate_each_rank(p, {&rank0, &rank1});
  CHECK(late.step_s == doctest::Approx(12));  // c 7-11 on rank 1, the second all-reduce 11-12
  CHECK(late.critical_rank == 1);
  CHECK(late.compute_s == doctest::Approx(10));
  CHECK(late.events[3].end_s == doctest::Approx(11));  // rank 1's c
  REQUIRE(late.memory.size() == 1);
  CHECK(!late.memory[0].empty());
  // A collective over fewer than all the ranks cannot be simulated this way.
  ir::Program sub = one_param({instr(OpKind::AllReduce, Phase::Backward, "", 0, {ir::Role::Params, 2}), wait(0)});
  CHECK_THROWS_WITH_AS(simulate_each_rank(sub, {&rank0, &rank1, &slowest}),
                       "simulator: a collective over 2 of the 3 ranks simulated each", InternalError);
}

TEST_CASE("the gradient norm's own work holds the host on the compute stream, then its all-reduce runs") {
  struct NormCost : FixedCost {
    double own = 0;
    double own_seconds(const ir::Program&, const ir::Instr& in) const override { return in.kind == OpKind::GradNorm ? own : 0; }
  };
  NormCost cost;
  cost.by_kind = {{OpKind::GradNorm, 1}, {OpKind::Compute, 3}};  // the all-reduce of the norm: 1
  cost.own = 2;                                                    // the norm and the clipping: 2
  ir::Program alone = one_param({instr(OpKind::Compute, Phase::Forward, "a"),
                                 instr(OpKind::GradNorm, Phase::Step, "", 0, {ir::Role::OptimBlock, 1}), wait(0, Phase::Step)});
  SimResult r = simulate({alone}, cost);
  CHECK(r.step_s == doctest::Approx(5));  // a 0-3, the norm 3-5; a group of one has no all-reduce
  CHECK(r.compute_s == doctest::Approx(5));
  REQUIRE(r.events.size() == 2);
  CHECK(r.events[1].stream == "compute");
  ir::Program reduced = one_param({instr(OpKind::Compute, Phase::Forward, "a"),
                                   instr(OpKind::GradNorm, Phase::Step, "", 0, {ir::Role::OptimBlock, 2}), wait(0, Phase::Step)});
  r = simulate({reduced}, cost);
  CHECK(r.step_s == doctest::Approx(6));  // a 0-3, the norm 3-5 on the compute stream, its all-reduce 5-6
  CHECK(r.compute_s == doctest::Approx(5));
  CHECK(r.exposed_comm_s == doctest::Approx(1));
  REQUIRE(r.events.size() == 3);
  CHECK(r.events[1].stream == "compute");
  CHECK(r.events[2].stream == "collective");
  CHECK(r.events[2].start_s == doctest::Approx(5));
}

TEST_CASE("a wait's unpacking holds the host on the compute stream once its collective has ended") {
  struct UnpackCost : FixedCost {
    double own_seconds(const ir::Program&, const ir::Instr& in) const override {
      return in.kind == OpKind::Wait ? static_cast<double>(in.unpack_bytes) / 1000 : 0;  // 1000 bytes a second
    }
  };
  UnpackCost cost;
  cost.by_kind = {{OpKind::AllGather, 5}, {OpKind::Compute, 3}};
  ir::Instr unpacking = wait(0);
  unpacking.unpack_bytes = 2000;  // 2 s
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), instr(OpKind::Compute, Phase::Forward, "a"), unpacking,
                             instr(OpKind::Compute, Phase::Forward, "b")});
  SimResult r = simulate({p}, cost);
  CHECK(r.step_s == doctest::Approx(10));  // a 0-3, the gather until 5, its unpacking 5-7, b 7-10
  CHECK(r.compute_s == doctest::Approx(8));
  CHECK(r.exposed_comm_s == doctest::Approx(2));
  REQUIRE(r.events.size() == 4);
  CHECK(r.events[2].stream == "compute");
  CHECK(r.events[2].start_s == doctest::Approx(5));
  CHECK(r.events[2].end_s == doctest::Approx(7));
}

TEST_CASE("the memory timeline: model states, a gathered parameter until its release, activations until their backward") {
  FixedCost cost;
  ir::Instr forward = instr(OpKind::Compute, Phase::Forward, "a");
  forward.activation_bytes = 500;
  ir::Instr backward = instr(OpKind::Compute, Phase::Backward, "a");
  backward.activation_bytes = 500;
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), wait(0), forward,
                             instr(OpKind::Release, Phase::Forward), backward});
  SimResult r = simulate({p}, cost);
  // The step starts with 1000 elements x (4/2 + 8/2) = 6000 (parameter shard and optimizer
  // slice; gradient shards come with their reductions). The gather holds the 4000-byte
  // parameter, gathered in place, from its launch to its release; the forward saves 500 until
  // the backward.
  CHECK(r.memory[0].front().bytes == 6000);
  CHECK(r.peak_bytes == 10500);
  CHECK(r.peak_instr == 2);
  std::vector<int64_t> after;
  for (const auto& point : r.memory[0]) after.push_back(point.bytes);
  CHECK(after == std::vector<int64_t>{6000, 10000, 10500, 6500, 6000});
  CHECK(r.memory[0].back().bytes == 6000);
}

TEST_CASE("memory: an instruction's workspace is held while it runs; the data-parallel reducer keeps a buffer per bucket") {
  FixedCost cost;
  cost.workspace_by_kind[OpKind::Compute] = 300;
  ir::Instr forward = instr(OpKind::Compute, Phase::Forward, "a");
  forward.activation_bytes = 500;
  ir::Instr backward = instr(OpKind::Compute, Phase::Backward, "a");
  backward.activation_bytes = 500;
  ir::Instr bucket = instr(OpKind::AllReduce, Phase::Backward, "", 0, {ir::Role::Dp, 2});
  bucket.bytes = 4000;
  ir::Program p;
  p.params = {{"w", 1000, 4}};
  p.sharding = {2, 1, 1, 1};  // data parallelism: 16 bytes an element
  p.instrs = {forward, backward, bucket, wait(0, Phase::Backward)};
  SimResult r = simulate({p}, cost);
  CHECK(r.memory[0].front().bytes == 16000 + 4000);  // the states and the bucket's buffer
  CHECK(r.peak_bytes == 20000 + 500 + 300);           // backward's workspace beside the activations it frees
  CHECK(r.peak_instr == 1);
  CHECK(r.memory[0].back().bytes == 20000);

  // ZeRO-1's executor reduces each gradient where it is: no bucket buffer, and no gradient
  // between steps. The backward holds its full gradient (and autograd's .grad) until the
  // all-reduce's wait, which keeps its optimizer slice, half of it, for the optimizer step.
  p.sharding = {2, 1, 1, 2};
  p.instrs[1].params = {0};  // the backward that hands w its gradient
  p.instrs[2].params = {0};
  SimResult zero1 = simulate({p}, cost);
  CHECK(zero1.memory[0].front().bytes == 1000 * (4 + 4));
  CHECK(zero1.peak_bytes == 8000 + 4000 + 4000);  // after the backward, its activations freed
  CHECK(zero1.peak_instr == 1);
  CHECK(zero1.memory[0].back().bytes == 8000 + 2000);
}

TEST_CASE("memory: ZeRO-1 accumulating over three micro-batches keeps one gradient, added in after each use") {
  // Two parameters of 1000 fp32 elements at (1, 1, 2) on two ranks: 8,000 bytes each of states
  // (the parameter, half the moments). Their all-reduces run in the last micro-batch only; before
  // it the executor adds each gradient into the one it keeps where the program's reduction stands,
  // right after its use, so a rank never holds two micro-batches' full gradients of both.
  FixedCost cost;
  auto backward = [](const char* module, int q) {
    ir::Instr in = instr(OpKind::Compute, Phase::Backward, module);
    in.params = {q};
    return in;
  };
  auto reduce = [](int q) {
    ir::Instr in = instr(OpKind::AllReduce, Phase::Backward, "", q, {ir::Role::Dp, 2});
    in.params = {q};
    in.runs_in = ir::MicroBatches::Last;
    return in;
  };
  auto waited = [](int handle) {
    ir::Instr in = wait(handle, Phase::Backward);
    in.runs_in = ir::MicroBatches::Last;
    return in;
  };
  ir::Program p;
  p.params = {{"w0", 1000, 4}, {"w1", 1000, 4}};
  p.sharding = {2, 1, 1, 2};
  p.micro_batches = 3;
  p.instrs = {instr(OpKind::Compute, Phase::Forward, "a0"), instr(OpKind::Compute, Phase::Forward, "a1"), backward("a1", 1), reduce(1),
              backward("a0", 0), reduce(0), waited(1), waited(0)};
  SimResult r = simulate({p}, cost);
  // The most: in a backward, the states, both kept gradients (the one just used's is added in at
  // its reduction), that one's new full gradient and autograd's copy: 16,000 + 8,000 + 8,000.
  // Holding every full gradient to the micro-batch's end would be 36,000 after the second.
  CHECK(r.peak_bytes == 16000 + 8000 + 4000 + 4000);
  CHECK(r.memory[0].back().bytes == 16000 + 2 * 2000);  // each gradient's optimizer slice
}

TEST_CASE("memory: a parameter no backward compute uses is completed as zeros after the last backward compute") {
  // A pipeline stage's copy of an embedding another stage computes with, at ZeRO-1 on two ranks:
  // w1's gradient is no op's, so the executor (complete_uncomputed) allocates it as zeros of its
  // full size once the last backward compute's gradients are in, and reduces it where the
  // program says. Two parameters of 1000 fp32 elements: 16,000 bytes of states.
  FixedCost cost;
  ir::Instr backward = instr(OpKind::Compute, Phase::Backward, "a0");
  backward.params = {0};
  auto reduce = [](int q) {
    ir::Instr in = instr(OpKind::AllReduce, Phase::Backward, "", q, {ir::Role::Dp, 2});
    in.params = {q};
    return in;
  };
  ir::Program p;
  p.params = {{"w0", 1000, 4}, {"w1", 1000, 4}};
  p.sharding = {2, 1, 1, 2};
  p.instrs = {instr(OpKind::Compute, Phase::Forward, "a0"), backward, reduce(0), reduce(1), wait(0, Phase::Backward),
              wait(1, Phase::Backward)};
  SimResult r = simulate({p}, cost);
  std::vector<int64_t> after;
  for (const auto& point : r.memory[0]) after.push_back(point.bytes);
  // The backward: w0's full gradient and autograd's copy of it, and w1's zeros (4,000 each).
  // Each wait keeps its gradient's optimizer slice (2,000) and frees the rest.
  CHECK(after == std::vector<int64_t>{16000, 28000, 22000, 20000});  // the start, then each change
  CHECK(r.peak_bytes == 28000);
  CHECK(r.peak_instr == 1);

  // Accumulating over two micro-batches, the reductions in the last only: the first keeps each
  // gradient (w1's zeros too) where its reduction stands, and the last adds it in at the launch.
  p.micro_batches = 2;
  for (size_t i = 2; i < p.instrs.size(); ++i) p.instrs[i].runs_in = ir::MicroBatches::Last;
  SimResult accumulating = simulate({p}, cost);
  after.clear();
  for (const auto& point : accumulating.memory[0]) after.push_back(point.bytes);
  // The first backward: w0's autograd copy and both kept gradients; autograd's is dropped at the
  // next micro-batch, whose backward holds both full gradients again beside the kept ones; each
  // launch adds its kept gradient in, each wait keeps the optimizer slice.
  CHECK(after == std::vector<int64_t>{16000, 28000, 24000, 36000, 32000, 28000, 22000, 20000});
  CHECK(accumulating.peak_bytes == 36000);
}

TEST_CASE("micro-batches: the body runs once per micro-batch, as each instruction's runs_in says, the tail once") {
  FixedCost cost;
  cost.by_kind = {{OpKind::Compute, 1}, {OpKind::AllReduce, 1}, {OpKind::OptimizerStep, 1}};
  ir::Instr reduce = instr(OpKind::AllReduce, Phase::Backward, "", 0, {ir::Role::Dp, 2});
  reduce.runs_in = ir::MicroBatches::Last;
  ir::Program p = one_param({instr(OpKind::Compute, Phase::Forward, "a"), instr(OpKind::Compute, Phase::Backward, "a"), reduce,
                             wait(0, Phase::Backward), instr(OpKind::OptimizerStep, Phase::Step)});
  p.instrs[3].runs_in = ir::MicroBatches::Last;
  p.micro_batches = 3;
  SimResult r = simulate({p}, cost);
  CHECK(r.events.size() == 3 * 2 + 1 + 1);  // 6 computes, one all-reduce, one optimizer step
  CHECK(r.step_s == doctest::Approx(8));
  CHECK(r.events.back().micro_batch == -1);
}

TEST_CASE("a pipeline's transfers run beside the stage's collectives, not queued behind them") {
  // Stage 1 all-reduces its gradients over its replicas (3 s), then sends the activation's
  // gradient back: on the stage-pair group, which runs beside the data-parallel one (gloo's
  // groups have their own threads, NCCL's their own streams), so the send goes at once.
  FixedCost cost;
  cost.by_kind = {{OpKind::Send, 0.5}, {OpKind::Recv, 0.5}, {OpKind::Compute, 1}, {OpKind::AllReduce, 3}};
  SimResult r = simulate(two_stages({instr(OpKind::AllReduce, Phase::Backward, "", 2, {ir::Role::Dp, 2})}, {wait(2, Phase::Backward)}),
                         cost);
  // Stage 1: b 1.5-2.5 and 2.5-3.5, the all-reduce 3.5-6.5, the gradient back 3.5-4 beside it;
  // stage 0: a's backward 4-5. The step ends with stage 1's all-reduce.
  double a_backward = -1, sent = -1;
  for (const SimEvent& e : r.events) {
    if (e.stage == 0 && e.stream == "compute" && e.start_s > 1) a_backward = e.start_s;
    if (e.stage == 1 && e.stream == "transfer" && e.start_s > 2) sent = e.start_s;
  }
  CHECK(sent == doctest::Approx(3.5));
  CHECK(a_backward == doctest::Approx(4));
  CHECK(r.step_s == doctest::Approx(6.5));
  CHECK(r.critical_stage == 1);
}

TEST_CASE("three stages hand the activation on; a collective over every stage starts when the last issues it") {
  FixedCost cost;
  cost.by_kind = {{OpKind::Send, 0.5}, {OpKind::Recv, 0.5}, {OpKind::Compute, 1}, {OpKind::LossReduce, 0.25}};
  ir::GroupRef pair{ir::Role::StagePair, 2};
  auto loss = [] { return instr(OpKind::LossReduce, Phase::Step, "", 9, {ir::Role::World, 6}); };
  ir::Program first = one_param({instr(OpKind::Compute, Phase::Forward, "a"), instr(OpKind::Send, Phase::Forward, "l.0", 0, pair),
                                 wait(0), loss(), wait(9, Phase::Step)});
  ir::Program middle = one_param({instr(OpKind::Recv, Phase::Forward, "l.1", 0, pair), wait(0), instr(OpKind::Compute, Phase::Forward, "b"),
                                  instr(OpKind::Send, Phase::Forward, "l.1", 1, pair), wait(1), loss(), wait(9, Phase::Step)});
  ir::Program last = one_param({instr(OpKind::Recv, Phase::Forward, "l.2", 0, pair), wait(0), instr(OpKind::Compute, Phase::Forward, "c"),
                                loss(), wait(9, Phase::Step)});
  SimResult r = simulate({first, middle, last}, cost);
  // a 0-1, to stage 1 1-1.5, b 1.5-2.5, to stage 2 2.5-3, c 3-4; the loss all-reduce 4-4.25 on every stage.
  CHECK(r.step_s == doctest::Approx(4.25));
  std::vector<double> loss_starts;
  for (const SimEvent& e : r.events)
    if (e.stream == "collective" && e.end_s - e.start_s == doctest::Approx(0.25)) loss_starts.push_back(e.start_s);
  CHECK(loss_starts == std::vector<double>{4, 4, 4});
}

TEST_CASE("offload: copies hold the host on the copy stream, and the offloaded states leave device memory") {
  FixedCost cost;
  cost.by_kind = {{OpKind::Offload, 2}, {OpKind::Reload, 2}, {OpKind::OptimizerStep, 1}};
  ir::Instr offload = instr(OpKind::Offload, Phase::Step);
  offload.params = {0};
  ir::Instr recompute = instr(OpKind::Recompute, Phase::Backward, "a");
  recompute.activation_bytes = 300;
  ir::Program p = one_param({recompute, offload, instr(OpKind::OptimizerStep, Phase::Step), instr(OpKind::Reload, Phase::Step)});
  SimResult r = simulate({p}, cost);
  CHECK(r.step_s == doctest::Approx(5));
  CHECK(r.events[0].stream == "copy");  // the recompute takes no time here: no event
  CHECK(r.compute_s == doctest::Approx(1));
  // 1000 x (4/2 + 8/2) less the 4000 bytes of optimizer states on the host; the recompute saves 300.
  CHECK(r.memory[0].front().bytes == 2000);
  CHECK(r.peak_bytes == 2300);
}

namespace {

// A step that saves 500 bytes in `a`'s forward and 1000 in `b`'s, on data parallelism at world 2
// (1000 fp32 elements: 16000 bytes of model states), and a profile of it measured on `device`
// with 3000 bytes held outside the model from the start and the forward saving 1200 bytes, not
// the traced 1500 (autocast keeps some in bf16).
ir::Program two_ops() {
  ir::Program p;
  p.params = {{"w", 1000, 4}};
  p.sharding = {2, 1, 1, 1};
  ir::Instr a = instr(OpKind::Compute, Phase::Forward, "a"), b = instr(OpKind::Compute, Phase::Forward, "b");
  a.activation_bytes = 500, b.activation_bytes = 1000;
  ir::Instr b_back = b, a_back = a;
  b_back.phase = a_back.phase = Phase::Backward;
  p.instrs = {a, b, b_back, a_back};
  return p;
}
Profile measured_on(const std::string& device) {
  Profile profile;
  profile.device = device;
  profile.measured_steps = 1;
  profile.ops = {{"a", 1, 1, 19000, 19400, 19400, 19400}, {"b", 1, 1, 19400, 20200, 20200, 20200}};
  return profile;
}

}  // namespace

TEST_CASE("a GPU profile calibrates the memory walk: the bytes held outside the model and the activations' size") {
  std::vector<ir::Program> stages{two_ops()};
  Profile profile = measured_on("cuda");
  ProfileCost cost(stages, profile, "a test profile");
  std::vector<MemoryCalibration> calibrated = memory::measured_calibrations(stages, profile);
  cost.calibrate_memory(calibrated);
  REQUIRE(calibrated.size() == 1);
  // Measured 19000 before `a` against the walk's 16000; 1200 saved up to `b`'s backward against 1500 traced.
  CHECK(calibrated[0].outside_bytes == 3000);
  CHECK(calibrated[0].activation_scale == doctest::Approx(0.8));
  SimResult r = simulate(stages, cost);
  std::vector<int64_t> after;
  for (const auto& point : r.memory[0]) after.push_back(point.bytes);
  CHECK(after == std::vector<int64_t>{19000, 19400, 20200, 19400, 19000});
  CHECK(r.peak_bytes == 20200);

  // On CPU the traced tensors are what runs: nothing is calibrated.
  Profile on_cpu = measured_on("cpu");
  ProfileCost cpu_cost(stages, on_cpu, "a test profile");
  CHECK(memory::measured_calibrations(stages, on_cpu)[0].outside_bytes == 0);
  CHECK(simulate(stages, cpu_cost).peak_bytes == 16000 + 1500);
}

TEST_CASE("the passes plan on a GPU profile with the memory the simulator prices: calibrated, with the measured workspaces") {
  std::vector<ir::Program> stages{two_ops()};
  Profile profile = measured_on("cuda");
  profile.ops[0].backward_peak_bytes = profile.ops[0].backward_before_bytes + 700;  // `a`'s backward allocates 700 bytes for its time
  MemoryPlanning planning;
  std::vector<MemoryCalibration> calibration = plan_on_profile(planning, profile, stages);
  REQUIRE(calibration.size() == 1);
  CHECK(calibration[0].outside_bytes == 3000);
  CHECK(calibration[0].activation_scale == doctest::Approx(0.8));
  REQUIRE(planning.cost != nullptr);
  REQUIRE(planning.instruction_seconds);
  // The passes' walk of the measured program is the simulator's, instruction by instruction.
  ProfileCost priced(stages, profile, "a test profile");
  priced.calibrate_memory(calibration);
  std::vector<int64_t> planned = memory::memory_around_each(stages[0], StateBytes::loom_adamw(), planning.cost.get());
  CHECK(planned == memory::memory_around_each(stages[0], StateBytes::loom_adamw(), &priced));
  // Before `a`'s backward 19,400 (3,000 outside, 16,000 of states, 400 of `a`'s saved 500); the
  // workspace on top.
  CHECK(planned.back() == 19400 + 700);
  // A program the passes make (here `b` saves twice as much) is priced by module, at the same
  // calibration: 2,000 traced bytes saved at 0.8.
  ir::Program replanned = two_ops();
  replanned.instrs[1].activation_bytes = 2000;
  CHECK(planning.cost->activation_bytes(replanned, replanned.instrs[1]) == 1600);
  CHECK(planning.cost->outside_bytes(replanned) == 3000);
  CHECK(planning.cost->workspace_bytes(replanned, replanned.instrs[3]) == 700);
  CHECK(planning.cost->workspace_bytes(replanned, replanned.instrs[0]) == 0);  // a forward's: not measured as one
  CHECK(planning.instruction_seconds(replanned, replanned.instrs[1]) == doctest::Approx(1e-3));
  // On CPU the passes plan with the traced bytes, and the measured workspaces.
  MemoryPlanning on_cpu;
  profile.device = "cpu";
  plan_on_profile(on_cpu, profile, stages);
  CHECK(on_cpu.cost->outside_bytes(replanned) == 0);
  CHECK(on_cpu.cost->activation_bytes(replanned, replanned.instrs[1]) == 2000);
  CHECK(on_cpu.cost->workspace_bytes(replanned, replanned.instrs[3]) == 700);
}

TEST_CASE("a pipeline's stages are calibrated at modules that only they run") {
  // Both stages run the embedding `e` (a pipeline runs the modules outside its split list on
  // every stage); the profile keeps the most any rank measured of it: the second stage's.
  ir::Program first = two_ops(), second = two_ops();
  ir::Instr e = instr(OpKind::Compute, Phase::Forward, "e");
  first.instrs.insert(first.instrs.begin(), e);
  second.instrs.insert(second.instrs.begin(), e);
  for (ir::Instr& in : second.instrs)
    if (in.module != "e") in.module = "late_" + in.module;
  first.mesh.pp = second.mesh.pp = 2;
  second.mesh.stage = 1;
  Profile profile = measured_on("cuda");
  profile.ops.insert(profile.ops.begin(), OpProfile{"e", 1, 1, 90000, 90000, 90000, 90000, {}, {}});
  profile.ops.push_back({"late_a", 1, 1, 17000, 17500, 17500, 17500, {}, {}});
  profile.ops.push_back({"late_b", 1, 1, 17500, 18500, 18500, 18500, {}, {}});
  std::vector<ir::Program> stages{first, second};
  std::vector<MemoryCalibration> calibrated = memory::measured_calibrations(stages, profile);
  REQUIRE(calibrated.size() == 2);
  CHECK(calibrated[0].outside_bytes == 3000);
  CHECK(calibrated[0].activation_scale == doctest::Approx(0.8));
  CHECK(calibrated[1].outside_bytes == 1000);
  CHECK(calibrated[1].activation_scale == doctest::Approx(1));
  // A program the passes plan from the profile takes its own stage's; one of a stage the
  // profile did not measure, the traced bytes.
  ModuleProfileCost planned(profile, calibrated);
  CHECK(planned.outside_bytes(first) == 3000);
  CHECK(planned.outside_bytes(second) == 1000);
  CHECK(planned.activation_bytes(first, first.instrs[1]) == 400);
  ir::Program third = second;
  third.mesh.stage = 2;
  CHECK(planned.outside_bytes(third) == 0);
  CHECK(planned.activation_bytes(third, third.instrs[1]) == 500);
}

TEST_CASE("a module called twice in forward: its last call's backward comes first, and is the one compared") {
  ir::Program p;
  p.params = {{"w", 1000, 4}};
  p.sharding = {2, 1, 1, 1};
  ir::Instr a = instr(OpKind::Compute, Phase::Forward, "a");
  a.activation_bytes = 500;
  ir::Instr back = a;
  back.phase = Phase::Backward;
  p.instrs = {a, a, back, back};
  Profile profile;
  profile.device = "cuda";
  profile.measured_steps = 1;
  // The first call starts at 19000, the second at 19600; the second's backward starts at 20200,
  // the first's (after the second's frees its 600) at 19600.
  profile.ops = {{"a", 1, 1, 19000, 19600, 19600, 19600}, {"a", 1, 1, 19600, 20200, 20200, 20200}};
  MemoryCalibration c = memory::measured_memory_calibration(p, profile, StateBytes::loom_adamw());
  CHECK(c.outside_bytes == 3000);
  CHECK(c.activation_scale == doctest::Approx(1.2));  // 1200 saved against the traced 1000
}

TEST_CASE("the communication breakdown: each kind's busy time on its stream, hidden by compute or not") {
  FixedCost cost;
  cost.by_kind = {{OpKind::AllGather, 2}, {OpKind::ReduceScatter, 4}, {OpKind::Compute, 3}};
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), instr(OpKind::Compute, Phase::Forward, "a"), wait(0),
                             instr(OpKind::AllGather, Phase::Backward, "", 1), wait(1, Phase::Backward),
                             instr(OpKind::Compute, Phase::Backward, "a"),
                             instr(OpKind::ReduceScatter, Phase::Backward, "", 2, {ir::Role::Grads, 2}), wait(2, Phase::Backward)});
  SimResult r = simulate({p}, cost, StateBytes::loom_adamw(), /*timeline=*/false);
  // The forward gather hides under a (0-2), the backward one does not (3-5), then a (5-8) and
  // the reduce-scatter (8-12): 4 s of all-gathers, 4 of reduce-scatters, 6 of them exposed.
  CHECK(r.step_s == doctest::Approx(12));
  CHECK(r.exposed_comm_s == doctest::Approx(6));
  CHECK(r.comm_busy_s == std::map<std::string, double>{{"all_gather on params", 4}, {"reduce_scatter on grads", 4}});
}

TEST_CASE("on a cluster whose collectives share the device with compute, a collective issued before other work is priced beside it") {
  // One node of two CPU ranks: an all-gather of 2 MB moves half of it, 1 MB, in 1 ms on idle
  // cores and 4 ms beside the ranks' compute (their latencies 1 us apart from that).
  auto link = [](double gbps, double latency_us) {
    return nlohmann::json{{"GBps", gbps}, {"efficiency", 1}, {"latency_us", latency_us}};
  };
  nlohmann::json cluster{{"name", "here"},
                         {"nodes", 1},
                         {"devices_per_node", 2},
                         {"device",
                          {{"name", "cpu"},
                           {"memory", "1GiB"},
                           {"matrix_tflops", {{"bf16", 1}, {"fp32", 1}}},
                           {"matrix_efficiency_by_gflop", {{0, 1}}},
                           {"memory_GBps", 1},
                           {"memory_efficiency_by_mb", {{0, 1}}}}},
                         {"intra_node", link(1, 1)},
                         {"intra_node_beside_compute", link(0.25, 1)},
                         {"inter_node", link(1, 1)},
                         {"host", link(1, 1)}};
  ClusterCost cost(parse_cluster(cluster.dump(), "here.json"), Precision::Fp32, 2);
  // The first gather is waited for after a compute (beside it); the second at once (alone).
  ir::Instr a = instr(OpKind::Compute, Phase::Forward, "a");
  a.flops = 2e9;  // 2 ms at 1 TFLOP/s
  ir::Program p = one_param({instr(OpKind::AllGather, Phase::Forward, "", 0), a, wait(0), instr(OpKind::AllGather, Phase::Forward, "", 1),
                             wait(1)});
  p.instrs[0].bytes = p.instrs[3].bytes = 2'000'000;
  SimResult r = simulate({p}, cost);
  REQUIRE(r.events.size() == 3);
  CHECK(r.events[0].stream == "collective");
  CHECK(r.events[0].end_s - r.events[0].start_s == doctest::Approx(4e-3 + 1e-6));
  CHECK(r.events[2].stream == "collective");
  CHECK(r.events[2].end_s - r.events[2].start_s == doctest::Approx(1e-3 + 1e-6));
  CHECK(r.step_s == doctest::Approx(4e-3 + 1e-6 + 1e-3 + 1e-6));  // a hides under the first gather
  // The memory-aware passes price a gather where they would move it: beside compute.
  MemoryPlanning planning;
  planning.plan_with(std::make_shared<ClusterCost>(parse_cluster(cluster.dump(), "here.json"), Precision::Fp32, 2));
  CHECK(planning.instruction_seconds(p, p.instrs[3]) == doctest::Approx(4e-3 + 1e-6));
  CHECK(planning.instruction_seconds(p, p.instrs[1]) == doctest::Approx(2e-3));  // compute as it is
  // Without the field a collective costs the same wherever it runs.
  cluster.erase("intra_node_beside_compute");
  r = simulate({p}, ClusterCost(parse_cluster(cluster.dump(), "here.json"), Precision::Fp32, 2));
  CHECK(r.events[0].end_s - r.events[0].start_s == doctest::Approx(1e-3 + 1e-6));
}
