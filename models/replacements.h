// The alternative implementations the reference models offer to replace() (slapo.txt §3.2.1),
// and how a schedule's replacements are applied to a built model.
#pragma once

#include <vector>

#include <torch/nn/module.h>

#include "lang/replacements.h"

namespace loom {

// Registers the models' implementations in ReplacementRegistry::global() (once), so that the
// language checks replace() against them.
void register_model_replacements();

// Makes each module of `root` named in `replacements` run its implementation. The schedule
// was checked (the implementation exists and fits the module's type); a path that is not a
// module of `root`, or a module that cannot take the implementation, is an InternalError.
void apply_replacements(torch::nn::Module& root, const std::vector<ModuleReplacement>& replacements);

}  // namespace loom
