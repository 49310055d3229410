// The forward order of compute ops of one model: each call of a module that owns
// parameters, in execution order, with the parameters it uses, its FLOPs and the activation
// bytes it saves for backward at one micro-batch's shape. Torch-free; traced on the meta
// device through Loom's call interception (backend/instrument/model_trace.h).
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
  // Work that follows the op outside any module owning parameters (the attention scores
  // between c_attn and c_proj, the loss after the head) counts toward it.
  double flops = 0;                 // forward FLOPs of its matrix products (2 per multiply-add)
  int64_t activation_bytes = 0;     // bytes its forward keeps for backward (aten_op_cost.h)
  int64_t input_bytes = 0;          // its first input's bytes (a tensor-parallel input gradient's)
  int64_t output_bytes = 0;         // its output's bytes (a tensor-parallel sync's, a pipeline send's)
};

// The shape a trace is taken at: one micro-batch of `micro_batch` sequences of `seq` tokens.
struct TraceShape {
  int64_t micro_batch = 1;
  int64_t seq = 8;
};

struct OpTrace {
  std::string model;
  TraceShape shape;
  std::vector<TracedParam> params;  // every unique parameter, in first-use order
  std::vector<TracedOp> forward;    // compute ops in execution order
};

}  // namespace loom::ir
