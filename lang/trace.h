// Directive traces as replayable artefacts: canonical .sched text and JSON, and replay of either.
#pragma once

#include <string>
#include <vector>

#include "lang/directive.h"
#include "lang/schedule.h"

namespace loom {

// The trace as a .sched file: a header comment (model, world, knob values) then
// one canonical call per directive. Evaluating it reproduces the same trace.
std::string trace_to_sched(const Schedule& schedule);
// The trace as JSON: {"loom_trace": 1, "model", "world", "local_world", "knobs", "directives": [...]}.
std::string trace_to_json(const Schedule& schedule);
// Parses trace JSON back into directives; throws UserError on malformed input.
std::vector<Directive> directives_from_json(const std::string& json_text, const std::string& file_name = "<json>");
// Applies directives, in order, to a schedule through the primitive registry.
void replay(const std::vector<Directive>& directives, Schedule& schedule);
// Empty when both traces have the same effects in the same order, else what first differs.
std::string compare_traces(const std::vector<Directive>& a, const std::vector<Directive>& b);

}  // namespace loom
