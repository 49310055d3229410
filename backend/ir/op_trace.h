// The forward order of compute ops of one model: each call of a module that owns
// parameters, in execution order, with the parameters it uses. Torch-free; traced
// through Loom's call interception (models/trace.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::ir {

struct TracedParam {
  std::string name;    // full name; a tied tensor appears under its first owner's name
  int64_t numel = 0;
  int64_t element_bytes = 4;
};

struct TracedOp {
  std::string module;               // module path, e.g. "h.0.attn.c_attn"
  std::vector<std::string> params;  // parameters it uses (full names)
};

struct OpTrace {
  std::string model;
  std::vector<TracedParam> params;  // every unique parameter, in first-use order
  std::vector<TracedOp> forward;    // compute ops in execution order
};

}  // namespace loom::ir
