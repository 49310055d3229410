// The lowering pipeline: every pass, in order, in one place (pass_pipeline.cpp). The IR is
// verified after lowering and after every pass; a violation is an InternalError naming the
// pass. LOOM_DEBUG=1 logs each pass, LOOM_DEBUG=2 also prints the IR after each pass that
// changed it, LOOM_TIME_PASSES=1 times them.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
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
};

struct PipelineDebug {
  int level = 0;          // LOOM_DEBUG
  bool time = false;      // LOOM_TIME_PASSES
  std::ostream* out = nullptr;
  // The IR verifier after every pass; off, only the pipeline's result is verified (lower_step.h):
  // for the planner, which lowers thousands of programs of a pipeline the tests check pass by pass.
  bool verify_each_pass = true;
  static PipelineDebug from_environment(std::ostream& out);
};

// The passes, in the order they run.
const std::vector<std::pair<std::string, passes::Pass>>& pipeline_passes();

// Runs `list` over `program`, verifying after each pass (unless debug says not to); appends to `records`.
ir::Program run_passes(ir::Program program, const passes::PassInputs& inputs,
                       const std::vector<std::pair<std::string, passes::Pass>>& list, std::vector<PassRecord>* records,
                       const PipelineDebug& debug);

}  // namespace loom
