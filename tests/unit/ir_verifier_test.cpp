// The IR verifier's rules, one broken program each: a well-formed ZeRO-3 step, changed by hand
// the way a faulty pass would change it, and the violation the verifier must name.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "backend/ir/verifier.h"
#include "backend/lower/step_program.h"
#include "backend/passes/pass_pipeline.h"

using namespace loom;
using ir::OpKind;
using ir::Phase;

// Whether verify() names `violation`; a failing check prints what it named instead.
#define CHECK_VIOLATION(program, violation) \
  CHECK_MESSAGE(ir::verify(program).find(violation) != std::string::npos, ir::verify(program))

namespace {

// emb (wte) -> fc (w1) -> proj (w2), sharded over two ranks: each parameter gathered before its
// forward and again before its backward, each gradient reduce-scattered, then the step.
ir::Program zero3_step() {
  ir::OpTrace t;
  t.model = "toy";
  t.params = {{"wte", 1000, 4}, {"w1", 100, 4}, {"w2", 100, 4}};
  t.forward = {{"emb", {"wte"}}, {"fc", {"w1"}}, {"proj", {"w2"}}};
  return run_passes(ir::lower(t, {2, 2, 2, 2}, /*grad_norm=*/false), {}, pipeline_passes(), nullptr, {});
}

// Index of the first instruction of `kind` in `phase` that acts on parameter `param` (or runs module `param`).
size_t first(const ir::Program& p, OpKind kind, Phase phase, const std::string& param) {
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::Instr& in = p.instrs[i];
    if (in.kind != kind || in.phase != phase) continue;
    if (in.module == param || (!in.params.empty() && p.params[static_cast<size_t>(in.params[0])].name == param)) return i;
  }
  FAIL("no " << ir::op_name(kind) << " of " << param);
  return 0;
}

size_t wait_of(const ir::Program& p, size_t launch) {
  for (size_t i = launch + 1; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == OpKind::Wait && p.instrs[i].handle == p.instrs[launch].handle) return i;
  FAIL("no wait of instruction " << launch);
  return 0;
}

size_t step_of(const ir::Program& p) { return first(p, OpKind::OptimizerStep, Phase::Step, ""); }

void insert(ir::Program& p, size_t at, ir::Instr in) { p.instrs.insert(p.instrs.begin() + static_cast<long>(at), std::move(in)); }
void erase(ir::Program& p, size_t at) { p.instrs.erase(p.instrs.begin() + static_cast<long>(at)); }

ir::Instr instr(OpKind kind, Phase phase, std::vector<int> params, int handle = -1) {
  ir::Instr in;
  in.kind = kind;
  in.phase = phase;
  in.params = std::move(params);
  in.handle = handle;
  return in;
}

}  // namespace

TEST_CASE("the IR verifier accepts the pipeline's ZeRO-3 step") {
  ir::Program p = zero3_step();
  CHECK(ir::verify_complete(p) == "");
}

TEST_CASE("the IR verifier: an instruction names parameters that exist") {
  ir::Program p = zero3_step();
  p.instrs[first(p, OpKind::Compute, Phase::Forward, "fc")].params.push_back(7);
  CHECK_VIOLATION(p, "(fwd compute fc): refers to parameter 7, which does not exist");
}

TEST_CASE("the IR verifier: handles are fresh, issued before they are waited, and waited once") {
  ir::Program p = zero3_step();
  size_t gather = first(p, OpKind::AllGather, Phase::Forward, "w1");
  SUBCASE("a collective that reuses a handle") {
    p.instrs[gather].handle = p.instrs[first(p, OpKind::AllGather, Phase::Forward, "wte")].handle;
    CHECK_VIOLATION(p, "an asynchronous instruction (a collective or a copy) needs a fresh handle");
  }
  SUBCASE("a wait for a handle nothing issued") {
    insert(p, 0, instr(OpKind::Wait, Phase::Forward, {}, 4242));
    CHECK_VIOLATION(p, "waits for %4242, which was never issued");
  }
  SUBCASE("a collective waited twice") {
    size_t wait = wait_of(p, gather);
    insert(p, wait + 1, p.instrs[wait]);
    CHECK_VIOLATION(p, "waits for %" + std::to_string(p.instrs[gather].handle) + " twice");
  }
  SUBCASE("the step before a reduction's wait") {
    size_t reduce = first(p, OpKind::ReduceScatter, Phase::Backward, "w2");
    ir::Instr wait = p.instrs[wait_of(p, reduce)];
    erase(p, wait_of(p, reduce));
    p.instrs.push_back(wait);
    CHECK_VIOLATION(p, "updates parameters before waiting for gradient reduction %" + std::to_string(wait.handle));
  }
  SUBCASE("a state copy never waited") {
    int w2 = p.instrs[first(p, OpKind::AllGather, Phase::Forward, "w2")].params[0];
    ir::Instr offload = instr(OpKind::OffloadStates, Phase::Backward, {w2}, p.new_handle());
    p.instrs.push_back(offload);
    CHECK(ir::verify(p) == "instruction " + std::to_string(p.instrs.size() - 1) + " (bwd offload_states): copy %" +
                               std::to_string(offload.handle) + " is never waited");
  }
  SUBCASE("a collective never waited") {
    ir::Instr loss = instr(OpKind::LossReduce, Phase::Step, {}, p.new_handle());
    p.instrs.push_back(loss);
    CHECK(ir::verify(p) == "instruction " + std::to_string(p.instrs.size() - 1) + " (step " + ir::op_name(OpKind::LossReduce) +
                               "): collective %" + std::to_string(loss.handle) + " is never waited");
  }
}

