// Whole-schedule rules (issue #5 §1): what no single primitive call can check, because it
// depends on the whole evaluated schedule. They run after evaluation and before lowering
// (`loom check`, `loom run`, `loom explain`). Each rule is one file in verifier/rules/; the
// list, in the order they run, is in schedule_rules.cpp. Torch-free.
#pragma once

#include <cstdint>

#include "lang/schedule.h"

namespace loom {

struct RuleOptions {
  int64_t memory_limit = 0;  // bytes of model states per rank (--memory-limit); 0: no limit
};

// Throws UserError, located at the directive that breaks a rule, for the first rule broken.
void check_schedule_rules(const Schedule& schedule, const RuleOptions& options = {});

}  // namespace loom
