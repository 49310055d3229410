// Traces a reference model's compute ops for the IR: one forward on the meta device
// (no memory, any size) through Loom's call interception, recording each call of a module
// that owns parameters, in order, with the parameters it uses.
#pragma once

#include <string>

#include "backend/ir/op_trace.h"

namespace loom {

ir::OpTrace trace_model(const std::string& model_name);

}  // namespace loom