TEST_CASE("the IR verifier: a sharded parameter is gathered, waited for, used, and released once") {
  ir::Program p = zero3_step();
  SUBCASE("gathered where parameters are not sharded") {
    p.sharding.params = 1;
    CHECK_VIOLATION(p, "gathers although parameters are not sharded");
  }
  size_t gather = first(p, OpKind::AllGather, Phase::Forward, "w1");
  SUBCASE("used before its gather's wait") {
    size_t wait = wait_of(p, gather);
    ir::Instr moved = p.instrs[wait];
    erase(p, wait);
    insert(p, first(p, OpKind::Compute, Phase::Forward, "fc") + 1, moved);
    CHECK_VIOLATION(p, "(fwd compute fc): uses w1 before waiting for its gather");
  }
  SUBCASE("gathered twice") {
    ir::Instr again = p.instrs[gather];
    again.handle = p.new_handle();
    insert(p, wait_of(p, gather) + 1, again);
    CHECK_VIOLATION(p, "gathers w1, which is already gathered");
  }
  SUBCASE("released twice") {
    size_t release = first(p, OpKind::Release, Phase::Forward, "w1");
    insert(p, release + 1, p.instrs[release]);
    CHECK_VIOLATION(p, "releases w1, which is not gathered");
  }
  SUBCASE("still gathered at the end of the step") {
    erase(p, first(p, OpKind::Release, Phase::Backward, "w1"));
    CHECK(ir::verify(p) == "end of step: w1 is still gathered");
  }
}

TEST_CASE("the IR verifier: compute runs in every micro-batch, recomputation only in backward") {
  ir::Program p = zero3_step();
  SUBCASE("a compute in only the last micro-batch") {
    p.instrs[first(p, OpKind::Compute, Phase::Forward, "fc")].runs_in = ir::MicroBatches::Last;
    CHECK_VIOLATION(p, "(fwd compute fc): computes in only some micro-batches");
  }
  SUBCASE("a recomputation in forward") {
    p.instrs[first(p, OpKind::Compute, Phase::Forward, "fc")].kind = OpKind::Recompute;
    CHECK_VIOLATION(p, "(fwd recompute fc): recomputes outside the backward");
  }
}

TEST_CASE("the IR verifier: gradients go to the host before the step, their updated values come back after it") {
  ir::Program p = zero3_step();
  size_t step = step_of(p);
  int w2 = p.instrs[first(p, OpKind::AllGather, Phase::Forward, "w2")].params[0];
  SUBCASE("an offload after the step") {
    p.instrs.push_back(instr(OpKind::Offload, Phase::Step, {w2}));
    CHECK_VIOLATION(p, "copies gradients to the host after the optimizer step");
  }
  SUBCASE("a reload before the step") {
    insert(p, step, instr(OpKind::Reload, Phase::Step, {w2}));
    CHECK_VIOLATION(p, "copies values to the device before the optimizer step updated them");
  }
  SUBCASE("a reload of what was not offloaded") {
    p.instrs.push_back(instr(OpKind::Reload, Phase::Step, {w2}));
    CHECK_VIOLATION(p, "reloads w2, which was not offloaded");
  }
}

TEST_CASE("the IR verifier: optimizer states move only where this rank's optimizer updates them, and leave once") {
  ir::Program p = zero3_step();
  int w2 = p.instrs[first(p, OpKind::AllGather, Phase::Forward, "w2")].params[0];
  SUBCASE("states the optimizer does not update") {
    std::vector<int>& updated = p.instrs[step_of(p)].params;
    updated.erase(std::remove(updated.begin(), updated.end(), w2), updated.end());
    insert(p, 0, instr(OpKind::OffloadStates, Phase::Forward, {w2}, p.new_handle()));
    CHECK_VIOLATION(p, "moves the optimizer states of w2, which this rank's optimizer does not update");
  }
  SUBCASE("states offloaded twice") {
    insert(p, 0, instr(OpKind::OffloadStates, Phase::Forward, {w2}, p.new_handle()));
    insert(p, 1, instr(OpKind::OffloadStates, Phase::Forward, {w2}, p.new_handle()));
    CHECK_VIOLATION(p, "instruction 1 (fwd offload_states): offloads the optimizer states of w2, which are not on the device");
  }
}
