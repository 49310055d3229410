// Traces a reference model's compute ops for the IR: one forward and loss, as the trainer
// runs them, on the meta device (no memory, any size) through Loom's call interception,
// recording each call of a module that owns parameters, in order, with the parameters it
// uses, and, from the aten ops it dispatches, its FLOPs and saved activation bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ir/op_trace.h"
#include "lang/replacements.h"

namespace loom {

// `replacements`: the schedule's replace()s, applied before tracing, so the ops carry what the
// replacing implementations compute and keep. Throws check_seq_within_context's UserError for a sequence
// longer than the model's context.
ir::OpTrace trace_model(const std::string& model_name, ir::TraceShape shape = {},
                        const std::vector<ModuleReplacement>& replacements = {});

// Throws UserError, in the command line's terms (--seq), when `seq` is longer than model
// `model_name`'s context of `max_seq` tokens (the positions it takes: a learned table's length, or
// for rotary positions the sequence it is trained at), which no run would train.
void check_seq_within_context(const std::string& model_name, int64_t max_seq, int64_t seq);

}  // namespace loom
