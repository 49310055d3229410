// The reference-model catalogue, seen without LibTorch: names, sizes, module trees.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lang/module_tree.h"

namespace loom {

struct ModelInfo {
  std::string name;         // e.g. "gpt2", "llama:tiny"
  std::string description;
  int64_t published_params; // the published size (0 for the tiny test configurations)
};

// Every named configuration, in a stable order: the reference models, then those registered
// with LOOM_REGISTER_MODEL (models/zoo_torch.h).
std::vector<ModelInfo> model_catalog();
// The module tree of a named model, built on the meta device (no memory).
// Unknown names are a UserError with the closest names as a hint.
std::shared_ptr<const ModuleTree> module_tree_of(const std::string& name);

}  // namespace loom
