// The lowering pipeline: every pass, in order, in one place (pass_pipeline.cpp). The IR is
// verified after lowering and after every pass; a violation is an InternalError naming the
// pass. LOOM_DEBUG=1 logs each pass, LOOM_DEBUG=2 also prints the IR after each pass that
// changed it, LOOM_TIME_PASSES=1 times them.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "backend/ir/ir.h"
#include "backend/ir/op_trace.h"
#include "backend/passes/pass.h"

namespace loom {

struct PassRecord {
  std::string pass;
  bool changed = false;
  double ms = 0;
  size_t instructions = 0;
  // The program after the pass, hashed: two lowerings' records compare pass by pass (a re-plan
  // names the first pass that planned otherwise than the running program's did).
  size_t digest = 0;
};

// The first pass whose program differs between two lowerings' records of one pipeline (or the
// first pass only one of them ran), or none (the empty string) where every pass left the same
// program.
std::string first_differing_pass(const std::vector<PassRecord>& a, const std::vector<PassRecord>& b);

struct PipelineDebug {
  int level = 0;          // LOOM_DEBUG
  bool time = false;      // LOOM_TIME_PASSES
  std::ostream* out = nullptr;
  // The IR verifier after every pass; off, only the pipeline's result is verified (lower_step.h):
  // for the planner, which lowers thousands of programs of a pipeline the tests check pass by pass.
  bool verify_each_pass = true;
  static PipelineDebug from_environment(std::ostream& out);
};

// A pass of the pipeline, and the group of the two-level loop it plans its times with (pass.h).
struct PipelinePass {
  std::string name;
  passes::Pass run = nullptr;
  TimedGroup group = TimedGroup::None;
};
using PassList = std::vector<PipelinePass>;

// The passes, in the order they run.
const PassList& pipeline_passes();

// What a group of passes does, and the pipeline's passes in it: "unsharding (selective_unshard)".
std::string describe_timed_group(TimedGroup group);

// Runs `list` over `program`, verifying after each pass (unless debug says not to); appends to
// `records`. A pass of a group in inputs.memory.settled plans with what that group settled on; one
// of a group after inputs.memory.timed_through runs without instruction times.
ir::Program run_passes(ir::Program program, const passes::PassInputs& inputs, const PassList& list, std::vector<PassRecord>* records,
                       const PipelineDebug& debug);

}  // namespace loom
