// Building the reference models as LibTorch modules, and extracting module trees from any module.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "lang/module_tree.h"

namespace loom {

// A built language model: its module and its forward from token ids (B, T) to logits (B, T, V).
struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor& ids)> forward;
  int64_t vocab_size = 0;
  int64_t max_seq = 0;
};

// Builds a named model on `device` (torch::kMeta for structure only), each tensor initialised
// from the default CPU generator's seed and its name (nn::materialize). Throws UserError for
// unknown names.
BuiltModel build_model(const std::string& name, torch::Device device = torch::kCPU);
// The model with zero-element placeholders for its parameters and buffers: nn::materialize()
// gives a rank memory for what it holds (models/nn/deferred_init.h).
BuiltModel build_model_without_memory(const std::string& name);

// One module that owns parameters, with its parameters named by their first owner: a tied
// tensor (GPT's lm_head.weight) keeps one name ("wte.weight") and one tensor.
struct ModuleParameters {
  torch::nn::Module* module;
  std::string path;                   // "" for the root
  std::vector<std::string> names;     // full names, first owner's for tied tensors
  std::vector<torch::Tensor> tensors; // in the same order
};

// Every module owning parameters, in named_modules() order.
std::vector<ModuleParameters> parameters_by_module(torch::nn::Module& root);

// The torch-free module tree of any module: named_modules() order, type names,
// direct parameters and buffers, tied tensors marked.
ModuleTree extract_module_tree(const torch::nn::Module& root, const std::string& model_name);

}  // namespace loom
